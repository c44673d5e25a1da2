// capture-bench metadata: the metadata output's detection against the libraries called directly,
// side by side in one process, on the same camera showing the same picture:
//   (a) a session on a virtual camera showing the picture, with a CaptureMetadataOutput looking
//       for --types: its thread's CPU per frame looked at (luma copy, readers, objects), as the
//       output's statistics count it;
//   (b) the same readers called directly (zxing-cpp's ReadBarcodes and OpenCV's cascade through
//       cvision.h, with the output's parameters) by a video data output's delegate on each
//       frame's luma plane in the same kind of session: thread CPU per frame;
//   (c) the same readers in a back-to-back loop on copies of that camera's luma, for reference.
// (b) and not (c) is the library as an app would call it: once a frame, every 33 ms, its caches
// cooled by everything else in between. That alone costs zxing-cpp up to a fifth more at 640x480
// (BENCHMARKS.md), which a comparison with (c) charged to the output.
// Rounds alternate the order; the report gives the medians and the median ratios (a)/(b) (goal:
// at most 1.1) and (a)/(c).
import Capture
import CaptureVision
import CVisionShim
import Foundation

/// A picture for the camera: --input (JPEG), or a QR code made by qrencode on grey.
private func benchPicture(_ a: Arguments, width: Int, height: Int) -> VirtualCamera.Picture {
    if let path = a.string("input") {
        do { return try VirtualCamera.Picture(contentsOfFile: path) } catch { fail("--input: \(error)") }
    }
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/usr/bin/qrencode")
    p.arguments = ["-t", "ASCII", "-m", "4", "-o", "-", "capture-bench metadata: https://example.com/"]
    let pipe = Pipe()
    p.standardOutput = pipe
    do { try p.run() } catch { fail("qrencode is needed without --input: \(error)") }
    let rows = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).split(separator: "\n").map(Array.init)
    p.waitUntilExit()
    let n = rows.count, module = max(1, height / 2 / max(1, n))
    var grey = [UInt8](repeating: 128, count: width * height)
    for y in 0..<(n * module) {
        for x in 0..<(n * module) {
            let row = rows[y / module], i = 2 * (x / module)
            grey[(y + height / 4) * width + x + width / 4] = i < row.count && row[i] == "#" ? 0 : 255
        }
    }
    do { return try VirtualCamera.Picture(grey: grey, width: width, height: height) } catch { fail("\(error)") }
}

/// (a): the output in a session for `seconds`; CPU per frame looked at and the frames.
private func outputRoute(_ device: CaptureDevice, size: (Int, Int), types: [MetadataObjectType], seconds: Double) -> (Double, Int, Int) {
    let output = CaptureMetadataOutput()
    let session = openSession(device: device, size: size, format: .nv12, rate: 30, outputs: [])
    session.addOutput(output)
    do {
        try output.setMetadataObjectTypes(types)
        try session.start()
    } catch { fail("\(error)") }
    Thread.sleep(forTimeInterval: seconds)
    session.stopRunning()
    let s = output.statistics
    return (s.cpuSecondsPerFrame, s.framesDetected, s.framesSkipped)
}

/// The readers as an app would call them itself, through cvision.h with the output's parameters
/// (zxing-cpp's ReadBarcodes, OpenCV's cascade), and their thread CPU per frame.
private final class DirectReaders: @unchecked Sendable {
    private let reader: OpaquePointer?
    private let faces: OpaquePointer?
    private var found = [cvision_code](repeating: cvision_code(), count: 32)
    private var text = [CChar](repeating: 0, count: 64 * 1024)
    private var rects = [cvision_rect](repeating: cvision_rect(), count: 64)
    private(set) var cpu = 0.0
    private(set) var frames = 0

    init(types: [MetadataObjectType]) {
        let codes = types.filter { $0 != .face }
        reader = codes.isEmpty ? nil : cvision_barcode_reader_create(codes.reduce(0) { $0 | $1.zxingFormats })
        faces = types.contains(.face) ? cvision_face_detector_create(FaceDetector.cascadePath) : nil
        if types.contains(.face), faces == nil { fail("cannot load \(FaceDetector.cascadePath)") }
    }

    deinit {
        if let reader { cvision_barcode_reader_destroy(reader) }
        if let faces { cvision_face_detector_destroy(faces) }
    }

    /// Runs the readers on one luma plane (`stride` bytes a row); counts its thread CPU.
    func read(_ luma: UnsafePointer<UInt8>, width: Int, height: Int, stride: Int) {
        let c0 = threadCPUNow()
        if let reader {
            _ = cvision_barcode_read(
                reader, luma, Int32(width), Int32(height), Int32(stride), &found, Int32(found.count), &text, Int32(text.count))
        }
        if let faces {
            _ = cvision_face_detect(
                faces, luma, Int32(width), Int32(height), Int32(stride), Int32(FaceDetector.workingSide),
                Int32(FaceDetector.minimumFace), &rects, Int32(rects.count))
        }
        cpu += threadCPUNow() - c0
        frames += 1
    }
}

/// (b): the readers called directly by a video data output's delegate on each frame's luma plane
/// (the camera's buffer, no copy), in a session like (a)'s for `seconds`: the library at the
/// camera's pace, with its caches as cold as the output's. CPU per frame and the frames.
private final class DirectDelegate: CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
    let readers: DirectReaders
    init(_ readers: DirectReaders) { self.readers = readers }
    func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
        guard let size = sampleBuffer.dimensions else { return }
        let stride = sampleBuffer.bytesPerRow(plane: 0)
        sampleBuffer.withUnsafeBytes(plane: 0) { raw in
            guard let base = raw.baseAddress, raw.count >= stride * (size.height - 1) + size.width else { return }
            readers.read(base.assumingMemoryBound(to: UInt8.self), width: size.width, height: size.height, stride: stride)
        }
    }
    func captureOutput(_ output: CaptureOutput, didDrop drop: DroppedFrames, from connection: CaptureConnection) {}
}

