// videoRotationAngle on every connection: the transform itself checked byte for byte against
// the geometry for every format it takes, and a video data output turning and mirroring the
// virtual camera's bars through a running session.
import CaptureVirtual
import CaptureImaging
import CaptureBackend
import CaptureSystem
import CaptureTestSupport
import Foundation
import Testing
@testable import Capture

@Suite(.timeLimit(.minutes(2))) struct VideoRotationTests {
    /// Where output pixel (x, y) of a `w`x`h` source turned by `angle` and then mirrored comes from.
    static func source(_ x: Int, _ y: Int, w: Int, h: Int, angle: Int, mirrored: Bool) -> (Int, Int) {
        let outW = angle == 90 || angle == 270 ? h : w
        let x = mirrored ? outW - 1 - x : x
        switch angle {
        case 90: return (y, h - 1 - x)
        case 180: return (w - 1 - x, h - 1 - y)
        case 270: return (w - 1 - y, x)
        default: return (x, y)
        }
    }

    /// Offsets of a pixel's luma, and of its chroma pair (nil for formats without chroma), in a
    /// tightly packed frame.
    static func offsets(_ f: PixelFormat, _ x: Int, _ y: Int, w: Int, h: Int) -> (luma: [Int], cb: Int?, cr: Int?) {
        switch f {
        case .yuyv: return ([y * 2 * w + 2 * x], y * 2 * w + 4 * (x / 2) + 1, y * 2 * w + 4 * (x / 2) + 3)
        case .uyvy: return ([y * 2 * w + 2 * x + 1], y * 2 * w + 4 * (x / 2), y * 2 * w + 4 * (x / 2) + 2)
        case .nv12, .nv21:
            let c = w * h + (y / 2) * w + 2 * (x / 2)
            return ([y * w + x], f == .nv12 ? c : c + 1, f == .nv12 ? c + 1 : c)
        case .nv16: return ([y * w + x], w * h + y * w + 2 * (x / 2), w * h + y * w + 2 * (x / 2) + 1)
        case .yuv420, .yvu420:
            let q = (w / 2) * (h / 2), c = (y / 2) * (w / 2) + x / 2
            let first = w * h + c, second = w * h + q + c
            return ([y * w + x], f == .yuv420 ? first : second, f == .yuv420 ? second : first)
        case .yuv422p:
            let q = (w / 2) * h, c = y * (w / 2) + x / 2
            return ([y * w + x], w * h + c, w * h + q + c)
        case .grey: return ([y * w + x], nil, nil)
        case .rgb24, .bgr24: return ((0..<3).map { 3 * (y * w + x) + $0 }, nil, nil)
        default: return ((0..<4).map { 4 * (y * w + x) + $0 }, nil, nil)
        }
    }

    /// Every output pixel's light (RGB: every byte) is its source pixel's; its chroma is the
    /// chroma of the source pixel that lands on the first pixel of its chroma block. On noise,
    /// for every angle, with and without mirroring.
    @Test(arguments: [
        PixelFormat.yuyv, .uyvy, .nv12, .nv21, .nv16, .yuv420, .yvu420, .yuv422p, .grey, .rgb24, .bgr24, .xbgr32,
        PixelFormatConverter.bgra32,
    ])
    func everyPixelLandsWhereTheTurnPutsIt(format: PixelFormat) throws {
        let (w, h) = (24, 10)
        let count = try #require(FrameTransform(angle: 0, mirrored: false)?.output(format, width: w, height: h)).byteCount
        var generator = SystemRandomNumberGenerator()
        let input = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let bytesPerLine = try #require(FrameTransform(angle: 0, mirrored: false)?.output(format, width: w, height: h)).bytesPerLine
        for angle in [0, 90, 180, 270] {
            for mirrored in [false, true] {
                let t = try #require(FrameTransform(angle: angle, mirrored: mirrored))
                let out = try #require(t.output(format, width: w, height: h))
                #expect((out.width, out.height) == (angle % 180 == 0 ? (w, h) : (h, w)))
                var output = [UInt8](repeating: 0, count: out.byteCount)
                try input.withUnsafeBytes { src in
                    let image = ImageBuffer(
                        pixelFormat: format, width: w, height: h, colorRange: .limited,
                        plane0: PlaneView(base: src.baseAddress, count: src.count, bytesPerLine: bytesPerLine))
                    try output.withUnsafeMutableBytes { try t.apply(image, into: $0) }
                }
                var wrong: [String] = []
                for y in 0..<out.height {
                    for x in 0..<out.width {
                        let (sx, sy) = Self.source(x, y, w: w, h: h, angle: angle, mirrored: mirrored)
                        let o = Self.offsets(format, x, y, w: out.width, h: out.height)
                        let i = Self.offsets(format, sx, sy, w: w, h: h)
                        if o.luma.map({ output[$0] }) != i.luma.map({ input[$0] }) { wrong.append("light (\(x),\(y))") }
                        // Chroma is checked at the first pixel of each output chroma block.
                        let first = x % 2 == 0 && (y % 2 == 0 || ![PixelFormat.nv12, .nv21, .yuv420, .yvu420].contains(format))
                        if first, let oc = o.cb, let ocr = o.cr, let ic = i.cb, let icr = i.cr,
                            (output[oc], output[ocr]) != (input[ic], input[icr])
                        {
                            wrong.append("chroma (\(x),\(y))")
                        }
                    }
                }
                #expect(wrong.isEmpty, "\(format) \(angle)° mirrored \(mirrored): \(wrong.count) wrong, first \(wrong.prefix(4))")
            }
        }
    }

    @Test func anglesMapToOrientations() {
        #expect(VideoOrientation(rotationAngle: 90) == .portrait && VideoOrientation.portrait.rotationAngle == 90)
        #expect(VideoOrientation(rotationAngle: 180) == .landscapeLeft && VideoOrientation(rotationAngle: 270) == .portraitUpsideDown)
        #expect(VideoOrientation(rotationAngle: -90) == .portraitUpsideDown && VideoOrientation(rotationAngle: 360) == .landscapeRight)
        #expect(VideoOrientation(rotationAngle: 45) == nil && VideoOrientation(rotationAngle: .nan) == nil)
        #expect(VideoOrientation(rotationAngle: .infinity) == nil && VideoOrientation(rotationAngle: 90.5) == nil)
    }

    /// A running session's video data output turned 90° delivers 480x640 frames whose first rows
    /// are the sensor's left column (the white bar) and last rows its right one (black); 270°
    /// the other way round; 180° and a mirror put white on the right. A frame consumer is left
    /// unturned: the preview's says it supports turning (it shows it), others say they do not.
    @Test(arguments: [PixelFormat.nv12, .yuyv, .yuv420])
    func aDataOutputTurnsAndMirrorsTheFrames(format: PixelFormat) throws {
        let rig = try VirtualSessionRig(
            "Turn \(format)", modes: [.init(format, width: 640, height: 480, frameRates: [30])], position: .external)
        defer { rig.uninstall() }
        let (session, output, collector) = (rig.session, rig.output, rig.collector)
        // A consumer that shows the turn itself (the preview's): it notes each frame's size.
        final class SizeNoter: FrameConsumer, @unchecked Sendable {
            let sizes = Locked<[VideoDimensions?]>([])
            func consume(_ sample: SampleBuffer, from connection: CaptureConnection) {
                let d = sample.dimensions
                sizes.withLock { $0.append(d) }
            }
            func consumeDrop(_ drop: DroppedFrames, from connection: CaptureConnection) {}
        }
        let noter = SizeNoter()
        let consumer = FrameConsumerPort(noter, showsOrientation: true)
        let latest = Locked<[ObjectIdentifier: SampleBuffer]>([:])
        collector.onFrame = { s in latest.withLock { $0[ObjectIdentifier(output)] = s } }
        session.addFrameConsumer(consumer)
        // A consumer whose product does not show the turn (the recorder's, the server's) says so.
        let plain = FrameConsumerPort(SizeNoter())
        session.addFrameConsumer(plain)
        let connection = try #require(output.connection(with: .video))
        let consumerConnection = try #require(consumer.connection(with: .video))
        #expect(connection.isVideoRotationAngleSupported(90) && !connection.isVideoRotationAngleSupported(45))
        #expect(connection.isVideoMirroringSupported && consumerConnection.isVideoRotationAngleSupported(270))
        let plainConnection = try #require(plain.connection(with: .video))
        #expect(!plainConnection.isVideoOrientationSupported && !plainConnection.isVideoRotationAngleSupported(90))
        try session.start()
        defer { session.stopRunning() }

        /// A frame handed out wholly after now: the second delivered from now on (the first may
        /// have been on its way while a setting changed).
        func nextFrame(of o: CaptureVideoDataOutput, _ counter: FrameCollector) -> SampleBuffer? {
            let n = counter.count
            guard counter.wait(for: n + 2, timeout: 20) else { return nil }
            return latest.withLock { $0[ObjectIdentifier(o)] }
        }
        /// Light at a point given as fractions of the frame.
        func light(_ s: SampleBuffer, _ fx: Double, _ fy: Double) -> Int? {
            guard let p = s.imageBuffer else { return nil }
            let x = Int(fx * Double(p.width)), y = Int(fy * Double(p.height))
            let offset = format == .yuyv ? y * p.bytesPerRowOfPlane(0) + 2 * x : y * p.bytesPerRowOfPlane(0) + x
            return p.withUnsafeBytes(ofPlane: 0) { Int($0[offset]) }
        }
        // White (180) and black (16) bars, away from the counter and band (first quarter of the sensor's rows).
        let cases: [(angle: Double, mirrored: Bool, size: (Int, Int), white: (Double, Double), black: (Double, Double))] = [
            (90, false, (480, 640), (0.2, 1.0 / 32), (0.2, 31.0 / 32)),
            (270, false, (480, 640), (0.8, 31.0 / 32), (0.8, 1.0 / 32)),
            (180, false, (640, 480), (31.0 / 32, 0.2), (1.0 / 32, 0.2)),
            (0, true, (640, 480), (31.0 / 32, 0.8), (1.0 / 32, 0.8)),
            (0, false, (640, 480), (1.0 / 32, 0.8), (31.0 / 32, 0.8)),
        ]
        for c in cases {
            connection.videoRotationAngle = c.angle
            connection.isVideoMirrored = c.mirrored
            #expect(connection.videoRotationAngle == c.angle && connection.videoOrientation == VideoOrientation(rotationAngle: c.angle))
            let s = try #require(nextFrame(of: output, collector))
            let name = "\(format) \(c.angle)° mirrored \(c.mirrored)"
            #expect(s.dimensions == VideoDimensions(width: c.size.0, height: c.size.1), "\(name): \(String(describing: s.dimensions))")
            #expect(s.pixelFormat == format)
            #expect(
                light(s, c.white.0, c.white.1).map { abs($0 - 180) <= 2 } == true,
                "\(name): white \(String(describing: light(s, c.white.0, c.white.1)))")
            #expect(
                light(s, c.black.0, c.black.1).map { abs($0 - 16) <= 2 } == true,
                "\(name): black \(String(describing: light(s, c.black.0, c.black.1)))")
        }
        // The consumer's frames stay as the sensor gives them whatever its connection says.
        consumerConnection.videoRotationAngle = 90
        let n = noter.sizes.withLock { $0.count }
        #expect(waitUntil(timeout: 20) { noter.sizes.withLock { $0.count } >= n + 3 })
        #expect(noter.sizes.withLock { $0[(n + 2)...] }.allSatisfy { $0 == VideoDimensions(width: 640, height: 480) })
        // (Frames replaced while the delegate was busy are late, not lost to turning.)
        let dropped = output.statistics.dropped
        #expect(dropped[.outOfBuffers] == nil && dropped[.corrupt] == nil, "\(dropped)")
    }

    /// An angle the connection refuses traps, naming the rule, as AVFoundation raises.
    @Test func anUnsupportedAngleTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let cam = VirtualCamera(name: "Turn trap", position: .back)
            VirtualCamera.install(cam)
            guard let device = CaptureDevice.device(withUniqueID: cam.uniqueID), let input = try? CaptureDeviceInput(device: device)
            else { return }
            let session = CaptureSession()
            session.addInput(input)
            let output = CaptureVideoDataOutput()
            session.addOutput(output)
            output.connection(with: .video)?.videoRotationAngle = 45
        }
        let stderr = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
        #expect(stderr.contains("videoRotationAngle = 45.0: not supported"), "\(stderr.prefix(600))")
    }
}
