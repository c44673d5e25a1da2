// A whole multipart MJPEG body as a client saved it (curl -o), split into its parts and checked
// against RFC 2046's framing: shared by the server's host tests and its driver tests.
import Foundation

public enum MultipartBody {
    public struct Part: Sendable {
        /// Header names lowercased.
        public var headers: [String: String]
        public var jpeg: [UInt8]
        public var isCompleteJPEG: Bool {
            jpeg.count > 4 && jpeg[0] == 0xFF && jpeg[1] == 0xD8 && jpeg[jpeg.count - 2] == 0xFF && jpeg.last == 0xD9
        }
    }

    public struct Parsed: Sendable {
        /// The whole parts (each as long as its Content-Length, followed by its CRLF).
        public var parts: [Part]
        /// Whether the body ended with the close delimiter (`--BOUNDARY--`) and nothing after it.
        public var isClosed: Bool
        /// Bytes after the last whole part that are not the close delimiter (a cut part).
        public var trailing: Int
    }

    /// Splits `body`; throws for framing that is wrong (a part without Content-Length, bytes where
    /// a boundary belongs).
    public static func parse(_ body: [UInt8], boundary: String = "boundarydonotcross") throws -> Parsed {
        let open = Array("--\(boundary)\r\n".utf8), close = Array("--\(boundary)--".utf8)
        var i = 0, parts: [Part] = []
        func starts(_ p: [UInt8], at k: Int) -> Bool { k + p.count <= body.count && Array(body[k..<k + p.count]) == p }
        while i < body.count {
            // Blank lines between parts are allowed (the part's own CRLF ends its data).
            if starts([0x0D, 0x0A], at: i) { i += 2; continue }
            if starts(close, at: i) {
                let rest = body[(i + close.count)...].filter { $0 != 0x0D && $0 != 0x0A }
                return Parsed(parts: parts, isClosed: rest.isEmpty, trailing: rest.count)
            }
            guard starts(open, at: i) else {
                if body.count - i < open.count { return Parsed(parts: parts, isClosed: false, trailing: body.count - i) }
                throw Failure(
                    "expected a boundary at byte \(i), found \(String(decoding: body[i..<min(i + 40, body.count)], as: UTF8.self).debugDescription)"
                )
            }
            var j = i + open.count
            var headers: [String: String] = [:]
            var headEnded = false
            while let eol = body[j...].firstIndex(of: 0x0A) {
                let line = String(decoding: body[j..<eol], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
                j = eol + 1
                if line.isEmpty { headEnded = true; break }
                if let c = line.firstIndex(of: ":") {
                    headers[line[..<c].lowercased()] = line[line.index(after: c)...].trimmingCharacters(in: .whitespaces)
                }
            }
            guard headEnded else { return Parsed(parts: parts, isClosed: false, trailing: body.count - i) }
            guard let length = headers["content-length"].flatMap({ Int($0) }), length >= 0 else {
                throw Failure("a part without a valid Content-Length: \(headers)")
            }
            guard j + length <= body.count else { return Parsed(parts: parts, isClosed: false, trailing: body.count - i) }
            parts.append(Part(headers: headers, jpeg: Array(body[j..<j + length])))
            i = j + length
        }
        return Parsed(parts: parts, isClosed: false, trailing: 0)
    }

    public struct Failure: Error, CustomStringConvertible, Sendable {
        public var description: String
        init(_ d: String) { description = d }
    }
}
