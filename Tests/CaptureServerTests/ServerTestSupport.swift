import Capture
import CaptureServer
import CaptureTestSupport
import Foundation
import Testing

/// A virtual camera served in-process: its own camera (unique name), a running session with a
/// still output, a server on a free port of 127.0.0.1 and a temporary album.
final class ServedCamera: @unchecked Sendable {
    let camera: VirtualCamera
    let session = CaptureSession()
    let still = CaptureStillImageOutput()
    let server: CaptureStreamServer
    let album: URL
    /// The session's virtual microphone (a 1 kHz tone), when asked for.
    let microphone: VirtualMicrophone?
    var port: Int { server.port }

    init(
        width: Int = 320, height: Int = 240, fps: Double = 15, position: DevicePosition = .back, microphone: Bool = false,
        configure: (inout CaptureStreamServer.Configuration) -> Void = { _ in },
        prepare: (CaptureStreamServer) throws -> Void = { _ in }
    ) throws {
        camera = VirtualCamera(
            name: "Served \(UUID().uuidString.prefix(8))", position: position,
            formats: [.init(.yuyv, width: width, height: height, frameRates: [fps])])
        VirtualCamera.install(camera)
        album = FileManager.default.temporaryDirectory.appendingPathComponent("served-album-\(UUID().uuidString)")
        let device = try #require(CaptureDevice.device(withUniqueID: camera.uniqueID))
        session.addInput(try CaptureDeviceInput(device: device))
        if microphone {
            let mic = VirtualMicrophone(name: "Served mic \(UUID().uuidString.prefix(8))")
            VirtualMicrophone.install(mic)
            self.microphone = mic
            session.addInput(try CaptureDeviceInput(device: try #require(CaptureDevice.device(withUniqueID: mic.uniqueID))))
        } else {
            self.microphone = nil
        }
        session.addOutput(still)
        var config = CaptureStreamServer.Configuration(
            port: 0, quality: 80, connectionTimeout: 3,
            photoLibrary: PhotoLibrary(directory: album))
        configure(&config)
        server = try CaptureStreamServer(session: session, configuration: config)
        try prepare(server)
        try session.start()
        try server.start()
    }

    func close() {
        server.stop()
        session.stopRunning()
        VirtualCamera.uninstall(camera)
        if let microphone { VirtualMicrophone.uninstall(microphone) }
        try? FileManager.default.removeItem(at: album)
    }

    var base: String { "http://127.0.0.1:\(port)" }
}

/// curl's options for a POST that changes state, as the web app sends it.
let apiPost = ["-X", "POST", "-H", "X-Requested-With: test"]

/// `curl` with a status line appended to its output: returns (status, body, headers).
func curl(_ url: String, _ extra: [String] = []) throws -> (status: Int, body: Data, headers: String) {
    let headerFile = FileManager.default.temporaryDirectory.appendingPathComponent("curl-headers-\(UUID().uuidString)")
    defer { try? FileManager.default.removeItem(at: headerFile) }
    let r = try runProcess("/usr/bin/curl", ["-s", "-S", "--max-time", "30", "-D", headerFile.path, "-o", "-"] + extra + [url])
    let headers = (try? String(contentsOf: headerFile, encoding: .utf8)) ?? ""
    let statusLine = headers.split(separator: "\r\n").last { $0.hasPrefix("HTTP/") } ?? ""
    let status = statusLine.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? -1
    if r.status != 0 && status < 0 { throw TestFailure("curl \(url) failed (\(r.status)): \(r.stderr)") }
    return (status, r.stdout, headers)
}

/// A plain TCP client of the server (for streams read part by part, and for hostile bytes).
final class RawClient: @unchecked Sendable {
    let fd: Int32
    private var buffer: [UInt8] = []

    /// Connects to 127.0.0.1:`port`; `receiveBuffer` shrinks the socket's receive buffer (a
    /// client that does not read then stalls the server's writes soon).
    init(port: Int, receiveBuffer: Int32? = nil, readTimeout: Int = 20) throws {
        // The descriptor is the client's only once connected: a failed connect closes it here and
        // throws before `fd` is set, so `deinit` never closes the number again (by then it may be
        // another thread's, e.g. a server's accepted socket).
        let s = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard s >= 0 else { throw TestFailure("socket: \(errno)") }
        if var size = receiveBuffer {
            setsockopt(s, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        var tv = timeval(tv_sec: readTimeout, tv_usec: 0)
        setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = UInt16(port).bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(s, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard rc == 0 else {
            let e = errno
            Glibc.close(s)
            throw TestFailure("connect to \(port): errno \(e)")
        }
        fd = s
    }

    deinit { Glibc.close(fd) }

    /// Ends the connection from this side (the server sees the client go).
    func shutdown() { _ = Glibc.shutdown(fd, Int32(SHUT_RDWR)) }

    func send(_ bytes: [UInt8]) {
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return }
            sent += n
        }
    }

    func send(_ text: String) { send(Array(text.utf8)) }

    /// Reads more bytes into the buffer; false at the end of the stream, an error or the timeout.
    private func fill() -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65_536)
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if n <= 0 { return false }
        buffer.append(contentsOf: chunk[0..<n])
        return true
    }

    /// A line ending in CRLF (without it); nil at the end.
    func line() -> String? {
        while true {
            if let i = buffer.firstIndex(of: 0x0A) {
                var l = Array(buffer[..<i])
                buffer.removeFirst(i + 1)
                if l.last == 0x0D { l.removeLast() }
                return String(decoding: l, as: UTF8.self)
            }
            if buffer.count > 1_000_000 || !fill() { return nil }
        }
    }

    func bytes(_ n: Int) -> [UInt8]? {
        while buffer.count < n { if !fill() { return nil } }
        let b = Array(buffer[..<n])
        buffer.removeFirst(n)
        return b
    }

    /// Everything until the server closes, and whether it did (false: the read timed out).
    func readUntilClosed() -> (bytes: [UInt8], closed: Bool) {
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n > 0 { buffer.append(contentsOf: chunk[0..<n]); continue }
            let closed = n == 0 || errno == ECONNRESET
            defer { buffer.removeAll() }
            return (buffer, closed)
        }
    }

