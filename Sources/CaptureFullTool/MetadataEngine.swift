// `capture metadata`: QR codes, barcodes and faces the camera sees, one line (or JSON object) per
// detection, through CaptureVision's metadata output.
import Capture
import CaptureToolCore
import CaptureVision
import CaptureVisionServer
import Foundation

/// Prints each detection as it comes (on its own serial queue): one line an object, or with
/// `--json` its JSON as `/metadata`'s events carry it (CaptureVisionServer writes both).
final class MetadataPrinter: CaptureMetadataOutputObjectsDelegate, @unchecked Sendable {
    let json: Bool
    init(json: Bool) { self.json = json }

    func metadataOutput(_ output: CaptureMetadataOutput, didOutput objects: [MetadataObject], from connection: CaptureConnection) {
        for o in objects {
            if json {
                print(MetadataEvent.objectJSON(o))
                continue
            }
            let b = o.bounds
            let bounds = [b.minX, b.minY, b.width, b.height].map { String(format: "%.4f", Double($0)) }.joined(separator: ",")
            let text = (o as? MetadataMachineReadableCodeObject)?.stringValue.map { " " + Self.escaped($0) }
            let what = text ?? (o as? MetadataFaceObject).map { " id \($0.faceID)" } ?? ""
            print("\(o.sequenceNumber) \(o.type.name) \(bounds)\(what)")
        }
        FileHandle.standardOutput.synchronizeFile()
    }

    /// A code's text on one line, as C writes it: a backslash and every control character
    /// escaped (`\n`, `\t`, `\x1b`...), so a code cannot forge a line or reach the terminal.
    static func escaped(_ text: String) -> String {
        var out = ""
        for u in text.unicodeScalars {
            switch u {
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _
            where u.properties.generalCategory == .control || u.properties.generalCategory == .format
                || u == "\u{2028}" || u == "\u{2029}":
                out += u.value <= 0xFF ? String(format: "\\x%02x", u.value) : String(format: "\\u{%x}", u.value)
            default: out.unicodeScalars.append(u)
            }
        }
        return out
    }
}

func metadataCommand(_ args: Arguments) throws {
    let frames = args.values["frames"] == nil ? nil : try args.int("frames", default: 0, range: 1...10_000_000)
    let seconds =
        try args.values["seconds"].map { s -> Double in
            guard let v = Double(s), v > 0, v <= 86_400 else {
                throw UsageError("--seconds takes a number of seconds above 0, not '\(s)'")
            }
            return v
        } ?? (frames == nil ? 10 : 86_400)
    let rect = try args.values["rect"].map { s -> CGRect in
        let v = s.split(separator: ",").compactMap { Double($0) }
        guard v.count == 4, v.allSatisfy({ (0...1).contains($0) }), v[2] > 0, v[3] > 0 else {
            throw UsageError("--rect takes X,Y,W,H from 0 to 1 (e.g. 0.25,0.25,0.5,0.5), not '\(s)'")
        }
        return CGRect(x: v[0], y: v[1], width: v[2], height: v[3])
    }
    let device = try chooseCamera(args.values["device"])
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
