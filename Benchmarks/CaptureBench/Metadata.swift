// capture-bench metadata: the metadata output's detection against the libraries called directly,
// side by side in one process, on the same picture:
//   (a) a session on a virtual camera showing the picture, with a CaptureMetadataOutput looking
//       for --types: its thread's CPU per frame looked at (luma copy, readers, objects), as the
//       output's statistics count it;
//   (b) the same readers called directly (zxing-cpp's ReadBarcodes and OpenCV's cascade through
//       cvision.h, with the output's parameters) on copies of that camera's luma: thread CPU per
//       frame.
// Rounds alternate the order; the report gives the medians and the median ratio (a)/(b) (goal:
// at most 1.1).
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

/// (b): the readers called directly on `lumas` for `seconds`; thread CPU per frame.
private func directRoute(_ lumas: [[UInt8]], width: Int, height: Int, types: [MetadataObjectType], seconds: Double) -> Double {
    let codes = types.filter { $0 != .face }
    let reader = codes.isEmpty ? nil : cvision_barcode_reader_create(codes.reduce(0) { $0 | $1.zxingFormats })
    let faces = types.contains(.face) ? cvision_face_detector_create(FaceDetector.cascadePath) : nil
    defer {
        if let reader { cvision_barcode_reader_destroy(reader) }
        if let faces { cvision_face_detector_destroy(faces) }
    }
    if types.contains(.face), faces == nil { fail("cannot load \(FaceDetector.cascadePath)") }
    var found = [cvision_code](repeating: cvision_code(), count: 32)
    var text = [CChar](repeating: 0, count: 64 * 1024)
    var rects = [cvision_rect](repeating: cvision_rect(), count: 64)
    let start = wallNow(), c0 = threadCPUNow()
    var frames = 0
    while wallNow() - start < seconds || frames < 2 {
        for luma in lumas {
            luma.withUnsafeBufferPointer { l in
                if let reader {
                    _ = cvision_barcode_read(
                        reader, l.baseAddress, Int32(width), Int32(height), Int32(width), &found, Int32(found.count), &text,
                        Int32(text.count))
                }
                if let faces {
                    _ = cvision_face_detect(
                        faces, l.baseAddress, Int32(width), Int32(height), Int32(width), Int32(FaceDetector.workingSide),
                        Int32(FaceDetector.minimumFace), &rects, Int32(rects.count))
                }
            }
            frames += 1
        }
    }
    return (threadCPUNow() - c0) / Double(frames)
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
    // The direct route's frames: the luma planes of what this camera delivers (NV12: the first plane).
    let collected = collectFrames(device, size: (w, h), format: .nv12, count: 8)
    let lumas = collected.frames.map { f in (0..<h).flatMap { f[($0 * collected.pitch)..<($0 * collected.pitch + w)] } }

    var ours: [Double] = [], direct: [Double] = [], ratios: [Double] = []
    var looked = 0, skipped = 0
    for round in 0..<rounds {
        var o = (Double.nan, 0, 0), d = Double.nan
        if round % 2 == 0 {
            o = outputRoute(device, size: (w, h), types: types, seconds: seconds)
            d = directRoute(lumas, width: w, height: h, types: types, seconds: seconds / 2)
        } else {
            d = directRoute(lumas, width: w, height: h, types: types, seconds: seconds / 2)
            o = outputRoute(device, size: (w, h), types: types, seconds: seconds)
        }
        ours.append(o.0)
        direct.append(d)
        ratios.append(o.0 / d)
        looked += o.1
        skipped += o.2
    }
    var r = Report()
    r.add("mode", "metadata")
    r.add("width", w)
    r.add("height", h)
    r.add("types", types.map(\.name).joined(separator: ","))
    r.add("rounds", rounds)
    r.add("frames_looked_at_output", looked)
    r.add("frames_skipped_output", skipped)
    r.add("cpu_ms_per_frame_output", median(ours) * 1000)
    r.add("cpu_ms_per_frame_direct", median(direct) * 1000)
    // Goal: at most 1.1.
    r.add("cpu_ratio", median(ratios))
    r.add("cpu_ratios", ratios.map { String(format: "%.3f", $0) }.joined(separator: " "))
    r.print(json: a.flags.contains("json"))
}