    /// Whether the server has closed the connection, without waiting (what it sent is dropped).
    var isClosedByPeer: Bool {
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if n > 0 { continue }
            return n == 0 || errno == ECONNRESET || errno == EPIPE
        }
    }

    /// Everything until the server closes (or the timeout).
    func readToEnd() -> [UInt8] {
        while fill() {}
        defer { buffer.removeAll() }
        return buffer
    }

    /// The status line and headers of a response (lowercased names).
    func responseHead() -> (status: Int, headers: [String: String])? {
        guard let status = line(), status.hasPrefix("HTTP/") else { return nil }
        var headers: [String: String] = [:]
        while let l = line(), !l.isEmpty {
            if let c = l.firstIndex(of: ":") {
                headers[l[..<c].lowercased()] = l[l.index(after: c)...].trimmingCharacters(in: .whitespaces)
            }
        }
        return (Int(status.split(separator: " ")[1]) ?? -1, headers)
    }
}

/// One part of an MJPEG stream as a client reads it.
struct StreamPart: Sendable {
    var headers: [String: String]
    var jpeg: [UInt8]
    var sequence: UInt64? { headers["x-sequence"].flatMap { UInt64($0) } }
    var timestamp: Double? { headers["x-timestamp"].flatMap { Double($0) } }
    var isCompleteJPEG: Bool { jpeg.count > 4 && jpeg[0] == 0xFF && jpeg[1] == 0xD8 && jpeg[jpeg.count - 2] == 0xFF && jpeg.last == 0xD9 }
}

/// Reads `/stream` over HTTP/1.0 (no chunking), part by part, checking the multipart framing.
final class StreamReader: @unchecked Sendable {
    let client: RawClient
    let status: Int
    let headers: [String: String]

    /// Whether the stream ended with the multipart close delimiter.
    private(set) var sawCloseDelimiter = false

    init(port: Int, path: String = "/stream", extraHeaders: String = "") throws {
        client = try RawClient(port: port)
        client.send("GET \(path) HTTP/1.0\r\nHost: 127.0.0.1\r\n\(extraHeaders)\r\n")
        guard let head = client.responseHead() else { throw TestFailure("no response head for \(path)") }
        status = head.status
        headers = head.headers
    }

    /// The next part, or nil at the end of the stream (or a framing error, thrown).
    func next() throws -> StreamPart? {
        var boundary = client.line()
        while boundary == "" { boundary = client.line() }
        guard let boundary else { return nil }
        if boundary == "--boundarydonotcross--" {
            sawCloseDelimiter = true
            return nil
        }
        guard boundary == "--boundarydonotcross" else { throw TestFailure("expected the boundary, got '\(boundary.prefix(80))'") }
        var headers: [String: String] = [:]
        while let l = client.line(), !l.isEmpty {
            if let c = l.firstIndex(of: ":") {
                headers[l[..<c].lowercased()] = l[l.index(after: c)...].trimmingCharacters(in: .whitespaces)
            }
        }
        guard let length = headers["content-length"].flatMap({ Int($0) }) else {
            throw TestFailure("a part without Content-Length: \(headers)")
        }
        guard let jpeg = client.bytes(length) else { return nil }
        return StreamPart(headers: headers, jpeg: jpeg)
    }
}

/// The monotonic clock in seconds (as the part's X-Timestamp).
func monotonicSeconds() -> Double { CaptureTime.now().seconds }
