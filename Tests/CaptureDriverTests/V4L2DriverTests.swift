// The V4L2 layer against the kernel's vivid driver, in the VM (scripts/test runs this suite with
// vivid n_devs=2 multiplanar=1,2: instance 0 single-planar, instance 1 multi-planar).
// Serialized: the tests share vivid's nodes, and two streams on one node would be EBUSY.
import CaptureImaging
import CaptureV4L2
import CaptureALSA
import CaptureBackend
import CaptureSystem
import Foundation
import Testing
import Glibc
@testable import Capture

@Suite(.serialized) struct V4L2DriverTests {
    // MARK: Helpers

    func requireVM() throws {
        try #require(ProcessInfo.processInfo.environment["CAPTURE_VM"] == "1", "run through scripts/test (needs the VM)")
    }

    /// `/dev/videoN` of vivid's nodes whose sysfs name ends in `suffix` ("-vid-cap", "-vid-out").
    func vividNodes(_ suffix: String) throws -> [String] {
        let root = "/sys/class/video4linux"
        let nodes = try FileManager.default.contentsOfDirectory(atPath: root).filter { $0.hasPrefix("video") }
        return try nodes.filter { node in
            let name = try String(contentsOfFile: "\(root)/\(node)/name", encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines)
            return name.hasPrefix("vivid-") && name.hasSuffix(suffix)
        }
        .sorted { Int($0.dropFirst(5))! < Int($1.dropFirst(5))! }
        .map { "/dev/" + $0 }
    }

    /// The capture node of vivid instance `n`, failing when it is missing.
    func captureNode(_ n: Int) throws -> String {
        let nodes = try vividNodes("-vid-cap")
        try #require(nodes.count > n, "vivid capture node \(n) missing (found \(nodes))")
        return nodes[n]
    }

