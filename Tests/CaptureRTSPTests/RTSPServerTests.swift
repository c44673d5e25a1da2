import Capture
import CaptureRTSP
import CaptureTestSupport
import Foundation
import Testing

/// A virtual camera (320x240 at 30 fps) in a running session and an RTSP server on loopback, on a
/// free port, for one test.
final class RTSPRig {
    let camera: InstalledCamera
    let microphone: VirtualMicrophone?
    let session = CaptureSession()
    let server: RTSPServer

    init(
        _ name: String, mode: VirtualCamera.Mode = InstalledCamera.smallMode, credentials: RTSPServer.Credentials? = nil,
        bitrate: Int = 2_000_000, keyFrameInterval: Int = 60, audio: Bool = false, sessionTimeout: Duration = .seconds(60)
    ) throws {
        camera = try InstalledCamera("RTSP \(name)", modes: [mode])
        session.addInput(try camera.input())
        if audio {
            let mic = try InstalledMicrophone("RTSP mic", frequency: 1000)
            microphone = mic.microphone
            session.addInput(try mic.input())
        } else {
            microphone = nil
        }
        session.startRunning()
        server = try RTSPServer(
            session: session,
            configuration: .init(
                port: 0, credentials: credentials, bitrate: bitrate, keyFrameInterval: keyFrameInterval, sessionTimeout: sessionTimeout))
    }

    var url: String { server.url }

    /// The URL with `user:password@` in it.
    func url(user: String, password: String) -> String {
        server.url.replacingOccurrences(of: "rtsp://", with: "rtsp://\(user):\(password)@")
    }

    func stop() {
        server.stop()
        session.stopRunning()
        camera.uninstall()
        if let microphone { VirtualMicrophone.uninstall(microphone) }
    }
}

/// ffprobe's codec, width and height of the first video stream at `url` ("h264,320,240"), and its
/// whole result.
func probe(_ url: String, transport: String) throws -> (String, ProcessResult) {
    let r = try runProcess(
        "/usr/bin/ffprobe",
        [
            "-v", "error", "-rtsp_transport", transport, "-select_streams", "v:0", "-show_entries", "stream=codec_name,width,height",
            "-of", "csv=p=0", url,
        ], timeout: 60)
    return (r.text.trimmingCharacters(in: .whitespacesAndNewlines), r)
}

/// The arguments of an ffmpeg that decodes `frames` video frames from `url` and throws them away.
func decodeArguments(_ url: String, transport: String, frames: Int) -> [String] {
    ["-nostdin", "-hide_banner", "-rtsp_transport", transport, "-i", url, "-frames:v", "\(frames)", "-f", "null", "-"]
}

/// The frames ffmpeg's last progress line says it decoded (its `frame=` count), or nil.
func decodedFrames(_ stderr: String) -> Int? {
    guard let r = stderr.range(of: "frame=", options: .backwards) else { return nil }
    return Int(stderr[r.upperBound...].drop { $0 == " " }.prefix { $0.isNumber })
}

@Suite(.serialized) struct RTSPServerTests {
    /// ffprobe reads H.264 at the camera's size over interleaved TCP and over UDP.
    @Test(arguments: ["tcp", "udp"]) func ffprobeReadsH264AtTheCamerasSize(transport: String) throws {
        let rig = try RTSPRig("probe \(transport)")
        defer { rig.stop() }
        let (stream, r) = try probe(rig.url, transport: transport)
        #expect(stream == "h264,320,240", "ffprobe over \(transport): \(stream) (status \(r.status)): \(r.stderr)")
    }

    /// ffmpeg decodes 30 frames over either transport, without errors in the stream.
    @Test(arguments: ["tcp", "udp"]) func ffmpegDecodesThirtyFrames(transport: String) throws {
        let rig = try RTSPRig("decode \(transport)")
        defer { rig.stop() }
        let r = try runProcess("/usr/bin/ffmpeg", decodeArguments(rig.url, transport: transport, frames: 30), timeout: 90)
        #expect(r.status == 0, "ffmpeg over \(transport) exited \(r.status): \(r.stderr)")
        #expect(decodedFrames(r.stderr) == 30, "ffmpeg over \(transport): \(r.stderr)")
    }