private func directRoute(_ device: CaptureDevice, size: (Int, Int), types: [MetadataObjectType], seconds: Double) -> (Double, Int) {
    let delegate = DirectDelegate(DirectReaders(types: types))
    let video = CaptureVideoDataOutput()
    let queue = DispatchQueue(label: "bench.metadata.direct")
    video.setSampleBufferDelegate(delegate, queue: queue)
    let session = openSession(device: device, size: size, format: .nv12, rate: 30, outputs: [video])
    do { try session.start() } catch { fail("\(error)") }
    Thread.sleep(forTimeInterval: seconds)
    session.stopRunning()
    video.setSampleBufferDelegate(nil, queue: nil)
    // (The delegate queue may still be in a call: read the figures on it.)
    return queue.sync { () -> (Double, Int) in
        let r = delegate.readers
        return (r.frames == 0 ? .nan : r.cpu / Double(r.frames), r.frames)
    }
}

/// (c): the readers called directly in a loop on copies of the camera's luma for `seconds`,
/// back to back (caches warm from the frame before): the library's best case, for reference.
private func loopRoute(_ lumas: [[UInt8]], width: Int, height: Int, types: [MetadataObjectType], seconds: Double) -> Double {
    let readers = DirectReaders(types: types)
    let start = wallNow()
    while wallNow() - start < seconds || readers.frames < 2 {
        for luma in lumas {
            luma.withUnsafeBufferPointer { readers.read($0.baseAddress!, width: width, height: height, stride: width) }
        }
    }
    return readers.cpu / Double(readers.frames)
}

func metadataBench(_ a: Arguments) {
    let (w, h) = a.size((1280, 720))
    let seconds = a.double("seconds", 3)
    let rounds = max(1, a.int("rounds", 5))
    let types = (a.string("types") ?? "qr,face").split(separator: ",").map { name -> MetadataObjectType in
        guard let t = MetadataObjectType(name: String(name)) else { fail("--types: no type '\(name)'") }
        return t
    }
    let camera = VirtualCamera(
        name: "Bench Metadata Camera", position: .back, formats: [VirtualCamera.Mode(.nv12, width: w, height: h, frameRates: [30])])
    camera.picture = benchPicture(a, width: w, height: h)
    VirtualCamera.install(camera)
    defer { VirtualCamera.uninstall(camera) }
    guard let device = CaptureDevice.device(withUniqueID: camera.uniqueID) else { fail("virtual camera not listed") }
    // The loop's frames: the luma planes of what this camera delivers (NV12: the first plane).
    let collected = collectFrames(device, size: (w, h), format: .nv12, count: 8)
    let lumas = collected.frames.map { f in (0..<h).flatMap { f[($0 * collected.pitch)..<($0 * collected.pitch + w)] } }

    var ours: [Double] = [], direct: [Double] = [], loop: [Double] = [], ratios: [Double] = [], loopRatios: [Double] = []
    var looked = 0, skipped = 0, directFrames = 0, emptyRounds = 0
    for round in 0..<rounds {
        // (a) and (b) in alternating order; (c) between them.
        var o = (Double.nan, 0, 0), d = (Double.nan, 0)
        if round % 2 == 0 {
            o = outputRoute(device, size: (w, h), types: types, seconds: seconds)
            loop.append(loopRoute(lumas, width: w, height: h, types: types, seconds: seconds / 2))
            d = directRoute(device, size: (w, h), types: types, seconds: seconds)
        } else {
            d = directRoute(device, size: (w, h), types: types, seconds: seconds)
            loop.append(loopRoute(lumas, width: w, height: h, types: types, seconds: seconds / 2))
            o = outputRoute(device, size: (w, h), types: types, seconds: seconds)
        }
        looked += o.1
        skipped += o.2
        directFrames += d.1
        // A round in which a busy machine left the output no frame has no figure.
        guard o.1 > 0 else {
            emptyRounds += 1
            continue
        }
        ours.append(o.0)
        direct.append(d.0)
        ratios.append(o.0 / d.0)
        loopRatios.append(o.0 / loop[loop.count - 1])
    }
    var r = Report()
    r.add("mode", "metadata")
    r.add("width", w)
    r.add("height", h)
    r.add("types", types.map(\.name).joined(separator: ","))
    r.add("rounds", rounds)
    r.add("frames_looked_at_output", looked)
    r.add("frames_skipped_output", skipped)
    r.add("frames_direct", directFrames)
    r.add("rounds_without_output_frames", emptyRounds)
    r.add("cpu_ms_per_frame_output", median(ours) * 1000)
    r.add("cpu_ms_per_frame_direct", median(direct) * 1000)
    r.add("cpu_ms_per_frame_direct_loop", median(loop) * 1000)
    // Goal: at most 1.1 (against the library called directly on the same frames at the same pace).
    r.add("cpu_ratio", median(ratios))
    r.add("cpu_ratios", ratios.map { String(format: "%.3f", $0) }.joined(separator: " "))
    // Against the back-to-back loop: includes what the library itself loses to running once a frame.
    r.add("cpu_ratio_loop", median(loopRatios))
    r.print(json: a.flags.contains("json"))
}