    /// Runs v4l2-ctl through popen (Foundation's Process needs a socket pair the VM lacks).
    func v4l2ctl(_ args: [String]) throws -> String {
        let command = "/usr/bin/v4l2-ctl " + args.map { "'\($0)'" }.joined(separator: " ")
        let pipe = try #require(popen(command, "r"), "popen \(command)")
        var output = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = fread(&chunk, 1, chunk.count, pipe)
            if n <= 0 { break }
            output += chunk[0..<n]
        }
        let status = pclose(pipe)
        try #require(status == 0, "\(command) exited \(status)")
        return String(decoding: output, as: UTF8.self)
    }

    func fdCount() throws -> Int { try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count }
    func mapCount() throws -> Int {
        try String(contentsOfFile: "/proc/self/maps", encoding: .utf8).split(separator: "\n").count
    }

    func control(_ source: V4L2VideoSource, _ name: String) throws -> UInt32 {
        try #require(try source.device.controlID(named: name), "\(source.device.path) has no control \(name)")
    }

    /// Pulls frames until `count` good ones arrived; returns them and the corrupt events seen.
    func frames(
        _ source: V4L2VideoSource, count: Int, timeout: Duration = .seconds(5), keep: Bool = true,
        _ body: (consuming FrameBuffer) throws -> Void = { _ in }
    ) throws -> (frames: [FrameMetadata], corrupt: [UInt32]) {
        var metas: [FrameMetadata] = []
        var corrupt: [UInt32] = []
        while metas.count < count {
            switch try source.nextFrame(timeout: timeout) {
            case .frame(let f):
                metas.append(f.metadata)
                try body(f)
            case .corrupt(let sequence, _): corrupt.append(sequence)
            case .timeout: Issue.record("no frame within \(timeout) after \(metas.count) frames"); return (metas, corrupt)
            case .interrupted: continue
            }
        }
        return (metas, corrupt)
    }

    func open(_ path: String) throws -> V4L2VideoSource { try V4L2Discovery.open(path: path) }

    /// vivid's 75% colour bars in BT.601 limited range (vivid's default colourspace is sRGB,
    /// whose default Y'CbCr encoding is 601): white, yellow, cyan, green, magenta, red, blue, black.
    static let bars: [(y: Double, cb: Double, cr: Double)] = {
        let rgb: [(Double, Double, Double)] = [(1, 1, 1), (1, 1, 0), (0, 1, 1), (0, 1, 0), (1, 0, 1), (1, 0, 0), (0, 0, 1), (0, 0, 0)]
        return rgb.map { c in
            let (r, g, b) = (c.0 * 0.75, c.1 * 0.75, c.2 * 0.75)
            return (
                16 + 65.481 * r + 128.553 * g + 24.966 * b, 128 - 37.797 * r - 74.203 * g + 112 * b,
                128 + 112 * r - 93.786 * g - 18.214 * b
            )
        }
    }()
    static let tolerance = 8.0

    /// Checks the centre of each bar on one row well below vivid's text overlay.
    func checkBarsYUYV(_ f: borrowing FrameBuffer, row: Int) {
        let img = f.image
        let bytes = img.plane0.bytes
        for (i, bar) in Self.bars.enumerated() {
            let x = (img.width * (2 * i + 1) / 16) & ~1
            let o = row * img.plane0.bytesPerLine + x * 2
            let (y, u, v) = (Double(bytes[o]), Double(bytes[o + 1]), Double(bytes[o + 3]))
            #expect(
                abs(y - bar.y) <= Self.tolerance && abs(u - bar.cb) <= Self.tolerance && abs(v - bar.cr) <= Self.tolerance,
                "bar \(i) at x=\(x), row \(row): Y \(y) U \(u) V \(v), expected \(bar)")
        }
    }

    /// Same for NV12 (multi-planar NM12: Y plane, then interleaved CbCr plane).
    func checkBarsNV12M(_ f: borrowing FrameBuffer, row: Int) {
        let img = f.image
        let yPlane = img.plane0.bytes, cPlane = img.plane1.bytes
        for (i, bar) in Self.bars.enumerated() {
            let x = (img.width * (2 * i + 1) / 16) & ~1
            let y = Double(yPlane[row * img.plane0.bytesPerLine + x])
            let co = (row / 2) * img.plane1.bytesPerLine + x
            let (u, v) = (Double(cPlane[co]), Double(cPlane[co + 1]))
            #expect(
                abs(y - bar.y) <= Self.tolerance && abs(u - bar.cb) <= Self.tolerance && abs(v - bar.cr) <= Self.tolerance,
                "bar \(i) at x=\(x), row \(row): Y \(y) Cb \(u) Cr \(v), expected \(bar)")
        }
    }

    /// Frames come in order, each once. vivid numbers frames by its own clock: when its thread runs
    /// late (a loaded host under emulation) it skips a number though a buffer was free, so a rare
    /// gap is the driver's. A fault of ours that lost buffers would starve the stream (the count
    /// above falls short), and the exact gap accounting has its own test
    /// (`droppedBuffersShowAsSequenceGaps`).
    func checkOrdered(_ metas: [FrameMetadata], _ label: String) {
        var skipped = 0
        for (a, b) in zip(metas, metas.dropFirst()) {
            let step = b.sequence &- a.sequence
            #expect(step >= 1 && step < 1 << 16, "\(label): sequence \(a.sequence) then \(b.sequence)")
            if step > 1, step < 1 << 16 { skipped += Int(step) - 1 }
            #expect(b.timestamp - a.timestamp > 0, "\(label): timestamp \(a.timestamp) then \(b.timestamp)")
        }
        #expect(skipped * 10 <= metas.count, "\(label): vivid skipped \(skipped) sequence numbers in \(metas.count) frames")
    }

    // MARK: Discovery

    @Test func discoveryFindsExactlyVividsCaptureNodes() throws {
        try requireVM()
        let expected = try vividNodes("-vid-cap")
        #expect(expected.count == 2, "vivid n_devs=2 has two capture nodes")
        let found = V4L2Discovery.captureDevices().filter { $0.driver == "vivid" }
        #expect(found.map(\.path) == expected)
        #expect(Set(found.map(\.uniqueID)).count == found.count, "unique IDs are unique")
        for info in found {
            // Names and bus info as QUERYCAP gives them, read independently by v4l2-ctl.
            let d = try v4l2ctl(["-d", info.path, "-D"])
            func field(_ name: String) -> String? {
                d.split(separator: "\n").first { $0.contains(name) }.map {
                    String($0.split(separator: ":", maxSplits: 1)[1]).trimmingCharacters(in: .whitespaces)
                }
            }
            #expect(info.name == field("Card type"))
            #expect(info.busInfo == field("Bus info"))
            #expect(info.uniqueID == "v4l2:vivid:\(info.busInfo):\(info.name)")
            #expect(info.position == .unspecified)
        }
        // Nothing that is not a capture node: output, VBI, radio, SDR, touch, metadata.
        let others = try vividNodes("-vid-out") + vividNodes("-meta-cap") + vividNodes("-meta-out")
        #expect(!others.isEmpty)
        #expect(Set(found.map(\.path)).isDisjoint(with: others))
    }

    // MARK: Formats

    /// `v4l2-ctl --list-formats-ext` as lines "FOURCC WxH fps,fps,..." (fps to 3 decimals).
    func v4l2ctlFormats(_ path: String) throws -> [String] {
        var out: [String] = []
        var fourCC = "", size = "", fps: [String] = []
        func flush() { if !size.isEmpty { out.append("\(fourCC) \(size) \(fps.joined(separator: ","))") }; size = ""; fps = [] }
        for line in try v4l2ctl(["-d", path, "--list-formats-ext"]).split(separator: "\n") {
            let t = line.trimmingCharacters(in: .whitespaces)
            if t.hasPrefix("["), let q = t.firstIndex(of: "'") {
                flush()
                // 'Y16 -BE': four characters, then "-BE" for big-endian variants.
                let rest = t[t.index(after: q)...]
                fourCC = String(rest.prefix { $0 != "'" })
            } else if t.hasPrefix("Size: Discrete ") {
                flush()
                size = String(t.dropFirst("Size: Discrete ".count))
            } else if t.hasPrefix("Size:") {
                flush()
                size = t
            } else if t.hasPrefix("Interval: Discrete"), let open = t.firstIndex(of: "("), let sp = t[open...].firstIndex(of: " ") {
                fps.append(String(t[t.index(after: open)..<sp]))
            }
        }
        flush()
        return out
    }

    @Test(arguments: [0, 1]) func formatsMatchV4L2Ctl(instance: Int) throws {
        try requireVM()
        let path = try captureNode(instance)
        let source = try open(path)
        var ours: [String] = []
        for d in try source.device.formatDescriptions() {
            for s in try source.device.frameSizes(d.pixelFormat) {
                guard case .discrete(let w, let h) = s else { ours.append("\(d.pixelFormat) \(s)"); continue }
                var fps: [String] = []
                if case .discrete(let list)? = try source.device.frameIntervals(d.pixelFormat, width: w, height: h)?.kind {
                    fps = list.map { String(format: "%.3f", $0.framesPerSecond) }
                }
                ours.append("\(d.pixelFormat.fourCC) \(w)x\(h) \(fps.joined(separator: ","))")
            }
        }
        let theirs = try v4l2ctlFormats(path)
        #expect(!ours.isEmpty)
        #expect(ours.filter { !theirs.contains($0) } == [], "listed by us only")
        #expect(theirs.filter { !ours.contains($0) } == [], "listed by v4l2-ctl only")
        #expect(ours == theirs, "same order")
        // The VideoSource view lists the same (format, size) pairs.
        #expect(try source.formats().count == theirs.count)
        #expect(source.device.bufferType == (instance == 0 ? .videoCapture : .videoCaptureMultiplanar))
    }

    // MARK: Streaming

    @Test func streams120FramesOfYUYVWithColourBars() throws {
        try requireVM()
        let source = try open(try captureNode(0))
        let applied = try source.setFormat(pixelFormat: .yuyv, width: 640, height: 360)
        #expect(applied.pixelFormat == .yuyv && applied.width == 640 && applied.height == 360)
        #expect(applied.planes.first?.bytesPerLine == 1280 && applied.sizeImage == 640 * 360 * 2)
        #expect(applied.colorRange == .limited)
        // 5 fps: under TCG emulation on a busy host vivid's thread falls behind at higher rates
        // and skips sequence numbers itself (seen at 10 and 25 fps with buffers still queued).
        _ = try source.setFrameInterval(FrameInterval(numerator: 1, denominator: 5))
        try source.startStreaming(bufferCount: 8)
        defer { source.stopStreaming() }
        var checked = 0
        let (metas, corrupt) = try frames(source, count: 120) { f in
            #expect(f.image.plane0.count == applied.sizeImage, "bytesused equals sizeimage")
            #expect(f.image.width == 640 && f.image.height == 360 && f.image.pixelFormat == .yuyv)
            if checked < 5 || f.metadata.sequence % 20 == 0 {
                checkBarsYUYV(f, row: 270)
                checked += 1
            }
        }
        #expect(metas.count == 120)
        #expect(corrupt.isEmpty)
        checkOrdered(metas, "YUYV")
    }

    @Test func streamsMultiplanarNV12() throws {
        try requireVM()
        let source = try open(try captureNode(1))
        #expect(source.device.bufferType == .videoCaptureMultiplanar)
        let applied = try source.setFormat(pixelFormat: .nv12m, width: 640, height: 360)
        #expect(applied.pixelFormat == .nv12m && applied.planes.count == 2)
        #expect(applied.planes.map(\.sizeImage) == [640 * 360, 640 * 180])
        _ = try source.setFrameInterval(FrameInterval(numerator: 1, denominator: 5))
        try source.startStreaming(bufferCount: 8)
        defer { source.stopStreaming() }
        let (metas, corrupt) = try frames(source, count: 120) { f in
            #expect(f.image.planeCount == 2)
            #expect(f.image.plane0.count == applied.planes[0].sizeImage && f.image.plane1.count == applied.planes[1].sizeImage)
            if f.metadata.sequence % 30 == 0 { checkBarsNV12M(f, row: 270) }
        }
        #expect(metas.count == 120 && corrupt.isEmpty)
        checkOrdered(metas, "NM12")
    }

    // MARK: Parameters and controls

    @Test func frameIntervalReadsBack() throws {
        try requireVM()
        let source = try open(try captureNode(0))
        _ = try source.setFormat(pixelFormat: .yuyv, width: 640, height: 360)
        for interval in [FrameInterval(numerator: 1, denominator: 10), FrameInterval(numerator: 1, denominator: 25)] {
            let applied = try source.setFrameInterval(interval)
            #expect(applied.isEquivalent(to: interval))
            #expect(try source.frameInterval().isEquivalent(to: interval))
        }
    }

    @Test func brightnessRoundTrips() throws {
        try requireVM()
        let path = try captureNode(0)
        let source = try open(path)
        let id = try control(source, "brightness")
        let original = try source.controlValue(id)
        defer { try? source.setControlValue(id, original) }
        try source.setControlValue(id, 200)
        #expect(try source.controlValue(id) == 200)
        #expect(try v4l2ctl(["-d", path, "--get-ctrl", "brightness"]).contains("brightness: 200"))
        // Out of range: the typed error, not a crash.
        #expect(throws: BackendError.self) { try source.setControlValue(id, 1 << 40) }
    }

    @Test func testPatternMenuEnumeratesItems() throws {
        try requireVM()
        let path = try captureNode(0)
        let source = try open(path)
        let c = try #require(try source.controls().first { V4L2Device.shortName($0.name) == "test_pattern" })
        #expect(c.kind == .menu)
        // v4l2-ctl lists the items as "\t\t\t\tN: Name" under the control.
        var items: [String] = []
        var inside = false
        for line in try v4l2ctl(["-d", path, "--list-ctrls-menus"]).split(separator: "\n") {
            if line.contains(" 0x") { inside = line.contains("test_pattern "); continue }
            if inside { items.append(line.trimmingCharacters(in: .whitespaces)) }
        }
        #expect(c.menu.count == items.count && c.menu.count >= 2)
        #expect(c.menu.map { "\($0.value): \($0.name)" } == items)
        #expect(c.menu.first?.name == "75% Colorbar")
        // The controls list has no class headings.
        #expect(try source.controls().allSatisfy { $0.kind != .other(6) })
    }

    // MARK: Bad input

    @Test func badInputGetsTypedErrors() throws {
        try requireVM()
        func code(_ body: () throws -> Void) -> CaptureError.Code? {
            do { try body(); return nil } catch { return (error as? BackendError).map { CaptureError($0).code } }
        }
        #expect(code { _ = try V4L2Discovery.open(path: "/dev/video99") } == .noSuchDevice)
        #expect(code { _ = try V4L2Discovery.open(path: "/dev/null") } == .notACaptureDevice)
        let output = try #require(try vividNodes("-vid-out").first)
        do {
            _ = try V4L2Discovery.open(path: output)
            Issue.record("\(output) opened as a camera")
        } catch {
            let error = CaptureError(error)
            #expect(error.code == .notACaptureDevice)
            #expect(error.message.contains("video output"), "\(error)")
        }
        let source = try open(try captureNode(0))
        let before = try source.currentFormat()
        do {
            _ = try source.setFormat(pixelFormat: .mjpeg, width: 640, height: 480)
            Issue.record("vivid accepted MJPEG")
        } catch {
            let error = CaptureError(error)
            #expect(error.code == .unsupportedFormat)
            #expect(error.message.contains("MJPG") && error.message.contains("YUYV"), "\(error)")
        }
        #expect(try source.currentFormat() == before, "a refused format leaves the device as it was")
        // A size the webcam input cannot do: the driver picks one of its sizes; we report it.
        let adjusted = try source.setFormat(pixelFormat: .yuyv, width: 1000, height: 1000)
        let sizes = try source.device.frameSizes(.yuyv).compactMap { s -> VideoDimensions? in
            if case .discrete(let w, let h) = s { return VideoDimensions(width: w, height: h) }
            return nil
        }
        #expect(adjusted.dimensions != VideoDimensions(width: 1000, height: 1000))
        #expect(sizes.contains(adjusted.dimensions), "driver chose \(adjusted.dimensions)")
        #expect(try source.currentFormat().dimensions == adjusted.dimensions)
        // Streaming twice on one source is a state error; a second opener of a streaming node is busy.
        try source.startStreaming(bufferCount: 2)
        defer { source.stopStreaming() }
        #expect(code { try source.startStreaming(bufferCount: 2) } == .invalidState)
        let other = try open(source.info.path)
        #expect(code { try other.checkAvailable() } == .deviceBusy)
        #expect(code { try other.startStreaming(bufferCount: 2) } == .deviceBusy)
        #expect(code { _ = try other.setFormat(pixelFormat: .yuyv, width: 320, height: 180) } == .deviceBusy)
    }

    // MARK: Resources

    @Test func openStreamCloseCyclesLeakNothing() throws {
        try requireVM()
        let path = try captureNode(0)
        func cycle() throws {
            let source = try open(path)
            _ = try source.setFormat(pixelFormat: .yuyv, width: 320, height: 180)
            _ = try source.setFrameInterval(FrameInterval(numerator: 1, denominator: 50))
            try source.startStreaming(bufferCount: 4)
            let (metas, _) = try frames(source, count: 10)
            #expect(metas.count == 10)
            source.stopStreaming()
        }
        try cycle()  // warm-up: lazily created runtime state
        let fds = try fdCount(), maps = try mapCount()
        for _ in 0..<50 { try cycle() }
        #expect(try fdCount() == fds, "descriptors after 50 cycles")
        #expect(try mapCount() == maps, "mappings after 50 cycles")
    }

    @Test func heldFramesOutliveTheStreamAndRestartWorks() throws {
        try requireVM()
        let source = try open(try captureNode(0))
        _ = try source.setFormat(pixelFormat: .yuyv, width: 320, height: 180)
        let baseline = try mapCount()
        try source.startStreaming(bufferCount: 4)
        var held: [HeldFrame] = []
        _ = try frames(source, count: 2) { held.append(HeldFrame($0)) }
        source.stopStreaming()
        // Still mapped and readable after STREAMOFF.
        #expect(held.allSatisfy { $0.frame.image.plane0.count == 320 * 180 * 2 })
        let y = held[0].frame.image.plane0.bytes[135 * 640]
        #expect(abs(Double(y) - Self.bars[0].y) <= Self.tolerance)
        // A new stream while old frames are held (the old buffers are orphaned, not freed).
        try source.startStreaming(bufferCount: 4)
        let (metas, _) = try frames(source, count: 5)
        #expect(metas.count == 5)
        #expect(source.buffersHeldByClients == 0)
        source.stopStreaming()
        held.removeAll()
        #expect(try mapCount() == baseline, "every mapping released with the last frame")
    }

    // MARK: Faults (issue 5), by vivid's injection controls

    @Test func errorFlaggedBufferIsCorruptAndStreamContinues() throws {
        try requireVM()
        let source = try open(try captureNode(0))
        _ = try source.setFormat(pixelFormat: .yuyv, width: 320, height: 180)
        _ = try source.setFrameInterval(FrameInterval(numerator: 1, denominator: 10))
        try source.startStreaming(bufferCount: 4)
        defer { source.stopStreaming() }
        let before = try frames(source, count: 3).frames
        try source.setControlValue(try control(source, "inject_v4l2_buf_flag_error"), 1)
        let (metas, corrupt) = try frames(source, count: 10)
        #expect(corrupt.count == 1, "one error-flagged buffer reported as corrupt")
        #expect(metas.count == 10)
        // The corrupt frame's sequence number sits in the gap between delivered frames.
        if let bad = corrupt.first {
            #expect(!metas.contains { $0.sequence == bad })
            #expect(before.allSatisfy { $0.sequence < bad } && metas.contains { $0.sequence > bad })
        }
    }

    @Test(arguments: ["inject_vidioc_reqbufs_error", "inject_vidioc_qbuf_error", "inject_vidioc_streamon_error"])
    func setupFailuresUnwindAndRetryWorks(injector: String) throws {
        try requireVM()
        let source = try open(try captureNode(0))
        _ = try source.setFormat(pixelFormat: .yuyv, width: 320, height: 180)
        let fds = try fdCount(), maps = try mapCount()
        try source.setControlValue(try control(source, injector), 1)
        do {
            try source.startStreaming(bufferCount: 4)
            Issue.record("\(injector): start succeeded")
            source.stopStreaming()
        } catch {
            let error = CaptureError(error)
            #expect(error.code == .driverError, "\(error)")
            #expect(error.errno == EINVAL)
        }
        #expect(source.bufferCount == 0)
        #expect(try mapCount() == maps && fdCount() == fds, "nothing left half set up")
        try source.startStreaming(bufferCount: 4)
        let (metas, _) = try frames(source, count: 5)
        #expect(metas.count == 5)
        source.stopStreaming()
    }

    @Test func fatalStreamingErrorIsDriverErrorAndRestartWorks() throws {
        try requireVM()
        let source = try open(try captureNode(0))
        _ = try source.setFormat(pixelFormat: .yuyv, width: 320, height: 180)
        try source.startStreaming(bufferCount: 4)
        _ = try frames(source, count: 3)
        try source.setControlValue(try control(source, "inject_fatal_streaming_error"), 1)
        var thrown: CaptureError?
        for _ in 0..<50 {
            do throws(BackendError) { _ = try source.nextFrame(timeout: .seconds(2)) } catch { thrown = CaptureError(error); break }
        }
        #expect(thrown?.code == .driverError)
        #expect(thrown?.errno == EIO)
        source.stopStreaming()
        try source.startStreaming(bufferCount: 4)
        let (metas, _) = try frames(source, count: 5)
        #expect(metas.count == 5)
        source.stopStreaming()
    }

    @Test(arguments: [("wrap_sequence_number", Int64(1)), ("wrap_timestamp", Int64(1)), ("wrap_timestamp", Int64(2))])
    func wrappingCountersKeepOrder(name: String, value: Int64) throws {
        try requireVM()
        let source = try open(try captureNode(0))
        let id = try control(source, name)
        try source.setControlValue(id, value)
        defer { try? source.setControlValue(id, 0) }
        _ = try source.setFormat(pixelFormat: .yuyv, width: 320, height: 180)
        _ = try source.setFrameInterval(FrameInterval(numerator: 1, denominator: 25))
        try source.startStreaming(bufferCount: 8)
        defer { source.stopStreaming() }
        // wrap_sequence_number starts 128 frames before 2^32; 200 frames cross it.
        let count = name == "wrap_sequence_number" ? 200 : 20
        let (metas, _) = try frames(source, count: count, keep: false)
        for (a, b) in zip(metas, metas.dropFirst()) {
            // Forward by a few frames, never a huge jump. Under emulation vivid may skip numbers
            // or, when its thread wakes early, repeat one (distance 0).
            #expect(b.sequence &- a.sequence < 25, "\(a.sequence) → \(b.sequence)")
            #expect(b.timestamp - a.timestamp > 0 && b.timestamp - a.timestamp < 1_000_000_000)
        }
        if name == "wrap_sequence_number" {
            #expect(metas.contains { $0.sequence > UInt32.max - 200 } && metas.contains { $0.sequence < 200 }, "crossed the wrap")
        }
    }

    @Test func wakeUpAndStopInterruptAWaitingCaptureThread() throws {
        try requireVM()
        let source = try open(try captureNode(0))
        _ = try source.setFormat(pixelFormat: .yuyv, width: 320, height: 180)
        _ = try source.setFrameInterval(FrameInterval(numerator: 1, denominator: 1))
        try source.startStreaming(bufferCount: 2)
        let clock = ContinuousClock()
        for stop in [false, true] {
            DispatchQueue.global().asyncAfter(deadline: .now() + 0.2) {
                if stop { source.stopStreaming() } else { source.wakeUp() }
            }
            let started = clock.now
            var what = try source.nextFrame(timeout: .seconds(5)).summary
            if what.hasPrefix("frame") { what = try source.nextFrame(timeout: .seconds(5)).summary }  // a frame may win the race once
            guard what == "interrupted" else {
                Issue.record("\(stop ? "stopStreaming" : "wakeUp") gave \(what)")
                continue
            }
            #expect(clock.now - started < .seconds(2))
        }
        #expect(source.bufferCount == 0)
    }

    @Test func inputsEnumerateAndSelect() throws {
        try requireVM()
        let source = try open(try captureNode(0))
        let inputs = try source.device.inputs()
        // vivid's default inputs: webcam, TV, S-Video, HDMI.
        #expect(inputs.count == 4, "\(inputs)")
        #expect(inputs.first?.isCamera == true && inputs.first?.name.hasPrefix("Webcam") == true)
        let original = try source.device.currentInput()
        defer { try? source.device.selectInput(original) }
        try source.device.selectInput(2)
        #expect(try source.device.currentInput() == 2)
        do {
            try source.device.selectInput(inputs.count)
            Issue.record("input \(inputs.count) selected")
        } catch {
            let error = CaptureError(error)
            #expect(error.code == .invalidArgument)
        }
    }

    @Test func droppedBuffersShowAsSequenceGaps() throws {
        try requireVM()
        let source = try open(try captureNode(0))
        let id = try control(source, "percentage_of_dropped_buffers")
        try source.setControlValue(id, 30)
        defer { try? source.setControlValue(id, 0) }
        _ = try source.setFormat(pixelFormat: .yuyv, width: 320, height: 180)
        _ = try source.setFrameInterval(FrameInterval(numerator: 1, denominator: 25))
        try source.startStreaming(bufferCount: 8)
        defer { source.stopStreaming() }
        let (metas, _) = try frames(source, count: 60)
        let skipped = zip(metas, metas.dropFirst()).reduce(0) {
            $0 + Int(V4L2Sequence.framesSkipped(from: $1.0.sequence, to: $1.1.sequence))
        }
        let span = Int(metas.last!.sequence &- metas.first!.sequence) + 1
        #expect(metas.count + skipped == span, "delivered + skipped = frames produced")
        // vivid drops at random, and under emulation at a rate well below the one asked (8 skipped
        // of 68 in one CI sim): the gaps must show, at a quarter of the rate at least.
        #expect(skipped >= 60 * 30 / 100 / 4, "30% asked, \(skipped) of \(span) dropped")
    }

    #if DEBUG
    /// ENOSPC (USB bandwidth) cannot come from vivid: forced by the funnel's fault injector on a
    /// real vivid stream, the start unwinds and a retry works.
    @Test func bandwidthErrorAtStreamOnUnwinds() throws {
        try requireVM()
        let mock = SyscallMock()
        let source = try SyscallMock.$current.withValue(mock) { try open(try captureNode(0)) }
        _ = try source.setFormat(pixelFormat: .yuyv, width: 320, height: 180)
        let fds = try fdCount(), maps = try mapCount()
        mock.fail("VIDIOC_STREAMON", with: .noSpace)
        do {
            try source.startStreaming(bufferCount: 4)
            Issue.record("start succeeded")
        } catch {
            let error = CaptureError(error)
            #expect(error.code == .deviceBusy)
            #expect(error.message.contains("USB bandwidth"))
        }
        #expect(try fdCount() == fds && mapCount() == maps)
        // REQBUFS, 4 × (QUERYBUF, mmap), 4 × QBUF, STREAMON, then 4 × munmap and REQBUFS 0.
        let start = try #require(mock.trace.lastIndex(of: "VIDIOC_STREAMON"))
        #expect(mock.trace[start...].filter { $0 == "munmap" }.count == 4)
        #expect(mock.trace.last == "VIDIOC_REQBUFS")
        #expect(mock.trace.filter { $0 == "mmap" }.count == 4)
        try source.startStreaming(bufferCount: 4)
        let (metas, _) = try frames(source, count: 3)
        #expect(metas.count == 3)
        // A forced ENODEV on DQBUF reads as an unplug.
        mock.fail("VIDIOC_DQBUF", with: .noSuchDevice)
        do {
            _ = try source.nextFrame(timeout: .seconds(2))
            Issue.record("no error")
        } catch {
            let error = CaptureError(error)
            #expect(error.code == .disconnected)
        }
        source.stopStreaming()
    }
    #endif

    /// Last: vivid's node only reconnects once every descriptor on it is closed.
    @Test func disconnectIsReportedAndReleasesEverything() throws {
        try requireVM()
        let path = try captureNode(1)
        let fds = try fdCount(), maps = try mapCount()
        do {
            let source = try open(path)
            _ = try source.setFormat(pixelFormat: .nv12m, width: 320, height: 180)
            try source.startStreaming(bufferCount: 4)
            _ = try frames(source, count: 3)
            try source.setControlValue(try control(source, "disconnect"), 1)
            var thrown: CaptureError?
            for _ in 0..<10 {
                do throws(BackendError) { _ = try source.nextFrame(timeout: .seconds(2)) } catch { thrown = CaptureError(error); break }
            }
            #expect(thrown?.code == .disconnected, "\(String(describing: thrown))")
            source.stopStreaming()
        }
        #expect(try fdCount() == fds && mapCount() == maps, "descriptors and mappings released after the unplug")
        // Every descriptor closed: the node comes back.
        let again = try open(path)
        #expect(again.info.busInfo.hasPrefix("platform:vivid"))
    }
}

/// Keeps a frame (and so its buffer) in a collection.
final class HeldFrame {
    let frame: FrameBuffer
    init(_ f: consuming FrameBuffer) { frame = f }
}