    /// With the session's microphone, the stream has AAC beside H.264 (the shared AAC stage's,
    /// the one `/stream.mp4` uses), and ffmpeg decodes both: 30 video frames and the sound with them.
    @Test(arguments: ["tcp", "udp"]) func theMicrophoneComesAsAAC(transport: String) throws {
        let rig = try RTSPRig("audio \(transport)", audio: true)
        defer { rig.stop() }
        #expect(rig.server.sendsAudio)
        let r = try runProcess(
            "/usr/bin/ffprobe",
            [
                "-v", "error", "-rtsp_transport", transport, "-show_entries", "stream=codec_name,sample_rate,channels", "-of", "csv=p=0",
                rig.url,
            ], timeout: 60)
        let streams = r.text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        #expect(streams.contains("h264,,") || streams.contains("h264"), "\(streams): \(r.stderr)")
        #expect(streams.contains { $0.hasPrefix("aac,") }, "\(streams): \(r.stderr)")
        let d = try runProcess("/usr/bin/ffmpeg", decodeArguments(rig.url, transport: transport, frames: 30), timeout: 90)
        #expect(d.status == 0 && decodedFrames(d.stderr) == 30, "ffmpeg over \(transport): \(d.stderr)")
        let audio = d.stderr.range(of: "audio:").map { Int(d.stderr[$0.upperBound...].prefix { $0.isNumber }) ?? 0 } ?? 0
        #expect(audio > 0, "no sound decoded: \(d.stderr)")
        #expect(rig.server.audioPacketsSent > 0)
    }

    /// GStreamer's own RTSP client (rtspsrc, as `gst-play-1.0` and `gst-discoverer-1.0` use it)
    /// reads the stream: H.264 at the camera's size and the microphone's AAC, decoded (the
    /// discoverer prerolls each stream through its decoder).
    @Test func gstreamersDiscovererReadsH264AndAAC() throws {
        let rig = try RTSPRig("discoverer", audio: true)
        defer { rig.stop() }
        let r = try runProcess("/usr/bin/gst-discoverer-1.0", ["-v", "-t", "30", rig.url], timeout: 60)
        let text = r.text
        #expect(r.status == 0, "gst-discoverer-1.0 exited \(r.status): \(text) \(r.stderr)")
        #expect(text.contains("video codec: H.264 (Constrained Baseline Profile)"), "\(text)")
        #expect(text.contains("Width: 320") && text.contains("Height: 240") && text.contains("Frame rate: 30/1"), "\(text)")
        #expect(text.contains("audio codec: MPEG-4 AAC") && text.contains("Sample rate: 48000"), "\(text)")
    }

    /// Two clients at once (one over TCP, one over UDP) read one shared media: the session encodes
    /// each camera frame once at most, not once per client, and both decode every frame they asked for.
    @Test func twoClientsShareOneEncode() async throws {
        let rig = try RTSPRig("two")
        defer { rig.stop() }
        let a = try RunningProcess(URL(fileURLWithPath: "/usr/bin/ffmpeg"), decodeArguments(rig.url, transport: "tcp", frames: 150))
        let b = try RunningProcess(URL(fileURLWithPath: "/usr/bin/ffmpeg"), decodeArguments(rig.url, transport: "udp", frames: 150))
        let server = rig.server
        let both = await eventually(timeout: 60) { server.clientCount == 2 && server.unitsSent > 0 }
        #expect(both, "\(rig.server.clientCount) clients")
        let (encodes0, frames0) = (rig.session.stageEncodes, rig.camera.camera.framesProduced)
        _ = a.exitStatus(timeout: 120)
        let (encodes1, frames1) = (rig.session.stageEncodes, rig.camera.camera.framesProduced)
        _ = b.exitStatus(timeout: 120)
        let encodes = encodes1 - encodes0, frames = Int(frames1 - frames0)
        print("rtsp, 2 clients: \(encodes) encodes for \(frames) camera frames")
        for (name, p) in [("tcp", a), ("udp", b)] {
            #expect(p.output.status == 0, "ffmpeg over \(name) exited \(p.output.status): \(p.output.stderr)")
            #expect(decodedFrames(p.output.stderr) == 150, "ffmpeg over \(name): \(p.output.stderr)")
        }
        // One encode per camera frame at most (a few of slack for the frames under way at
        // either end); two encoders would make about two per frame.
        #expect(frames > 30, "the camera made \(frames) frames while the clients read")
        #expect(encodes <= frames + 3, "\(encodes) encodes for \(frames) camera frames: a client had an encode of its own")
        #expect(encodes > 0)
        #expect(rig.session.stageEncodes > 0)
    }

