// swift-tools-version:6.0
// swift-capture: the AVFoundation capture model on Linux (V4L2, TurboJPEG, ALSA).
import PackageDescription

let package = Package(
    name: "swift-capture",
    products: [
        .library(name: "Capture", targets: ["Capture"]),
        // The preview window (SDL2); its own product so that `Capture` never needs SDL2.
        .library(name: "CapturePreview", targets: ["CapturePreview"]),
        // The HTTP camera server (libmicrohttpd); its own product so that `Capture` never needs it.
        .library(name: "CaptureServer", targets: ["CaptureServer"]),
        .executable(name: "capture", targets: ["CaptureTool"]),
        // Every command of `capture`, which hands it the ones that need the products' libraries.
        .executable(name: "capture-full", targets: ["CaptureFullTool"]),
        .executable(name: "capture-bench", targets: ["CaptureBench"]),
        .executable(name: "still-camera", targets: ["StillCamera"]),
        .executable(name: "camera-check", targets: ["CameraCheck"]),
        .executable(name: "live-capture", targets: ["LiveCapture"]),
        // Movie recording (FFmpeg); its own product, so that `Capture` never needs FFmpeg.
        .library(name: "CaptureRecording", targets: ["CaptureRecording"]),
        // Encoders as stages of the session's pipeline (FFmpeg), for the recorder and the servers.
        .library(name: "CaptureCodecs", targets: ["CaptureCodecs"]),
        // `/stream.mp4` for the HTTP server: fragmented MP4 from the shared H.264 stage (FFmpeg's
        // encoder); its own product, so that the server never needs FFmpeg.
        .library(name: "CaptureServerMP4", targets: ["CaptureServerMP4"]),
        // Live H.264 and Opus to browsers over WebRTC (GStreamer's webrtcbin); its own product, so
        // that `Capture` and the other products never need GStreamer.
        .library(name: "CaptureWebRTC", targets: ["CaptureWebRTC"]),
        // An RTSP server (gst-rtsp-server) for NVRs, Home Assistant, VLC and ffmpeg: the shared
        // H.264 encode to every client; its own product, so the others never need gst-rtsp-server.
        .library(name: "CaptureRTSP", targets: ["CaptureRTSP"]),
        // Metadata output: QR codes, barcodes (zxing-cpp) and faces (OpenCV); its own product, so
        // that `Capture` never needs either library.
        .library(name: "CaptureVision", targets: ["CaptureVision"]),
        // The metadata output's objects on a preview layer (`transformedMetadataObject(for:)`): for
        // apps that link both products, so that neither needs the other's libraries.
        .library(name: "CaptureVisionPreview", targets: ["CaptureVisionPreview"]),
        // `/metadata` on the HTTP server: the metadata output's detections as server-sent events,
        // for apps that link both products, so that neither needs the other's libraries.
        .library(name: "CaptureVisionServer", targets: ["CaptureVisionServer"]),
    ],
    targets: [
        // System libraries, found through pkg-config (Debian: libv4l-dev, libturbojpeg0-dev,
        // libjpeg62-turbo-dev, libasound2-dev; libsdl2-dev and libpng-dev for CapturePreview only,
        // libmicrohttpd-dev for CaptureServer only).
        .systemLibrary(
            name: "CLibV4L2", path: "Sources/CSystem/libv4l2", pkgConfig: "libv4l2",
            providers: [.apt(["libv4l-dev"])]),
        .systemLibrary(
            name: "CTurboJPEG", path: "Sources/CSystem/turbojpeg", pkgConfig: "libturbojpeg",
            providers: [.apt(["libturbojpeg0-dev"])]),
        .systemLibrary(
            name: "CLibJPEG", path: "Sources/CSystem/libjpeg", pkgConfig: "libjpeg",
            providers: [.apt(["libjpeg62-turbo-dev"])]),
        .systemLibrary(
            name: "CSDL2", path: "Sources/CSystem/sdl2",
            providers: [.apt(["libsdl2-dev"])]),
        .systemLibrary(
            name: "CPNG", path: "Sources/CSystem/png", pkgConfig: "libpng",
            providers: [.apt(["libpng-dev"])]),
        .systemLibrary(
            name: "CALSA", path: "Sources/CSystem/alsa", pkgConfig: "alsa",
            providers: [.apt(["libasound2-dev"])]),
        .systemLibrary(
            name: "CMicroHTTPD", path: "Sources/CSystem/microhttpd", pkgConfig: "libmicrohttpd",
            providers: [.apt(["libmicrohttpd-dev"])]),
        // Linux headers Glibc's module leaves out (eventfd): a header, nothing linked.
        .systemLibrary(name: "CLinux", path: "Sources/CSystem/linux"),
        // The layers, bottom to top; a target depends only on targets above it in this list.
        // System: the one syscall funnel, typed errno, descriptors, poll/eventfd/inotify, `Locked`.
        // It links libc only (scripts/test's "layers" step holds it to that).
        .target(name: "CaptureSystem", dependencies: ["CLinux"], path: "Sources/CaptureSystem"),
        // Backend contract and the public vocabulary: `VideoSource`, `AudioSource`, `FrameBuffer`,
        // `BackendError` (what backends throw: facts, no words), `CaptureError`, pixel formats,
        // times, audio buffers.
        .target(name: "CaptureBackend", dependencies: ["CaptureSystem"], path: "Sources/CaptureBackend"),
        // Backends: V4L2 cameras, ALSA microphones. Each C shim holds only what Swift cannot
        // import: ioctl request codes and packed structs (V4L2), a variadic callback (ALSA).
        .target(name: "CV4L2Shim", dependencies: ["CLibV4L2"]),
        .target(
            name: "CaptureV4L2", dependencies: ["CaptureBackend", "CaptureSystem", "CV4L2Shim"],
            path: "Sources/CaptureV4L2"),
        .target(name: "CALSAShim", dependencies: ["CALSA"]),
        .target(
            name: "CaptureALSA", dependencies: ["CaptureBackend", "CaptureSystem", "CALSA", "CALSAShim"],
            path: "Sources/CaptureALSA"),
        // Imaging: images to JPEG, pixel-format conversion, JPEG markers, EXIF (no object model).
        // Its C kernels: the libjpeg encoder (libjpeg reports errors by longjmp, which Swift cannot
        // catch) and colour conversion rows.
        .target(name: "CJPEGShim", dependencies: ["CTurboJPEG", "CLibJPEG"]),
        .target(
            name: "CaptureImaging", dependencies: ["CaptureBackend", "CaptureSystem", "CTurboJPEG", "CJPEGShim"],
            path: "Sources/CaptureImaging"),
        // libdbus-1, dlopen'ed at run time (no header, no link): the core builds and runs without it.
        .target(name: "CDBusShim"),
        // The desktop portal's camera interface over a small D-Bus client (sandboxed apps' camera access).
        .target(name: "CapturePortal", dependencies: ["CaptureSystem", "CDBusShim"], path: "Sources/CapturePortal"),
        // The virtual camera and microphone: in-process backends, public API.
        .target(
            name: "CaptureVirtual", dependencies: ["CaptureImaging", "CaptureBackend", "CaptureSystem", "CTurboJPEG"],
            path: "Sources/CaptureVirtual"),
        // The object model (devices, session, outputs, the frame pipeline); re-exports the
        // vocabulary, imaging and virtual-device types users need.
        .target(
            name: "Capture",
            dependencies: [
                "CaptureVirtual", "CaptureImaging", "CaptureV4L2", "CaptureALSA",
                "CapturePortal", "CaptureBackend", "CaptureSystem", "CTurboJPEG",
            ]),
        // Preview: the camera in a window (SDL2); a product of its own, so the core needs no SDL2.
        .target(name: "CapturePreview", dependencies: ["Capture", "CSDL2", "CTurboJPEG", "CPNG"]),
        // Recording: FFmpeg's muxers and libx264 (Debian: libavformat-dev, libavcodec-dev,
        // libavutil-dev); a product of its own, so the core needs no FFmpeg.
        .systemLibrary(
            name: "CFFmpeg", path: "Sources/CSystem/ffmpeg", pkgConfig: "libavformat",
            providers: [.apt(["libavformat-dev", "libavcodec-dev", "libavutil-dev"])]),
        // Encoded products as pipeline stages (H.264 through FFmpeg's encoders), shared by every
        // consumer that asks for the same settings; a product of its own, so the core needs no FFmpeg.
        .target(
            name: "CaptureCodecs", dependencies: ["Capture", "CaptureBackend", "CaptureImaging", "CaptureSystem", "CFFmpeg"]),
        .target(name: "CaptureRecording", dependencies: ["Capture", "CaptureCodecs", "CaptureSystem", "CFFmpeg"]),
        // Only what Swift cannot call in libmicrohttpd (the variadic MHD_start_daemon); the server's alone.
        .target(name: "CCaptureServerShim", dependencies: ["CMicroHTTPD"]),
        // Serving: MJPEG stream, snapshot, state and the camera web app over HTTP (libmicrohttpd); a
        // product of its own, so the core needs no libmicrohttpd.
        .target(name: "CaptureServer", dependencies: ["Capture", "CaptureSystem", "CMicroHTTPD", "CCaptureServerShim"]),
        // Fragmented MP4 over HTTP (`/stream.mp4`): the server's route for the shared H.264 stage's
        // units, boxes written here; a product of its own, so the server needs no FFmpeg.
        .target(name: "CaptureServerMP4", dependencies: ["Capture", "CaptureServer", "CaptureCodecs", "CaptureSystem"]),
        // GStreamer 1.22 with webrtcbin (Debian: libgstreamer1.0-dev, libgstreamer-plugins-base1.0-dev,
        // libgstreamer-plugins-bad1.0-dev, libglib2.0-dev; at run time gstreamer1.0-plugins-base, -good,
        // -bad and gstreamer1.0-nice): CaptureWebRTC's alone. Every GStreamer .pc
        // file carries -pthread (through gmodule), which SwiftPM refuses with a warning on every build:
        // pkg-config gives GLib's paths, and the shim finds GStreamer's headers through include/gst, a
        // link to /usr/include/gstreamer-1.0/gst (the same on every Debian architecture).
        .systemLibrary(
            name: "CGStreamer", path: "Sources/CSystem/gstreamer", pkgConfig: "glib-2.0",
            providers: [
                .apt(["libgstreamer1.0-dev", "libgstreamer-plugins-base1.0-dev", "libgstreamer-plugins-bad1.0-dev", "libglib2.0-dev"])
            ]),
        // What Swift cannot call well in GStreamer (variadic GObject calls, promises, pad probes,
        // graph changes while buffers flow): the WebRTC graph behind opaque handles.
        .target(
            name: "CCaptureWebRTCShim", dependencies: ["CGStreamer"],
            cSettings: [.headerSearchPath("../CSystem/gstreamer/include")],
            // (A C target does not import the module, so its `link` lines are said again here.)
            linkerSettings: [
                "gstwebrtc-1.0", "gstsdp-1.0", "gstrtp-1.0", "gstapp-1.0", "gstbase-1.0", "gstreamer-1.0", "gobject-2.0", "glib-2.0",
            ].map { .linkedLibrary($0) }),
        // WebRTC: the shared H.264 stage's units and the microphone as Opus to browsers, one
        // webrtcbin per viewer (a WHEP answerer's engine); a product of its own, so the core needs no GStreamer.
        .target(name: "CaptureWebRTC", dependencies: ["Capture", "CaptureCodecs", "CaptureServer", "CaptureSystem", "CCaptureWebRTCShim"]),
        // gst-rtsp-server 1.22 (Debian: libgstrtspserver-1.0-dev, libgstreamer1.0-dev,
        // libgstreamer-plugins-base1.0-dev, libglib2.0-dev): CaptureRTSP's alone, without
        // webrtcbin's packages. Its headers come through include/gst, a link to
        // /usr/include/gstreamer-1.0/gst, as CGStreamer's (gstreamer-rtsp-server-1.0.pc carries -pthread
        // too, so pkg-config gives GLib's paths).
        .systemLibrary(
            name: "CGStreamerRTSP", path: "Sources/CSystem/gstreamer-rtsp", pkgConfig: "glib-2.0",
            providers: [
                .apt(["libgstrtspserver-1.0-dev", "libgstreamer1.0-dev", "libgstreamer-plugins-base1.0-dev", "libglib2.0-dev"])
            ]),
        // The server, its main loop and its shared media behind one opaque handle.
        .target(
            name: "CCaptureRTSPShim", dependencies: ["CGStreamerRTSP"],
            cSettings: [.headerSearchPath("../CSystem/gstreamer-rtsp/include")],
            linkerSettings: [
                "gstrtspserver-1.0", "gstrtsp-1.0", "gstapp-1.0", "gstbase-1.0", "gstreamer-1.0", "gio-2.0", "gobject-2.0", "glib-2.0",
            ].map { .linkedLibrary($0) }),
        // RTSP: the shared H.264 stage's units to every RTSP client through one shared media.
        .target(name: "CaptureRTSP", dependencies: ["Capture", "CaptureCodecs", "CaptureSystem", "CCaptureRTSPShim"]),
        // Detection (Debian: libzxing-dev, libopencv-core-dev, libopencv-imgproc-dev,
        // libopencv-objdetect-dev, opencv-data for the cascades): C++ libraries, reached through one
        // shim with a C interface. OpenCV's one .pc file (opencv4, in libopencv-dev) links all of its
        // ~55 modules, so COpenCV has none: its module map names the three the shim calls, and the
        // shim finds their headers through include/opencv2, a link to /usr/include/opencv4/opencv2.
        .systemLibrary(
            name: "CZXing", path: "Sources/CSystem/zxing", pkgConfig: "zxing", providers: [.apt(["libzxing-dev"])]),
        .systemLibrary(
            name: "COpenCV", path: "Sources/CSystem/opencv",
            providers: [.apt(["libopencv-core-dev", "libopencv-imgproc-dev", "libopencv-objdetect-dev", "opencv-data"])]),
        .target(
            name: "CVisionShim", dependencies: ["CZXing", "COpenCV"],
            cxxSettings: [.headerSearchPath("../CSystem/opencv/include")],
            // (A C++ target does not import the module, so its `link` lines are said again here.)
            linkerSettings: ["opencv_objdetect", "opencv_imgproc", "opencv_core"].map { .linkedLibrary($0) }),
        // The metadata output (`CaptureMetadataOutput`): detection beside capture, through the
        // frame consumer seam; a product of its own, so the core needs neither library.
        .target(name: "CaptureVision", dependencies: ["Capture", "CaptureBackend", "CaptureImaging", "CaptureSystem", "CVisionShim"]),
        // Metadata objects converted to a preview layer's coordinates (both products, neither library).
        .target(name: "CaptureVisionPreview", dependencies: ["CaptureVision", "CapturePreview", "Capture"]),
        // Detections as server-sent events on the HTTP server (`/metadata`; both products, neither library).
        .target(name: "CaptureVisionServer", dependencies: ["CaptureVision", "CaptureServer", "Capture", "CaptureBackend"]),
        // The `capture` tool's command line (options, help, errors, choosing a device), the commands
        // the core library runs (devices, snap, stream, audio) and the others' usage: both programs'.
        .target(name: "CaptureToolCore", dependencies: ["Capture", "CaptureSystem"], path: "Sources/CaptureToolCore"),
        // `capture`: the core alone, so it starts at once; it hands the commands that need the
        // products' libraries to capture-full (beside it, or in ../libexec/capture when installed).
        .executableTarget(name: "CaptureTool", dependencies: ["CaptureToolCore"], path: "Sources/CaptureTool"),
        // capture-full: every command, with the products (FFmpeg, SDL2, libmicrohttpd, GStreamer, OpenCV, zxing).
        .executableTarget(
            name: "CaptureFullTool",
            dependencies: [
                "CaptureToolCore", "Capture", "CaptureCodecs", "CapturePreview", "CaptureRecording", "CaptureServer", "CaptureServerMP4",
                "CaptureSystem", "CaptureWebRTC", "CaptureRTSP", "CaptureVision", "CaptureVisionPreview", "CaptureVisionServer",
            ],
            path: "Sources/CaptureFullTool"),
        .executableTarget(
            name: "StillCamera", dependencies: ["Capture", "CapturePreview", "CaptureVision", "CaptureVisionPreview"],
            path: "Examples/StillCamera"),
        .executableTarget(name: "CameraCheck", dependencies: ["Capture"], path: "Examples/CameraCheck"),
        .executableTarget(name: "LiveCapture", dependencies: ["Capture", "CapturePreview"], path: "Examples/LiveCapture"),
        // Counts the process's heap allocations (defines malloc); only capture-bench links it.
        .target(name: "CAllocCounter", path: "Benchmarks/CAllocCounter"),
        // The library's frame paths on recorded frames, for capture-bench and the encoder tests.
        .target(
            name: "CaptureBenchSupport", dependencies: ["Capture", "CaptureImaging", "CaptureBackend"],
            path: "Benchmarks/CaptureBenchSupport"),
        .executableTarget(
            name: "CaptureBench",
            dependencies: [
                "Capture", "CaptureBenchSupport", "CaptureV4L2", "CaptureALSA",
                "CaptureVirtual", "CaptureImaging", "CaptureBackend",
                "CaptureSystem", "CAllocCounter",
                // `preview`: the window against SDL and TurboJPEG called directly.
                "CapturePreview", "CSDL2", "CTurboJPEG",
                // `record`: the recorder's encode and write path.
                "CaptureRecording", "CaptureCodecs",
                // `metadata`: the metadata output against its libraries called directly.
                "CaptureVision", "CVisionShim",
            ],
            path: "Benchmarks/CaptureBench"),
        // Helpers both test targets use: JPEG decoding, colour-bar checks, descriptor counts.
        .target(
            name: "CaptureTestSupport", dependencies: ["Capture", "CaptureBackend", "CTurboJPEG"],
            path: "Tests/CaptureTestSupport"),
        .testTarget(
            name: "CaptureTests",
            dependencies: [
                "Capture", "CaptureV4L2", "CaptureALSA", "CaptureVirtual",
                "CaptureImaging", "CaptureBackend", "CaptureSystem", "CapturePortal",
                "CV4L2Shim", "CJPEGShim", "CTurboJPEG", "CaptureTestSupport", "CaptureBenchSupport",
            ]),
        // (The metadata outlines' window test needs CaptureVision's output and its preview conversion.)
        .testTarget(
            name: "CapturePreviewTests",
            dependencies: ["CapturePreview", "Capture", "CaptureTestSupport", "CaptureVision", "CaptureVisionPreview"]),
        .testTarget(
            name: "CaptureRecordingTests",
            dependencies: [
                "CaptureRecording", "CaptureCodecs", "Capture", "CaptureSystem", "CaptureTestSupport",
                "CaptureBenchSupport",
            ]),
        .testTarget(
            name: "CaptureCodecsTests",
            dependencies: [
                "CaptureCodecs", "Capture", "CaptureBackend", "CaptureSystem", "CaptureTestSupport", "CaptureBenchSupport",
                // (FFmpeg's decoders check the audio stage's packets.)
                "CFFmpeg",
            ]),
        .testTarget(
            name: "CaptureServerTests",
            dependencies: [
                "CaptureServer", "CaptureServerMP4", "CaptureCodecs", "CaptureRecording", "Capture", "CaptureTestSupport",
                // (`/metadata`: a metadata output served.)
                "CaptureVisionServer", "CaptureVision",
            ]),
        .testTarget(
            name: "CaptureWebRTCTests",
            dependencies: ["CaptureWebRTC", "CaptureServer", "CaptureServerMP4", "CaptureRecording", "Capture", "CaptureTestSupport"]),
        .testTarget(
            name: "CaptureRTSPTests", dependencies: ["CaptureRTSP", "CaptureServer", "CaptureServerMP4", "Capture", "CaptureTestSupport"]),
        // Its pictures come from make-pictures.py (python-barcode, scikit-image), run by the tests.
        .testTarget(
            name: "CaptureVisionTests",
            dependencies: [
                "CaptureVision", "CaptureVisionPreview", "CapturePreview", "CaptureCodecs", "Capture", "CaptureTestSupport",
            ],
            exclude: ["make-pictures.py"]),
        .testTarget(
            name: "CaptureDriverTests",
            dependencies: [
                "Capture", "CaptureV4L2", "CaptureALSA", "CaptureVirtual",
                "CaptureImaging", "CaptureBackend", "CaptureSystem",
                "CV4L2Shim", "CTurboJPEG", "CALSA", "CaptureTestSupport", "CaptureRecording",
            ]),
    ]
)
