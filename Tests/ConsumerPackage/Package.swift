// swift-tools-version:6.0
// A consumer of swift-capture written the way AVFoundation code is written, built against the
// public API only (a package of its own sees no `package` declarations), with warnings as errors.
// scripts/test builds it and Tests/tools/check-tools.sh runs it on the virtual camera and on vivid.
import PackageDescription

let package = Package(
    name: "avfoundation-style-consumer",
    dependencies: [.package(name: "swift-capture", path: "../..")],
    targets: [
        .executableTarget(
            name: "consumer",
            dependencies: [.product(name: "Capture", package: "swift-capture")],
            swiftSettings: [.unsafeFlags(["-warnings-as-errors"])])
    ]
)