    /// Ten clients at once (half over TCP, half over UDP; each copies the stream without
    /// decoding it, to spare the CPU) cost at most one encode per camera frame, and each gets its
    /// 90 frames.
    @Test func tenClientsShareOneEncode() async throws {
        let rig = try RTSPRig("ten")
        defer { rig.stop() }
        let clients = try (0..<10).map { i in
            try RunningProcess(
                URL(fileURLWithPath: "/usr/bin/ffmpeg"),
                [
                    "-nostdin", "-hide_banner", "-rtsp_transport", i % 2 == 0 ? "tcp" : "udp", "-i", rig.url, "-map", "0:v", "-c", "copy",
                    "-frames:v", "90", "-f", "null", "-",
                ])
        }
        let server = rig.server
        let all = await eventually(timeout: 90) { server.clientCount == 10 }
        #expect(all, "\(server.clientCount) clients")
        let (encodes0, frames0) = (rig.session.stageEncodes, rig.camera.camera.framesProduced)
        _ = clients[0].exitStatus(timeout: 120)
        let (encodes1, frames1) = (rig.session.stageEncodes, rig.camera.camera.framesProduced)
        for c in clients { _ = c.exitStatus(timeout: 120) }
        let encodes = encodes1 - encodes0, frames = Int(frames1 - frames0)
        print("rtsp, 10 clients: \(encodes) encodes for \(frames) camera frames")
        for (i, c) in clients.enumerated() {
            #expect(c.output.status == 0 && decodedFrames(c.output.stderr) == 90, "client \(i): \(c.output.stderr)")
        }
        #expect(frames > 15, "the camera made \(frames) frames while the clients read")
        #expect(encodes <= frames + 3, "\(encodes) encodes for \(frames) camera frames with 10 clients")
    }

    /// A UDP client that goes silent (its RTSP connection open, but no RTCP and no request: a
    /// player whose network went away) loses its session once it times out (2 s here): the
    /// shared media, its only user gone, is torn down, the encoder stops and the connection is
    /// closed. (Sessions expire only when the server's cleanup timer looks.) A client that
    /// reads over UDP all the while (ffmpeg, which sends its reports) keeps its session.
    @Test func aSilentUDPClientsSessionEnds() async throws {
        let rig = try RTSPRig("silent udp", sessionTimeout: .seconds(2))
        defer { rig.stop() }
        let silent = try StalledRTSPClient(url: rig.url, port: rig.server.port)
        defer { silent.close() }
        // (Ports nobody listens on: its RTP goes nowhere, and no RTCP comes back.)
        try silent.play(transport: "RTP/AVP;unicast;client_port=9-10")
        let server = rig.server
        let sending = await eventually(timeout: 30) { server.unitsSent > 10 && server.isEncoding }
        #expect(sending, "the silent client's media never ran")
        let r = try runProcess("/usr/bin/ffmpeg", decodeArguments(rig.url, transport: "udp", frames: 150), timeout: 120)
        #expect(r.status == 0 && decodedFrames(r.stderr) == 150, "the reading client: \(r.stderr)")
        let ended = await eventually(timeout: 60) { !server.isEncoding && server.clientCount == 0 }
        #expect(ended, "the silent client's session lives on (\(server.clientCount) clients, encoding \(server.isEncoding))")
    }

    /// With credentials, a client without them or with a wrong password is refused (401), and one
    /// with them reads the stream.
    @Test func credentialsAreRequired() throws {
        let rig = try RTSPRig("credentials", credentials: .init(user: "viewer", password: "s3cret-pass"))
        defer { rig.stop() }
        let (none, rNone) = try probe(rig.url, transport: "tcp")
        #expect(none.isEmpty && rNone.status != 0 && rNone.stderr.contains("401"), "without credentials: \(none) \(rNone.stderr)")
        let (wrong, rWrong) = try probe(rig.url(user: "viewer", password: "wrong"), transport: "tcp")
        #expect(wrong.isEmpty && rWrong.status != 0 && rWrong.stderr.contains("401"), "wrong password: \(wrong) \(rWrong.stderr)")
        let (right, rRight) = try probe(rig.url(user: "viewer", password: "s3cret-pass"), transport: "tcp")
        #expect(right == "h264,320,240", "with the credentials: \(right) (status \(rRight.status)): \(rRight.stderr)")
    }

