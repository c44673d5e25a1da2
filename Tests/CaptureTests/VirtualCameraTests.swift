import CaptureVirtual
import CaptureV4L2
import CaptureBackend
import Foundation
import Testing
import CTurboJPEG
import CV4L2Shim
@testable import Capture

/// A camera with a name no other test uses, so tests can run in parallel.
private func makeCamera(
    _ formats: [VirtualCamera.Mode] = VirtualCamera.defaultModes,
    position: DevicePosition = .front, function: String = #function
) -> VirtualCamera {
    VirtualCamera(name: "Test \(function) \(UUID().uuidString.prefix(8))", position: position, formats: formats)
}

private func open(
    _ camera: VirtualCamera, _ format: PixelFormat = .yuyv, _ w: Int = 320, _ h: Int = 240,
    fps: Double = 30
) throws -> any VideoSource {
    let s = try camera.makeSource()
    _ = try s.setFormat(pixelFormat: format, width: w, height: h)
    _ = try s.setFrameInterval(FrameInterval(framesPerSecond: fps))
    return s
}

/// Waits for the next good frame, skipping nothing: fails on anything else.
private func nextGood(_ s: any VideoSource, timeout: Duration = .seconds(2)) throws -> FrameBuffer {
    switch try s.nextFrame(timeout: timeout) {
    case .frame(let f): return f
    case let other:
        Issue.record("expected a frame, got \(other.summary)")
        throw CaptureError(.timedOut, "no frame")
    }
}

/// Keeps a frame (and so its buffer) in a collection.
private final class HeldFrame {
    let frame: FrameBuffer
    init(_ f: consuming FrameBuffer) { frame = f }
}

private func luma(_ f: borrowing FrameBuffer, _ x: Int, _ y: Int) -> UInt8 {
    patternLuma(
        f.image.plane0.bytes, layout: PatternLayout(f.image.pixelFormat)!, width: f.image.width,
        height: f.image.height, x: x, y: y)!
}

/// Expected 75 % bars in Rec. 601 limited range (Y, Cb, Cr) and as sRGB, computed by hand
/// from vivid's table (191 = 75 %): white, yellow, cyan, green, magenta, red, blue, black.
private let barsYCbCr: [(UInt8, UInt8, UInt8)] = [
    (180, 128, 128), (161, 44, 142), (131, 156, 44), (112, 72, 58),
    (84, 184, 198), (65, 100, 212), (35, 212, 114), (16, 128, 128),
]
private let barsRGB: [(Int, Int, Int)] = [
    (191, 191, 191), (191, 191, 0), (0, 191, 191), (0, 191, 0),
    (191, 0, 191), (191, 0, 0), (0, 0, 191), (0, 0, 0),
]

private func close(_ a: UInt8, _ b: UInt8, _ tolerance: Int = 1) -> Bool { abs(Int(a) - Int(b)) <= tolerance }

/// A frame's light as one byte a pixel (MJPEG decoded to grey), for comparing pictures.
private func greyPicture(_ f: borrowing FrameBuffer) -> [UInt8]? {
    let w = f.image.width, h = f.image.height, bytes = f.image.plane0.bytes
    if f.image.pixelFormat == .mjpeg {
        guard let tj = tjInitDecompress(), let base = bytes.baseAddress else { return nil }
        defer { tjDestroy(tj) }
        var grey = [UInt8](repeating: 0, count: w * h)
        let rc = grey.withUnsafeMutableBufferPointer { out in
            tjDecompress2(
                tj, base.assumingMemoryBound(to: UInt8.self), UInt(bytes.count), out.baseAddress, Int32(w), Int32(w),
                Int32(h), Int32(TJPF_GRAY.rawValue), 0)
        }
        return rc == 0 ? grey : nil
    }
    guard let layout = PatternLayout(f.image.pixelFormat) else { return nil }
    var grey = [UInt8](repeating: 0, count: w * h)
    for y in 0..<h { for x in 0..<w { grey[y * w + x] = patternLuma(bytes, layout: layout, width: w, height: h, x: x, y: y) ?? 0 } }
    return grey
}

