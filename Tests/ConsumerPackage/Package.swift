// swift-tools-version:6.0
// A consumer of swift-capture written the way AVFoundation code is written, built against the
// public API only (a package of its own sees no `package` declarations), with warnings as errors,
// linking every library product. Tests/tools/check-versioned-consumer.sh (scripts/test) depends on
// a tagged copy of the checkout by version (CAPTURE_CONSUMER_URL, `from: "0.1.0"`), as a package
// author would, which SwiftPM refuses if any target of a product has unsafe flags; without it, on
// the checkout by path. Tests/tools/check-tools.sh runs it on the virtual camera and on vivid.
import PackageDescription

let products = [
    "Capture", "CapturePreview", "CaptureServer", "CaptureServerMP4", "CaptureRecording", "CaptureCodecs",
    "CaptureWebRTC", "CaptureRTSP", "CaptureVision", "CaptureVisionPreview", "CaptureVisionServer",
]
let swiftCapture: Package.Dependency =
    if let url = Context.environment["CAPTURE_CONSUMER_URL"] {
        .package(url: url, from: "0.1.0")
    } else {
        .package(name: "swift-capture", path: "../..")
    }

let package = Package(
    name: "avfoundation-style-consumer",
    dependencies: [swiftCapture],
    targets: [
        .executableTarget(
            name: "consumer",
            dependencies: products.map { .product(name: $0, package: "swift-capture") },
            swiftSettings: [.unsafeFlags(["-warnings-as-errors"])])
    ]
)