    /// A client that plays over interleaved TCP and then never reads costs another TCP client no
    /// frame (it decodes all it asked for, and ffmpeg reports no RTP packet missed), and is
    /// closed by the server within 10 s of its connection filling (3 s of no room, looked at
    /// every second). The stream is made heavy (a noise picture, every frame a key frame at
    /// 20 Mbit/s) so that the stuck connection is full in well under a second.
    @Test func aClientThatStopsReadingIsDroppedAndCostsAnotherNothing() async throws {
        let mode = VirtualCamera.Mode(.yuyv, width: 640, height: 480, frameRates: [30])
        let rig = try RTSPRig("stuck", mode: mode, bitrate: 20_000_000, keyFrameInterval: 1)
        defer { rig.stop() }
        var noise = SystemRandomNumberGenerator()
        rig.camera.camera.picture = try .init(
            rgb: (0..<640 * 480 * 3).map { _ in UInt8.random(in: 0...255, using: &noise) }, width: 640, height: 480)
        let stuck = try StalledRTSPClient(url: rig.url, port: rig.server.port)
        defer { stuck.close() }
        try stuck.play()
        let played = ContinuousClock.now
        let url = rig.url
        let ffmpeg = Task.detached {
            try runProcess("/usr/bin/ffmpeg", decodeArguments(url, transport: "tcp", frames: 300), timeout: 240)
        }
        let server = rig.server
        let dropped = await eventually(timeout: 60) { server.clientsDropped == 1 }
        let droppedAfter = ContinuousClock.now - played
        let closed = await eventually(timeout: 10) { stuck.isClosedByServer }
        let r = try await ffmpeg.value
        print(
            "rtsp, stuck client: dropped after \(droppedAfter) (\(rig.server.clientsDropped) dropped); the other decoded \(decodedFrames(r.stderr) ?? -1) frames"
        )
        #expect(dropped, "the stuck client was not dropped in 60 s: \(rig.server.clientCount) clients")
        // Full within a second at 20 Mbit/s, then 3 looks a second apart; 10 s leaves a loaded
        // machine's loop its time.
        #expect(droppedAfter < .seconds(10), "dropped \(droppedAfter) after it played")
        #expect(closed, "the server did not close the stuck client's connection")
        #expect(r.status == 0, "ffmpeg exited \(r.status): \(r.stderr)")
        #expect(decodedFrames(r.stderr) == 300, "ffmpeg beside a stuck client: \(r.stderr)")
        #expect(!r.stderr.contains("missed"), "the other client lost packets: \(r.stderr)")
        #expect(rig.server.clientsDropped == 1, "a client that read was dropped too")
    }
}

extension RTSPServerTests {
    /// A request whose URL names a host the server does not answer to (a rebound DNS name) gets
    /// 403, as the HTTP server's `Host` rule has it (DESCRIBE, SETUP and PLAY: the requests that
    /// reach the camera); IP literals, localhost names and the names in `allowedHosts` are answered.
    @Test func aForeignHostNameIsRefusedAsOnHTTP() throws {
        let camera = try InstalledCamera("RTSP hosts", modes: [InstalledCamera.smallMode])
        defer { camera.uninstall() }
        let session = CaptureSession()
        session.addInput(try camera.input())
        session.startRunning()
        defer { session.stopRunning() }
        let server = try RTSPServer(session: session, configuration: .init(port: 0, allowedHosts: ["camera.example"]))
        defer { server.stop() }
        func status(_ method: String, _ url: String, _ headers: [String] = []) throws -> Int {
            let client = try StalledRTSPClient(url: url, port: server.port)
            defer { client.close() }
            return try client.status(method, url, headers)
        }
        let sdp = ["Accept: application/sdp"], tcp = ["Transport: RTP/AVP/TCP;unicast;interleaved=0-1"]
        for host in ["rebound.test", "evil.localhost.example", "127.0.0.1.rebound.test"] {
            let url = "rtsp://\(host):\(server.port)/camera"
            #expect(try status("DESCRIBE", url, sdp) == 403, "DESCRIBE \(url)")
            #expect(try status("SETUP", url + "/stream=0", tcp) == 403, "SETUP \(url)")
            // A session set up under a good name cannot be played under a foreign one.
            let client = try StalledRTSPClient(url: "rtsp://127.0.0.1:\(server.port)/camera", port: server.port)
            defer { client.close() }
            let session = try client.setUp()
            #expect(try client.status("PLAY", url, ["Session: \(session)", "Range: npt=0-"]) == 403, "PLAY \(url)")
        }
        for host in ["127.0.0.1", "localhost", "LocalHost.", "camera.example", "[::1]", "cam.localhost"] {
            let url = "rtsp://\(host):\(server.port)/camera"
            #expect(try status("DESCRIBE", url, sdp) == 200, "DESCRIBE \(url)")
        }
        // (A URL the client names and the server answers for its own clients: ffprobe reads it.)
        let (probed, r) = try probe("rtsp://localhost:\(server.port)/camera", transport: "tcp")
        #expect(probed == "h264,320,240", "\(r.stderr)")
    }
}

