// One detection batch as a server-sent event: written once per batch, for every client, by hand
// into one byte array (no JSONSerialization tree, no per-number strings).
import CaptureBackend
import CaptureVision
import Foundation

/// The bytes of `/metadata`'s events. Any thread (pure functions).
///
/// An event is `id: SERIAL`, then one `data:` line with a JSON object, then a blank line:
///
///     {"sequence":812,"time":4711.033360,"objects":[{"type":"qr","sequence":812,"time":4711.033360,
///      "bounds":[0.3125,0.2917,0.3750,0.5000],"corners":[[0.3125,0.2917],...],"text":"HELLO"},
///      {"type":"face","sequence":812,"time":4711.033360,"bounds":[...],"face_id":3}]}
///
/// The object keys are those of `capture metadata --json`: `type` (short name), `sequence` and
/// `time` (the frame's sequence number and capture time in seconds), `bounds` (x, y, width,
/// height), for codes `corners` and `text` (null when the code holds bytes that are not text),
/// for faces `face_id`. Coordinates are the metadata output's: 0...1 over the frame as the camera
/// delivers it, origin top left. An event with no objects says the objects went away. The tool's
/// `capture metadata --json` prints each object with `objectJSON(_:)`.
package enum MetadataEvent {
    /// What a client gets first: the reconnection delay for `EventSource` (2 s) and a comment.
    static let preamble = Array("retry: 2000\n: swift-capture metadata events\n\n".utf8)
    /// The keep-alive comment, sent when a client has had nothing for a while.
    static let keepAlive = Array(": keep-alive\n\n".utf8)

    /// The event for `batch`, numbered `serial`.
    static func bytes(_ batch: MetadataBatch, serial: UInt64) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(160 + 200 * batch.objects.count)
        out += "id: ".utf8
        appendInteger(serial, to: &out)
        out += "\ndata: {\"sequence\":".utf8
        appendInteger(batch.sequenceNumber, to: &out)
        out += ",\"time\":".utf8
        appendTime(batch.time, to: &out)
        out += ",\"objects\":[".utf8
        for (i, o) in batch.objects.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            appendObject(o, to: &out)
        }
        out += "]}\n\n".utf8
        return out
    }

    /// One object's JSON, as in an event (one line).
    package static func objectJSON(_ o: MetadataObject) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(200)
        appendObject(o, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    static func appendObject(_ o: MetadataObject, to out: inout [UInt8]) {
        out += "{\"type\":".utf8
        appendString(o.type.name, to: &out)
        out += ",\"sequence\":".utf8
        appendInteger(o.sequenceNumber, to: &out)
        out += ",\"time\":".utf8
        appendTime(o.time, to: &out)
        out += ",\"bounds\":[".utf8
        let b = o.bounds
        appendFixed(Double(b.minX), to: &out)
        out.append(UInt8(ascii: ","))
        appendFixed(Double(b.minY), to: &out)
        out.append(UInt8(ascii: ","))
        appendFixed(Double(b.width), to: &out)
        out.append(UInt8(ascii: ","))
        appendFixed(Double(b.height), to: &out)
        out.append(UInt8(ascii: "]"))
        if let code = o as? MetadataMachineReadableCodeObject {
            out += ",\"corners\":[".utf8
            for (i, p) in code.corners.enumerated() {
                out += (i > 0 ? ",[" : "[").utf8
                appendFixed(Double(p.x), to: &out)
                out.append(UInt8(ascii: ","))
                appendFixed(Double(p.y), to: &out)
                out.append(UInt8(ascii: "]"))
            }
            out += "],\"text\":".utf8
            if let text = code.stringValue { appendString(text, to: &out) } else { out += "null".utf8 }
        }
        if let face = o as? MetadataFaceObject {
            out += ",\"face_id\":".utf8
            if face.faceID < 0 { out.append(UInt8(ascii: "-")) }
            appendInteger(UInt64(face.faceID.magnitude), to: &out)
        }
        out.append(UInt8(ascii: "}"))
    }

    /// Decimal digits of `v`.
    static func appendInteger(_ v: UInt64, to out: inout [UInt8]) {
        if v >= 10 { appendInteger(v / 10, to: &out) }
        out.append(UInt8(ascii: "0") + UInt8(v % 10))
    }

    /// `v` with four decimals (a tenth of a pixel at 1920 wide); 0 for a value that is not finite.
    static func appendFixed(_ v: Double, to out: inout [UInt8]) {
        let scaled = v.isFinite ? (abs(v) * 10_000).rounded() : 0
        let n = scaled < 1e15 ? UInt64(scaled) : 0
        if v < 0 && n > 0 { out.append(UInt8(ascii: "-")) }
        appendInteger(n / 10_000, to: &out)
        out.append(UInt8(ascii: "."))
        appendPadded(n % 10_000, digits: 4, to: &out)
    }

    /// A capture time in seconds, to the microsecond.
    static func appendTime(_ t: CaptureTime, to out: inout [UInt8]) {
        let us = t.nanoseconds / 1000
        appendInteger(us / 1_000_000, to: &out)
        out.append(UInt8(ascii: "."))
        appendPadded(us % 1_000_000, digits: 6, to: &out)
    }

    private static func appendPadded(_ v: UInt64, digits: Int, to out: inout [UInt8]) {
        var divisor: UInt64 = 1
        for _ in 1..<digits { divisor *= 10 }
        while divisor > 0 {
            out.append(UInt8(ascii: "0") + UInt8(v / divisor % 10))
            divisor /= 10
        }
    }

    /// A JSON string: quotes, backslashes and control characters escaped, the rest as UTF-8.
    static func appendString(_ s: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "\""): out += "\\\"".utf8
            case UInt8(ascii: "\\"): out += "\\\\".utf8
            case UInt8(ascii: "\n"): out += "\\n".utf8
            case UInt8(ascii: "\r"): out += "\\r".utf8
            case UInt8(ascii: "\t"): out += "\\t".utf8
            case 0..<0x20:
                out += "\\u00".utf8
                let low = b & 15
                out.append(UInt8(ascii: "0") + (b >> 4))
                out.append(low < 10 ? UInt8(ascii: "0") + low : UInt8(ascii: "a") + (low - 10))
            default: out.append(b)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
