// swift-tools-version:6.0
// swift-capture: the AVFoundation capture model on Linux (V4L2, TurboJPEG, ALSA).
import PackageDescription

let package = Package(
    name: "swift-capture",
    products: [
        .library(name: "Capture", targets: ["Capture"]),
        // The preview window (SDL2); its own product so that `Capture` never needs SDL2.
        .library(name: "CapturePreview", targets: ["CapturePreview"]),
        .executable(name: "capture", targets: ["CaptureTool"]),
        .executable(name: "capture-bench", targets: ["CaptureBench"]),
        .executable(name: "still-camera", targets: ["StillCamera"]),
        .executable(name: "camera-check", targets: ["CameraCheck"]),
        .executable(name: "live-capture", targets: ["LiveCapture"]),
    ],
    targets: [
        // System libraries, found through pkg-config (Debian: libv4l-dev, libturbojpeg0-dev,
        // libjpeg62-turbo-dev, libasound2-dev; libsdl2-dev for CapturePreview only).
        .systemLibrary(name: "CLibV4L2", path: "Sources/CSystem/libv4l2", pkgConfig: "libv4l2",
                       providers: [.apt(["libv4l-dev"])]),
        .systemLibrary(name: "CTurboJPEG", path: "Sources/CSystem/turbojpeg", pkgConfig: "libturbojpeg",
                       providers: [.apt(["libturbojpeg0-dev"])]),
        .systemLibrary(name: "CLibJPEG", path: "Sources/CSystem/libjpeg", pkgConfig: "libjpeg",
                       providers: [.apt(["libjpeg62-turbo-dev"])]),
        .systemLibrary(name: "CSDL2", path: "Sources/CSystem/sdl2",
                       providers: [.apt(["libsdl2-dev"])]),
        .systemLibrary(name: "CALSA", path: "Sources/CSystem/alsa", pkgConfig: "alsa",
                       providers: [.apt(["libasound2-dev"])]),
        // Only what Swift cannot import: ioctl request codes, variadic calls, packed structs.
        .target(name: "CV4L2Shim", dependencies: ["CLibV4L2", "CTurboJPEG", "CLibJPEG", "CALSA"],
                cSettings: [.unsafeFlags(["-O3"])]),
        .target(name: "Capture", dependencies: ["CV4L2Shim"]),
        .target(name: "CapturePreview", dependencies: ["Capture", "CSDL2", "CTurboJPEG"]),
        .executableTarget(name: "CaptureTool", dependencies: ["Capture", "CapturePreview"], path: "Sources/CaptureTool"),
        .executableTarget(name: "StillCamera", dependencies: ["Capture", "CapturePreview"], path: "Examples/StillCamera"),
        .executableTarget(name: "CameraCheck", dependencies: ["Capture"], path: "Examples/CameraCheck"),
        .executableTarget(name: "LiveCapture", dependencies: ["Capture", "CapturePreview"], path: "Examples/LiveCapture"),
        // Counts the process's heap allocations (defines malloc); only capture-bench links it.
        .target(name: "CAllocCounter", path: "Benchmarks/CAllocCounter"),
        .executableTarget(name: "CaptureBench", dependencies: ["Capture", "CV4L2Shim", "CAllocCounter"],
                          path: "Benchmarks/CaptureBench"),
        // Helpers both test targets use: JPEG decoding, colour-bar checks, descriptor counts.
        .target(name: "CaptureTestSupport", dependencies: ["Capture", "CV4L2Shim"], path: "Tests/CaptureTestSupport"),
        .testTarget(name: "CaptureTests", dependencies: ["Capture", "CV4L2Shim", "CaptureTestSupport"]),
        .testTarget(name: "CapturePreviewTests", dependencies: ["CapturePreview", "Capture", "CaptureTestSupport"]),
        .testTarget(name: "CaptureDriverTests", dependencies: ["Capture", "CV4L2Shim", "CaptureTestSupport"]),
    ]
)
