// `capture metadata`: QR codes, barcodes and faces the camera sees, one line (or JSON object) per
// detection, through CaptureVision's metadata output.
import Capture
import CaptureVision
import Foundation

extension Command {
    static let metadata = Command(
        name: "metadata", summary: "print the QR codes, barcodes and faces the camera sees",
        usage: """
            usage: capture metadata [--device PATH|ID|virtual|file:MEDIA] [--preset NAME | --size WxH] [--format FOURCC]
                                    [--types qr,ean13,face,...] [--rect X,Y,W,H] [--frames N | --seconds S] [--json]
                   (--types: qr, ean8, ean13, upce, code39, code93, code128, itf, pdf417, datamatrix, aztec, codabar,
                   face; all by default; --rect: the part of the frame to look in, 0...1 from the top left;
                   stops after N frames looked at, or S seconds (10 by default))
            """,
        options: Options(
            valued: ["device", "preset", "size", "format", "types", "rect", "frames", "seconds"], boolean: ["json"],
            exclusive: [presetOrSize, ["frames", "seconds"]]),
        run: metadataCommand)
}

// The JSON keys `capture` prints are snake_case; the names are the keys.
// swift-format-ignore: AlwaysUseLowerCamelCase
struct MetadataJSON: Encodable {
    var type: String, sequence: UInt64, time: Double, bounds: [Double]
    var text: String?, corners: [[Double]]?, face_id: Int?
}

/// Prints each detection as it comes (on its own serial queue).
final class MetadataPrinter: CaptureMetadataOutputObjectsDelegate, @unchecked Sendable {
    let json: Bool
    let encoder = JSONEncoder()
    init(json: Bool) {
        self.json = json
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    }

    func metadataOutput(_ output: CaptureMetadataOutput, didOutput objects: [MetadataObject], from connection: CaptureConnection) {
        for o in objects {
            func r(_ v: CGFloat) -> Double { (Double(v) * 10000).rounded() / 10000 }
            let b = o.bounds
            var line = MetadataJSON(
                type: o.type.name, sequence: o.sequenceNumber, time: Double(o.time.nanoseconds) / 1e9,
                bounds: [r(b.minX), r(b.minY), r(b.width), r(b.height)])
            if let code = o as? MetadataMachineReadableCodeObject {
                line.text = code.stringValue
                line.corners = code.corners.map { [r($0.x), r($0.y)] }
            }
            if let face = o as? MetadataFaceObject { line.face_id = face.faceID }
            if json, let data = try? encoder.encode(line) {
                print(String(decoding: data, as: UTF8.self))
            } else {
                let bounds = line.bounds.map { String(format: "%.4f", $0) }.joined(separator: ",")
                let what = line.text.map { " " + $0 } ?? line.face_id.map { " id \($0)" } ?? ""
                print("\(line.sequence) \(line.type) \(bounds)\(what)")
            }
        }
        FileHandle.standardOutput.synchronizeFile()
    }
}

func metadataCommand(_ args: Arguments) throws {
    let device = try chooseCamera(args.values["device"])
    let frames = args.values["frames"] == nil ? nil : try args.int("frames", default: 0, range: 1...10_000_000)
    let seconds =
        try args.values["seconds"].map { s -> Double in
            guard let v = Double(s), v > 0, v <= 86_400 else {
                throw ToolError(message: "--seconds takes a number of seconds above 0, not '\(s)'")
            }
            return v
        } ?? (frames == nil ? 10 : 86_400)
    let rect = try args.values["rect"].map { s -> CGRect in
        let v = s.split(separator: ",").compactMap { Double($0) }
        guard v.count == 4, v.allSatisfy({ (0...1).contains($0) }), v[2] > 0, v[3] > 0 else {
            throw ToolError(message: "--rect takes X,Y,W,H from 0 to 1 (e.g. 0.25,0.25,0.5,0.5), not '\(s)'")
        }
        return CGRect(x: v[0], y: v[1], width: v[2], height: v[3])
    }
    let output = CaptureMetadataOutput()
    let printer = MetadataPrinter(json: args.flags.contains("json"))
    let session = try makeSession(device, args, outputs: []) { $0.addOutput(output) }
    defer { session.stopRunning() }
    let types = try metadataTypes(args.values["types"], option: "types", available: output.availableMetadataObjectTypes)
    try output.setMetadataObjectTypes(types)
    if let rect { output.rectOfInterest = rect }
    output.setMetadataObjectsDelegate(printer, queue: DispatchQueue(label: "capture.metadata"))
    let signals = SignalStop([SIGINT, SIGTERM]) {}
    defer { signals.cancel() }
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline, !signals.fired {
        if let frames, output.statistics.framesDetected >= frames { break }
        Thread.sleep(forTimeInterval: 0.02)
    }
    output.setMetadataObjectsDelegate(nil, queue: nil)
    let s = output.statistics
    FileHandle.standardError.write(
        Data(
            String(
                format: "capture: %d frames looked at, %d skipped while busy, %.1f ms CPU a frame\n", s.framesDetected, s.framesSkipped,
                s.cpuSecondsPerFrame * 1000
            ).utf8))
}