/// An RTSP client on a raw socket: DESCRIBE, SETUP (interleaved TCP), PLAY, then it reads nothing
/// more. Its receive buffer is made small so that the server's side fills soon. Used by one
/// thread at a time (a test's, or the closure it waits with).
final class StalledRTSPClient: @unchecked Sendable {
    let fd: Int32
    let url: String
    private var cseq = 0

    init(url: String, port: Int) throws {
        self.url = url
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestFailure("socket: errno \(errno)") }
        var size: Int32 = 4096
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            Glibc.close(fd)
            throw TestFailure("connect to 127.0.0.1:\(port): errno \(errno)")
        }
    }

    /// Sends a request and reads its response's status code (and its whole response).
    func status(_ method: String, _ target: String, _ headers: [String] = []) throws -> Int {
        let response = try exchange(method, target, headers)
        return Int(response.split(separator: " ").dropFirst().first ?? "") ?? 0
    }

    /// Sends a request and reads its response's head and body (up to Content-Length): a 200.
    private func request(_ method: String, _ target: String, _ headers: [String] = []) throws -> String {
        let response = try exchange(method, target, headers)
        guard response.hasPrefix("RTSP/1.0 200") else { throw TestFailure("\(method): \(response)") }
        return response
    }

    private func exchange(_ method: String, _ target: String, _ headers: [String]) throws -> String {
        cseq += 1
        let text = (["\(method) \(target) RTSP/1.0", "CSeq: \(cseq)"] + headers).joined(separator: "\r\n") + "\r\n\r\n"
        let sent = text.utf8CString.withUnsafeBufferPointer { send(fd, $0.baseAddress, $0.count - 1, 0) }
        guard sent == text.utf8.count else { throw TestFailure("\(method): sent \(sent) bytes") }
        var response = [UInt8]()
        var byte: UInt8 = 0
        // The head, byte by byte (so nothing past the response is read).
        while !response.suffix(4).elementsEqual([13, 10, 13, 10]) {
            guard recv(fd, &byte, 1, 0) == 1 else { throw TestFailure("\(method): the server closed") }
            response.append(byte)
        }
        let head = String(decoding: response, as: UTF8.self)
        let length =
            head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
            .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
        var body = [UInt8](repeating: 0, count: length)
        var got = 0
        while got < length {
            let n = body.withUnsafeMutableBytes { recv(fd, $0.baseAddress! + got, length - got, 0) }
            guard n > 0 else { throw TestFailure("\(method): the server closed in the body") }
            got += n
        }
        return head + String(decoding: body, as: UTF8.self)
    }

    /// DESCRIBE, SETUP of the first stream over `transport` (interleaved TCP by default), PLAY.
    func play(transport: String = "RTP/AVP/TCP;unicast;interleaved=0-1") throws {
        let session = try setUp(transport: transport)
        // The PLAY response may come behind the first packets: it is not read.
        cseq += 1
        let text = "PLAY \(url) RTSP/1.0\r\nCSeq: \(cseq)\r\nSession: \(session)\r\nRange: npt=0-\r\n\r\n"
        _ = text.utf8CString.withUnsafeBufferPointer { send(fd, $0.baseAddress, $0.count - 1, 0) }
    }

    /// DESCRIBE and SETUP of the first stream over `transport`; the session's ID.
    func setUp(transport: String = "RTP/AVP/TCP;unicast;interleaved=0-1") throws -> String {
        let description = try request("DESCRIBE", url, ["Accept: application/sdp"])
        let control =
            description.split(separator: "\r\n").first { $0.hasPrefix("a=control:") && !$0.hasSuffix("*") }
            .map { String($0.dropFirst("a=control:".count)) } ?? "stream=0"
        let track = control.hasPrefix("rtsp://") ? control : url + "/" + control
        let setup = try request("SETUP", track, ["Transport: \(transport)"])
        let session =
            setup.split(separator: "\r\n").first { $0.lowercased().hasPrefix("session:") }
            .map { $0.dropFirst("session:".count).split(separator: ";")[0].trimmingCharacters(in: .whitespaces) } ?? ""
        return session
    }

    /// Whether the server closed the connection: everything it sent is read (and thrown away)
    /// and the socket then reads its end.
    var isClosedByServer: Bool {
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if n == 0 { return true }
            if n < 0 { return errno == ECONNRESET }
        }
    }

    func close() { Glibc.close(fd) }
}