@Suite struct VirtualCameraTests {
    @Test func modesAreListedAsSourceFormats() throws {
        let camera = makeCamera()
        let s = try camera.makeSource()
        let formats = try s.formats()
        #expect(formats.count == 12)
        for f in [PixelFormat.yuyv, .nv12, .mjpeg] {
            let sizes = formats.filter { $0.pixelFormat == f }.map { VideoDimensions(width: $0.width, height: $0.height) }
            #expect(
                sizes == [
                    VideoDimensions(width: 320, height: 240), VideoDimensions(width: 640, height: 480),
                    VideoDimensions(width: 1280, height: 720), VideoDimensions(width: 1920, height: 1080),
                ])
        }
        let hd = try #require(formats.first { $0.pixelFormat == .yuyv && $0.width == 1280 })
        guard case .discrete(let intervals) = hd.intervals.kind else { Issue.record("not discrete"); return }
        #expect(intervals.contains(FrameInterval(numerator: 1, denominator: 30)))
        #expect(intervals.contains(FrameInterval(numerator: 1, denominator: 15)))
        #expect(formats.first { $0.pixelFormat == .mjpeg }?.isCompressed == true)
        #expect(formats.first { $0.pixelFormat == .nv12 }?.isCompressed == false)
        #expect(s.info.path == "virtual:\(camera.name)")
        #expect(s.info.uniqueID == camera.uniqueID)
        #expect(s.info.position == .front)
    }

    @Test func setFormatAdjustsLikeADriver() throws {
        let s = try makeCamera().makeSource()
        let a = try s.setFormat(pixelFormat: .yuyv, width: 1000, height: 700)
        #expect(a.dimensions == VideoDimensions(width: 1280, height: 720))
        #expect(a.planes == [PlaneFormat(bytesPerLine: 2560, sizeImage: 1280 * 720 * 2)])
        #expect(a.colorRange == .limited)
        let n = try s.setFormat(pixelFormat: .nv12, width: 640, height: 480)
        #expect(n.planes == [PlaneFormat(bytesPerLine: 640, sizeImage: 640 * 480 * 3 / 2)])
        // A format the camera does not have lands on its first mode's format.
        let other = try s.tryFormat(pixelFormat: .rgb24, width: 640, height: 480)
        #expect(other.pixelFormat == .yuyv)
        #expect(try s.currentFormat().pixelFormat == .nv12)
        #expect(try s.setFrameInterval(FrameInterval(framesPerSecond: 14)) == FrameInterval(numerator: 1, denominator: 15))
        #expect(try s.frameInterval() == FrameInterval(numerator: 1, denominator: 15))
    }

    @Test func framesComeAtTheModeRateWithSequenceStepsOfOne() throws {
        let camera = makeCamera()
        let s = try open(camera, fps: 30)
        let period = Int64((try s.frameInterval().seconds * 1e9).rounded())
        let before = CaptureTime.now()
        try s.startStreaming(bufferCount: 4)
        defer { s.stopStreaming() }
        var sequences: [UInt32] = []
        var stamps: [CaptureTime] = []
        // 45 frames (1.5 s at 30 fps): a count, not a wall-clock window a descheduled test overshoots.
        for _ in 0..<45 {
            let f = try nextGood(s)
            sequences.append(f.metadata.sequence)
            stamps.append(f.metadata.timestamp)
        }
        #expect(sequences.first == 0)
        // Steps of one, but where the sensor found every buffer full (a loaded machine that did
        // not dequeue for four frame times) and counted each frame it lost.
        let gaps = zip(sequences, sequences.dropFirst()).map { Int64($1) - Int64($0) - 1 }
        #expect(gaps.allSatisfy { $0 >= 0 }, "\(sequences)")
        let lost = camera.statistics.framesDroppedForLackOfBuffers
        #expect(UInt64(gaps.reduce(0, +)) <= lost, "\(sequences), \(lost) lost for lack of buffers")
        #expect(zip(stamps, stamps.dropFirst()).allSatisfy { $1 - $0 > 0 })
        // Never faster than the mode: the first frame comes at once, tick n is due n periods after
        // the stream started at the earliest, and a frame is stamped at or after its tick. Load
        // only makes frames later.
        let early = zip(sequences, stamps).filter { $1 - before < Int64($0) * period }
        #expect(early.isEmpty, "frames before their tick: \(early.map { ($0, $1 - before) })")
        // At this mode's rate, not a slower one: a late frame makes one step long and the next
        // short, so the shortest step per tick stays near a period however loaded the machine.
        let ticks = zip(sequences, stamps)
        let steps = zip(ticks, ticks.dropFirst()).map { Double($1.1 - $0.1) / Double($1.0 - $0.0) }
        #expect(try #require(steps.min()) < 1.5 * Double(period), "steps per tick \(steps.map { $0 / 1e6 }) ms")
        #expect(camera.framesProduced >= UInt64(sequences.count))
    }

    @Test(arguments: [PixelFormat.yuyv, .uyvy, .yvyu, .vyuy, .nv12, .nv21, .nv16, .nv61, .yuv420, .yvu420, .yuv422p, .grey])
    func colourBarsMatchVivid(format: PixelFormat) throws {
        let camera = makeCamera([VirtualCamera.Mode(format, width: 640, height: 480)])
        let s = try open(camera, format, 640, 480)
        try s.startStreaming(bufferCount: 3)
        defer { s.stopStreaming() }
        let f = try nextGood(s)
        let w = 640, h = 480, row = h * 3 / 4
        let bytes = f.image.plane0.bytes
        #expect(bytes.count == (try s.currentFormat()).sizeImage)
        for (i, expected) in barsYCbCr.enumerated() {
            let x = (2 * i + 1) * w / 16 & ~1
            let (y, cb, cr): (UInt8, UInt8, UInt8)
            switch format {
            case .yuyv: (y, cb, cr) = (bytes[row * w * 2 + x * 2], bytes[row * w * 2 + x * 2 + 1], bytes[row * w * 2 + x * 2 + 3])
            case .uyvy: (y, cb, cr) = (bytes[row * w * 2 + x * 2 + 1], bytes[row * w * 2 + x * 2], bytes[row * w * 2 + x * 2 + 2])
            case .yvyu: (y, cr, cb) = (bytes[row * w * 2 + x * 2], bytes[row * w * 2 + x * 2 + 1], bytes[row * w * 2 + x * 2 + 3])
            case .vyuy: (y, cr, cb) = (bytes[row * w * 2 + x * 2 + 1], bytes[row * w * 2 + x * 2], bytes[row * w * 2 + x * 2 + 2])
            case .nv21: (y, cr, cb) = (bytes[row * w + x], bytes[w * h + row / 2 * w + x], bytes[w * h + row / 2 * w + x + 1])
            case .nv61: (y, cr, cb) = (bytes[row * w + x], bytes[w * h + row * w + x], bytes[w * h + row * w + x + 1])
            case .yuv422p:
                (y, cb, cr) = (bytes[row * w + x], bytes[w * h + row * w / 2 + x / 2], bytes[w * h + w * h / 2 + row * w / 2 + x / 2])
            case .grey: (y, cb, cr) = (bytes[row * w + x], expected.1, expected.2)
            case .nv12: (y, cb, cr) = (bytes[row * w + x], bytes[w * h + row / 2 * w + x], bytes[w * h + row / 2 * w + x + 1])
            case .nv16: (y, cb, cr) = (bytes[row * w + x], bytes[w * h + row * w + x], bytes[w * h + row * w + x + 1])
            case .yuv420:
                (y, cb, cr) = (
                    bytes[row * w + x], bytes[w * h + row / 2 * w / 2 + x / 2],
                    bytes[w * h + w * h / 4 + row / 2 * w / 2 + x / 2]
                )
            case .yvu420:
                (y, cr, cb) = (
                    bytes[row * w + x], bytes[w * h + row / 2 * w / 2 + x / 2],
                    bytes[w * h + w * h / 4 + row / 2 * w / 2 + x / 2]
                )
            default: Issue.record("untested format"); return
            }
            #expect(
                close(y, expected.0) && close(cb, expected.1) && close(cr, expected.2),
                "\(format) bar \(i): got \(y) \(cb) \(cr), want \(expected)")
        }
    }

    @Test func rgbBarsAreFullRange() throws {
        let camera = makeCamera([VirtualCamera.Mode(.bgr24, width: 320, height: 240)])
        let s = try open(camera, .bgr24)
        #expect(try s.currentFormat().colorRange == .full)
        try s.startStreaming(bufferCount: 2)
        defer { s.stopStreaming() }
        let f = try nextGood(s)
        let bytes = f.image.plane0.bytes
        for (i, rgb) in barsRGB.enumerated() {
            let p = 180 * 320 * 3 + ((2 * i + 1) * 320 / 16) * 3
            #expect(
                abs(Int(bytes[p + 2]) - rgb.0) <= 2 && abs(Int(bytes[p + 1]) - rgb.1) <= 2 && abs(Int(bytes[p]) - rgb.2) <= 2,
                "bar \(i): BGR \(bytes[p]) \(bytes[p + 1]) \(bytes[p + 2])")
        }
    }

    @Test func frameCounterIsReadableAndMatchesTheSequence() throws {
        let camera = makeCamera()
        let s = try open(camera, .nv12, 640, 480, fps: 60)
        try s.startStreaming(bufferCount: 4)
        defer { s.stopStreaming() }
        camera.injectDroppedFrames(1000)  // make the numbers big enough to use many bits
        var last: UInt32?
        for _ in 0..<10 {
            let f = try nextGood(s)
            let n = VirtualCamera.frameNumber(in: f.image)
            #expect(n == f.metadata.sequence)
            if let last, let n { #expect(n > last) }
            last = n
        }
        #expect((last ?? 0) >= 1000)
        // The moving box moves: its band differs between consecutive frames.
        let a = try nextGood(s), b = try nextGood(s)
        let g = PatternGeometry(width: 640, height: 480)
        let band = g.counterRows + g.bandRows / 2
        #expect(luma(a, g.boxX(sequence: a.metadata.sequence) + 1, band) > 200)
        #expect(luma(b, g.boxX(sequence: b.metadata.sequence) + 1, band) > 200)
        #expect(g.boxX(sequence: a.metadata.sequence) != g.boxX(sequence: b.metadata.sequence))
        #expect(luma(a, g.boxX(sequence: b.metadata.sequence) + g.boxSize + 4, band) < 20)
    }

    private func decode(_ jpeg: UnsafeRawBufferPointer) throws -> (width: Int, height: Int, rgb: [UInt8]) {
        let tj = try #require(tjInitDecompress())
        defer { tjDestroy(tj) }
        var w: Int32 = 0, h: Int32 = 0, sub: Int32 = 0, cs: Int32 = 0
        let src = jpeg.baseAddress!.assumingMemoryBound(to: UInt8.self)
        #expect(tjDecompressHeader3(tj, src, UInt(jpeg.count), &w, &h, &sub, &cs) == 0)
        var rgb = [UInt8](repeating: 0, count: Int(w * h * 3))
        let rc = rgb.withUnsafeMutableBufferPointer {
            tjDecompress2(tj, src, UInt(jpeg.count), $0.baseAddress, w, 0, h, Int32(TJPF_RGB.rawValue), 0)
        }
        #expect(rc == 0, "tjDecompress2: \(String(cString: tjGetErrorStr2(tj)))")
        return (Int(w), Int(h), rgb)
    }

    private func hasMarker(_ bytes: UnsafeRawBufferPointer, _ marker: UInt8) -> Bool {
        // Only the header: scan markers up to start of scan.
        var i = 2
        while i + 4 <= bytes.count, bytes[i] == 0xFF {
            let m = bytes[i + 1]
            if m == marker { return true }
            if m == 0xDA { return false }
            i += 2 + (Int(bytes[i + 2]) << 8 | Int(bytes[i + 3]))
        }
        return false
    }

    @Test(arguments: [false, true])
    func mjpegFramesDecode(omitDHT: Bool) throws {
        let camera = makeCamera([VirtualCamera.Mode(.mjpeg, width: 640, height: 480, omitsHuffmanTables: omitDHT)])
        let s = try open(camera, .mjpeg, 640, 480)
        let format = try s.currentFormat()
        #expect(format.colorRange == .full)
        try s.startStreaming(bufferCount: 3)
        defer { s.stopStreaming() }
        for _ in 0..<3 {
            let f = try nextGood(s)
            let bytes = f.image.plane0.bytes
            #expect(bytes.count > 1000 && bytes.count < format.sizeImage)
            #expect(bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[bytes.count - 2] == 0xFF && bytes[bytes.count - 1] == 0xD9)
            #expect(hasMarker(bytes, 0xC4) == !omitDHT, "DHT present: \(hasMarker(bytes, 0xC4))")
            let (w, h, rgb) = try decode(bytes)
            #expect(w == 640 && h == 480)
            for (i, want) in barsRGB.enumerated() {
                let p = (360 * w + (2 * i + 1) * w / 16) * 3
                let got = (Int(rgb[p]), Int(rgb[p + 1]), Int(rgb[p + 2]))
                #expect(
                    abs(got.0 - want.0) <= 8 && abs(got.1 - want.1) <= 8 && abs(got.2 - want.2) <= 8,
                    "bar \(i): \(got) want \(want)")
            }
            #expect(VirtualCamera.frameNumber(in: f.image) == f.metadata.sequence)
        }
    }

    @Test func sequenceNumbersWrapAt32Bits() throws {
        let camera = makeCamera()
        let s = try open(camera, fps: 60)
        try s.startStreaming(bufferCount: 4)
        defer { s.stopStreaming() }
        let first = try nextGood(s).metadata.sequence
        // As vivid's wrap_sequence_number: jump to just before 2^32 and run across it.
        camera.injectDroppedFrames(Int(UInt32.max - first) - 3)
        var seen: [UInt32] = []
        // Until a few frames past the wrap (frames queued before the jump come first).
        while seen.count < 40, seen.filter({ $0 < 1000 }).count < 3 { seen.append(try nextGood(s).metadata.sequence) }
        let afterJump = try #require(seen.firstIndex { $0 > UInt32.max - 10 })
        let run = Array(seen[afterJump...])
        #expect(run.contains { $0 < 1000 }, "\(seen)")
        // Steps of one across 2^32, but where the sensor found every buffer full (a loaded
        // machine) and counted each frame it lost.
        let gaps = zip(run, run.dropFirst()).map { Int64($1 &- $0) - 1 }
        let lost = camera.statistics.framesDroppedForLackOfBuffers
        #expect(gaps.allSatisfy { $0 >= 0 } && gaps.reduce(0, +) <= Int64(lost), "\(run), \(lost) lost for lack of buffers")
        if lost == 0 { #expect(run.contains(0) && run.contains(UInt32.max), "\(run)") }
        for _ in 0..<2 {
            let f = try nextGood(s)
            #expect(VirtualCamera.frameNumber(in: f.image) == f.metadata.sequence)
        }
    }

    @Test func injectedDropsMakeTheSequenceJump() throws {
        let camera = makeCamera()
        let s = try open(camera, fps: 60)
        try s.startStreaming(bufferCount: 4)
        defer { s.stopStreaming() }
        let a = try nextGood(s)
        let before = camera.statistics
        camera.injectDroppedFrames(5)
        var previous = a.metadata.sequence
        var gaps: [UInt32] = []
        for _ in 0..<8 {
            let f = try nextGood(s)
            gaps.append(f.metadata.sequence &- previous &- 1)
            previous = f.metadata.sequence
        }
        #expect(gaps.filter { $0 != 0 } == [5], "gaps: \(gaps)")
        #expect(camera.statistics.framesDroppedByInjection - before.framesDroppedByInjection == 5)
        let st = camera.statistics
        #expect(st.framesProduced == st.framesQueued + st.framesDroppedByInjection + st.framesDroppedForLackOfBuffers)
    }

    @Test func injectedCorruptFrameIsReportedNotDelivered() throws {
        let camera = makeCamera()
        let s = try open(camera, fps: 60)
        try s.startStreaming(bufferCount: 4)
        defer { s.stopStreaming() }
        let a = try nextGood(s)
        camera.injectCorruptFrame()
        var corruptSequences: [UInt32] = []
        var goodSequences: [UInt32] = []
        for _ in 0..<6 {
            switch try s.nextFrame(timeout: .seconds(2)) {
            case .frame(let f): goodSequences.append(f.metadata.sequence)
            case .corrupt(let seq, let reason):
                corruptSequences.append(seq)
                #expect(!reason.isEmpty)
            case let other: Issue.record("unexpected \(other.summary)")
            }
        }
        #expect(corruptSequences.count == 1)
        // Every sequence number after `a` shows up exactly once, good or corrupt.
        let all = (goodSequences + corruptSequences).sorted()
        #expect(all == Array((a.metadata.sequence + 1)...(a.metadata.sequence + 6)))
        #expect(camera.statistics.framesCorrupt == 1)
        // The corrupt frame's buffer went straight back: nothing is held but `a`.
        #expect(s.buffersHeldByClients == 1)
    }

    @Test(arguments: [PixelFormat.mjpeg, .yuyv])
    func injectedDamageArrivesAsAGoodLookingFrame(format: PixelFormat) throws {
        let camera = makeCamera()
        let s = try open(camera, format, 320, 240, fps: 60)
        try s.startStreaming(bufferCount: 4)
        defer { s.stopStreaming() }
        let sizeImage = try s.currentFormat().sizeImage
        let clean = try nextGood(s)
        let cleanCount = clean.image.plane0.count
        // Quiet the camera and drain what is queued, so the damage hits the next three frames.
        camera.stall(for: nil)
        while case .frame = try s.nextFrame(timeout: .milliseconds(300)) {}
        for damage in VirtualCamera.FrameDamage.allCases { camera.injectDamagedFrame(damage) }
        camera.resume()
        var seen: [Int] = []
        var scrambled: HeldFrame?
        for _ in 0..<3 {
            let f = try nextGood(s)
            seen.append(f.image.plane0.count)
            if seen.count == 3 { scrambled = HeldFrame(f) }
        }
        let halfway = (format == .mjpeg ? cleanCount : sizeImage) / 2
        #expect(abs(seen[0] - halfway) <= 2000 && seen[0] < (format == .mjpeg ? cleanCount : sizeImage), "truncated: \(seen)")
        #expect(seen[1] == 0, "empty: \(seen)")
        let bytes = scrambled!.frame.image.plane0.bytes
        if format == .mjpeg {
            #expect(bytes[0] == 0xFF && bytes[1] == 0xD8)
            #expect(VirtualCamera.frameNumber(in: scrambled!.frame.image) == nil)
        } else {
            #expect(bytes.count == sizeImage)
            #expect(VirtualCamera.frameNumber(in: scrambled!.frame.image) == nil)
        }
        #expect(camera.statistics.framesDamaged == 3)
        // The next frames are clean again, counter included.
        let after = try nextGood(s)
        #expect(VirtualCamera.frameNumber(in: after.image) == after.metadata.sequence)
        if format == .mjpeg {
            let b = after.image.plane0.bytes
            #expect(b[b.count - 2] == 0xFF && b[b.count - 1] == 0xD9)
        } else {
            #expect(after.image.plane0.count == sizeImage)
        }
    }

    @Test func disconnectEndsTheStreamAndBlocksOpensUntilReconnect() throws {
        let camera = makeCamera()
        let s = try open(camera)
        try s.startStreaming(bufferCount: 4)
        let held = try nextGood(s)
        let brightness: UInt32 = 0x0098_0900  // V4L2_CID_BRIGHTNESS
        try s.setControlValue(brightness, (VirtualCamera.defaultControlValues[brightness] ?? 0) + 10)
        let waiter = Thread.detachedResult { () -> (CaptureError?, Double) in
            let t0 = CaptureTime.now()
            do throws(BackendError) {
                while true { _ = try s.nextFrame(timeout: .seconds(5)) }
            } catch { return (CaptureError(error), Double(CaptureTime.now() - t0) / 1e9) }
        }
        Thread.sleep(forTimeInterval: 0.2)
        camera.disconnect()
        let (error, elapsed) = waiter.wait()
        #expect(error?.code == .disconnected)
        #expect(elapsed < 2, "disconnect noticed after \(elapsed) s")
        #expect(!camera.isConnected)
        // Delivered frames stay readable after the unplug and the stop.
        s.stopStreaming()
        #expect(VirtualCamera.frameNumber(in: held.image) == held.metadata.sequence)
        #expect(throws: CaptureError.self) { try camera.makeSource() }
        do { _ = try camera.makeSource() } catch { #expect(error.code == .disconnected) }
        #expect((try? s.formats()) == nil)
        #expect(!camera.isStreaming)

        camera.reconnect()
        // Its controls are at their defaults again, as a camera's that lost power.
        #expect(try camera.makeSource().controlValue(brightness) == VirtualCamera.defaultControlValues[brightness])
        // The old handle stays dead, a new one works.
        do { try s.startStreaming(bufferCount: 2); Issue.record("old source restarted") } catch {
            #expect(CaptureError(error).code == .disconnected)
        }
        let fresh = try open(camera)
        try fresh.startStreaming(bufferCount: 2)
        defer { fresh.stopStreaming() }
        _ = try nextGood(fresh)
    }

    @Test func stallStopsFramesForItsDurationAndResumes() throws {
        let camera = makeCamera()
        let s = try open(camera, fps: 60)
        try s.startStreaming(bufferCount: 4)
        defer { s.stopStreaming() }
        let a = try nextGood(s)
        _ = a
        camera.stall(for: .milliseconds(1500))
        // Drain what was queued before the stall took effect, then expect silence.
        var event = try s.nextFrame(timeout: .milliseconds(200))
        while event.isFrame { event = try s.nextFrame(timeout: .milliseconds(200)) }
        guard event.summary == "timeout" else { Issue.record("expected timeout, got \(event.summary)"); return }
        let producedDuringStall = camera.framesProduced
        Thread.sleep(forTimeInterval: 0.2)
        #expect(camera.framesProduced == producedDuringStall)
        // After the stall frames come back, and their sequence did not run on during it.
        let b = try nextGood(s, timeout: .seconds(3))
        #expect(b.metadata.sequence == UInt32(producedDuringStall))

        camera.stall(for: nil)
        var quiet = try s.nextFrame(timeout: .milliseconds(300))
        while quiet.isFrame { quiet = try s.nextFrame(timeout: .milliseconds(300)) }
        guard quiet.summary == "timeout" else { Issue.record("expected timeout, got \(quiet.summary)"); return }
        camera.resume()
        _ = try nextGood(s, timeout: .seconds(2))
    }

    @Test func nextFrameHonoursTimeoutAndWakeUp() throws {
        let camera = makeCamera()
        let s = try open(camera)
        try s.startStreaming(bufferCount: 2)
        defer { s.stopStreaming() }
        camera.stall(for: nil)
        var t0 = CaptureTime.now()
        var event = try s.nextFrame(timeout: .milliseconds(150))
        while event.isFrame { t0 = .now(); event = try s.nextFrame(timeout: .milliseconds(150)) }
        let waited = Double(CaptureTime.now() - t0) / 1e6
        guard event.summary == "timeout" else { Issue.record("expected timeout, got \(event.summary)"); return }
        #expect(waited >= 149 && waited < 1500, "timeout after \(waited) ms")

        let waiter = Thread.detachedResult { () -> (String, Double) in
            let t = CaptureTime.now()
            let e = try? s.nextFrame(timeout: .seconds(10))
            return (e?.summary ?? "nil", Double(CaptureTime.now() - t) / 1e6)
        }
        Thread.sleep(forTimeInterval: 0.1)
        s.wakeUp()
        let (what, ms) = waiter.wait()
        #expect(what.contains("interrupted"), "got \(what)")
        #expect(ms < 2000, "wake-up took \(ms) ms")
        // A stop from another thread ends a wait too.
        let stopped = Thread.detachedResult { () -> String in (try? s.nextFrame(timeout: .seconds(10)))?.summary ?? "nil" }
        Thread.sleep(forTimeInterval: 0.1)
        s.stopStreaming()
        #expect(stopped.wait().contains("interrupted"))
        try s.startStreaming(bufferCount: 2)
        // A wake-up with nobody waiting is kept for the next wait.
        s.wakeUp()
        if case .interrupted = try s.nextFrame(timeout: .seconds(5)) {} else { Issue.record("pending wake-up lost") }
        camera.resume()
    }

    @Test func heldBuffersBlockProductionAndReleaseResumesIt() throws {
        let camera = makeCamera()
        let s = try open(camera, fps: 60)
        try s.startStreaming(bufferCount: 4)
        defer { s.stopStreaming() }
        #expect(s.bufferCount == 4)
        var held: [HeldFrame] = []
        for _ in 0..<4 { held.append(HeldFrame(try nextGood(s))) }
        #expect(s.buffersHeldByClients == 4)
        let dropsBefore = camera.statistics.framesDroppedForLackOfBuffers
        guard case .timeout = try s.nextFrame(timeout: .milliseconds(300)) else {
            Issue.record("a frame arrived although every buffer is held"); return
        }
        #expect(camera.statistics.framesDroppedForLackOfBuffers > dropsBefore)
        let lastHeld = held.last!.frame.metadata.sequence
        held.removeFirst()
        #expect(s.buffersHeldByClients == 3)
        let next = try nextGood(s)
        // The frames lost while nothing was free show up as a sequence gap.
        #expect(next.metadata.sequence > lastHeld &+ 1)
        let st = camera.statistics
        #expect(st.framesProduced == st.framesQueued + st.framesDroppedByInjection + st.framesDroppedForLackOfBuffers)
        held.removeAll()
    }

    @Test func heldFramesStayReadableAfterStop() throws {
        let camera = makeCamera()
        let s = try open(camera, .mjpeg, 640, 480)
        try s.startStreaming(bufferCount: 3)
        let f = try nextGood(s)
        s.stopStreaming()
        #expect(s.bufferCount == 0)
        #expect(VirtualCamera.frameNumber(in: f.image) == f.metadata.sequence)
        // A second stream works after the first stopped, with its own pool.
        try s.startStreaming(bufferCount: 2)
        defer { s.stopStreaming() }
        #expect(try nextGood(s).metadata.sequence == 0)
    }

    @Test func secondStreamIsBusy() throws {
        let camera = makeCamera()
        let a = try open(camera)
        let b = try open(camera)
        try a.startStreaming(bufferCount: 2)
        #expect(camera.isStreaming)
        do { try b.startStreaming(bufferCount: 2); Issue.record("second stream started") } catch {
            #expect(CaptureError(error).code == .deviceBusy)
        }
        do { try b.checkAvailable(); Issue.record("busy camera reported available") } catch {
            #expect(CaptureError(error).code == .deviceBusy)
        }
        // Changing the format of the streaming handle is refused too, as V4L2 does.
        do { _ = try a.setFormat(pixelFormat: .nv12, width: 320, height: 240); Issue.record("format changed while streaming") } catch {
            #expect(CaptureError(error).code == .deviceBusy)
        }
        _ = try nextGood(a)
        a.stopStreaming()
        try b.checkAvailable()
        try b.startStreaming(bufferCount: 2)
        defer { b.stopStreaming() }
        _ = try nextGood(b)
    }

    @Test func controlsChangeThePicture() throws {
        let camera = makeCamera()
        let s = try open(camera)
        let controls = try s.controls()
        #expect(
            Set(controls.map(\.name)) == [
                "Brightness", "Contrast", "Saturation", "Test Pattern", "Gain", "Auto Exposure",
                "Exposure Time, Absolute", "Auto Exposure, Bias", "White Balance, Automatic",
                "White Balance Temperature", "Focus, Absolute", "Focus, Automatic Continuous",
                "Zoom, Absolute", "LED Mode", "Torch Intensity",
            ])
        // A manual value is inactive while its automatic mode is on, as V4L2 drivers flag it.
        #expect(controls.first { $0.name == "Exposure Time, Absolute" }?.isInactive == true)
        try s.setControlValue(VirtualCamera.ControlID.exposureAuto, VirtualCamera.exposureManual)
        #expect(try s.controls().first { $0.name == "Exposure Time, Absolute" }?.isInactive == false)
        try s.setControlValue(VirtualCamera.ControlID.exposureAuto, VirtualCamera.exposureAperturePriority)
        let pattern = try #require(controls.first { $0.name == "Test Pattern" })
        #expect(pattern.kind == .menu && pattern.menu.map(\.name).first == "75% Colorbar")
        try s.startStreaming(bufferCount: 3)
        defer { s.stopStreaming() }
        let whiteX = 320 / 16, row = 180
        #expect(luma(try nextGood(s), whiteX, row) == 180)
        try s.setControlValue(VirtualCamera.ControlID.brightness, 160)
        #expect(try s.controlValue(VirtualCamera.ControlID.brightness) == 160)
        // Frames already queued may still show the old level; a later one shows the new.
        var brighter = false
        for _ in 0..<6 where !brighter { brighter = luma(try nextGood(s), whiteX, row) > 200 }
        #expect(brighter)
        try s.setControlValue(VirtualCamera.ControlID.testPattern, TestPatternKind.black.rawValue)
        var black = false
        for _ in 0..<6 where !black { black = luma(try nextGood(s), whiteX, row) < 60 }
        #expect(black)
        do { try s.setControlValue(VirtualCamera.ControlID.testPattern, 99); Issue.record("bad menu value taken") } catch {
            #expect(CaptureError(error).code == .invalidArgument)
        }
        do { try s.setControlValue(0x1234, 1); Issue.record("unknown control set") } catch {
            #expect(CaptureError(error).code == .invalidArgument)
        }
        try s.setControlValue(VirtualCamera.ControlID.brightness, 1000)
        #expect(try s.controlValue(VirtualCamera.ControlID.brightness) == 255)
    }

    @Test func registryRules() throws {
        // A private registry: the shared one is what other tests' discovery sees.
        let registry = VirtualCameraRegistry()
        final class Counter: @unchecked Sendable { var n = 0 }
        let changes = Counter()
        registry.addObserver { changes.n += 1 }
        let camera = makeCamera(position: .back)
        registry.install(camera)
        registry.install(camera)
        #expect(registry.cameras.count == 1 && changes.n == 1)
        let twin = VirtualCamera(name: camera.name)
        registry.install(twin)
        #expect(registry.cameras.count == 1 && registry.cameras[0] === twin)
        registry.uninstall(twin)
        registry.uninstall(twin)
        #expect(registry.cameras.isEmpty && changes.n == 3)

        let pair = registry.installDefaultPair()
        let again = registry.installDefaultPair()
        #expect(pair.front === again.front && pair.back === again.back && changes.n == 4)
        #expect(pair.front.position == .front && pair.back.position == .back)
        #expect(pair.front.uniqueID == "virtual:Virtual Front Camera" && pair.back.uniqueID == "virtual:Virtual Back Camera")
        #expect(pair.front.label == "FRONT" && pair.back.label == "BACK")
        #expect(registry.cameras.count == 2)
    }

    /// A labelled camera shows its label (read back glyph by glyph) in every format, at sizes
    /// where the letters are 1 to 4 pixels a dot; two cameras that differ only by their label
    /// give the same picture everywhere else (the frame counter reads, the bars are the bars).
    @Test(arguments: [
        (PixelFormat.yuyv, 320, 240), (.uyvy, 640, 480), (.nv12, 1280, 720), (.nv21, 160, 120), (.yuv420, 640, 360),
        (.yvu420, 320, 180), (.nv16, 640, 480), (.yuv422p, 320, 240), (.rgb24, 640, 480), (.bgr24, 320, 240),
        (.grey, 640, 480), (.mjpeg, 640, 480), (.mjpeg, 1280, 720),
    ])
    func labelsAreDrawnAndReadBack(format: PixelFormat, width: Int, height: Int) throws {
        let mode = VirtualCamera.Mode(format, width: width, height: height)
        let front = makeCamera([mode], position: .front), back = makeCamera([mode], position: .back)
        front.label = "FRONT"
        back.label = "Back"
        let a = try open(front, format, width, height), b = try open(back, format, width, height)
        try a.startStreaming(bufferCount: 3)
        defer { a.stopStreaming() }
        try b.startStreaming(bufferCount: 3)
        defer { b.stopStreaming() }
        let fa = try nextGood(a), fb = try nextGood(b)
        let pictures = (greyPicture(fa), greyPicture(fb))
        let ga = try #require(pictures.0), gb = try #require(pictures.1)
        let g = PatternGeometry(width: width, height: height)
        func read(_ grey: [UInt8], _ n: Int) -> String? {
            grey.withUnsafeBytes { buf in
                readPatternLabel(length: n, geometry: g) { x, y in
                    patternLuma(buf, layout: .grey, width: width, height: height, x: x, y: y)
                }
            }
        }
        #expect(read(ga, 5) == "FRONT")
        #expect(read(gb, 4) == "BACK")
        #expect(VirtualCamera.frameNumber(in: fa.image) == fa.metadata.sequence)
        // Below the taller box (the front's) the pictures are the same, but for JPEG's noise.
        let box = try #require(LabelPlacement(text: "FRONT", geometry: g))
        let lossy = format == .mjpeg
        var differing = 0
        for y in (box.y + box.height + 16)..<height {
            for x in 0..<width where abs(Int(ga[y * width + x]) - Int(gb[y * width + x])) > (lossy ? 24 : 0) { differing += 1 }
        }
        #expect(differing == 0, "\(differing) pixels below the labels differ")
        // The labels sit in the top half of the black bar's end of the picture.
        #expect(box.x >= width * 3 / 4 && box.y + box.height <= height / 2, "\(box)")
    }

    /// A label set while the camera streams shows in later frames; nil takes it away.
    @Test func aLabelChangeShowsInLaterFrames() throws {
        let camera = makeCamera([VirtualCamera.Mode(.yuyv, width: 640, height: 480)])
        let s = try open(camera, .yuyv, 640, 480)
        try s.startStreaming(bufferCount: 3)
        defer { s.stopStreaming() }
        let g = PatternGeometry(width: 640, height: 480)
        func label(_ f: borrowing FrameBuffer, _ n: Int) -> String? {
            readPatternLabel(length: n, geometry: g) { x, y in luma(f, x, y) }
        }
        // No label: the black bar, which reads as blanks.
        #expect(label(try nextGood(s), 5) == "     ")
        camera.label = "CAM 2"
        var seen = false
        for _ in 0..<6 where !seen { seen = label(try nextGood(s), 5) == "CAM 2" }
        #expect(seen)
        camera.label = nil
        var gone = false
        for _ in 0..<6 where !gone { gone = label(try nextGood(s), 5) == "     " }
        #expect(gone)
    }

    @Test func descriptorsAndStreamsDoNotLeak() throws {
        func openDescriptors() -> Int { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1 }
        let camera = makeCamera()
        let s = try open(camera, .mjpeg, 320, 240, fps: 60)
        try s.startStreaming(bufferCount: 2)
        _ = try nextGood(s)
        s.stopStreaming()
        let baseline = openDescriptors()
        for _ in 0..<20 {
            try s.startStreaming(bufferCount: 3)
            _ = try nextGood(s)
            s.stopStreaming()
        }
        #expect(!camera.isStreaming)
        // Other suites run in parallel and may hold descriptors for a moment: allow them time.
        var now = openDescriptors()
        for _ in 0..<20 where now > baseline {
            Thread.sleep(forTimeInterval: 0.1)
            now = openDescriptors()
        }
        // The virtual camera opens none; a leak of one a cycle would be 20. (A few more may be
        // other suites' or the dispatch pool's, which grows while they run.)
        #expect(now <= baseline + 5, "descriptors: \(baseline) before, \(now) after 20 stream cycles")
    }
}

/// Runs a body on a new thread and waits for its result.
private final class ThreadResult<T: Sendable>: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private var value: T?
    init(_ body: @escaping @Sendable () -> T) {
        Thread.detachNewThread { [self] in
            value = body()
            done.signal()
        }
    }
    func wait() -> T {
        done.wait()
        return value!
    }
}

extension Thread {
    fileprivate static func detachedResult<T: Sendable>(_ body: @escaping @Sendable () -> T) -> ThreadResult<T> { ThreadResult(body) }
}
