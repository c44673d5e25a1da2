import Capture
import CaptureCodecs
import CaptureServer
@testable import CaptureServerMP4
import CaptureTestSupport
import Foundation
import Testing

/// `/stream.mp4` from a virtual camera session, read by real readers (ffprobe, ffmpeg) and raw
/// clients box by box: H.264 at the camera's size, every frame decodable, a key frame first for
/// every client, one encode per frame for all clients, and a stalled client slowing nobody.
@Suite struct FragmentedMP4Tests {
    /// A camera served with `/stream.mp4` (30 fps; `settings` for the H.264 stage).
    static func served(
        width: Int = 320, height: Int = 240, settings: H264Settings = H264Settings(),
        configure: (inout CaptureStreamServer.Configuration) -> Void = { _ in }
    ) throws -> ServedCamera {
        try ServedCamera(width: width, height: height, fps: 30, configure: configure) { try $0.addFragmentedMP4Stream(settings: settings) }
    }

    @Test func ffprobeReadsH264AtTheCameraSizeAndEveryFrameDecodes() throws {
        let served = try Self.served()
        defer { served.close() }
        let reader = try MP4Reader(port: served.port)
        #expect(reader.status == 200 && reader.headers["content-type"] == "video/mp4")
        let fragments = try reader.fragments(30)
        #expect(fragments.first?.isKey == true)
        #expect(fragments.first?.decodeTime == 0)
        // Decode times grow, by about a frame each (skips would jump).
        for (a, b) in zip(fragments, fragments.dropFirst()) { #expect(b.decodeTime > a.decodeTime) }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("stream-\(UUID().uuidString).mp4")
        defer { try? FileManager.default.removeItem(at: file) }
        try Data(reader.received).write(to: file)
        let probe = try runProcess(
            "/usr/bin/ffprobe",
            [
                "-v", "error", "-count_frames", "-select_streams", "v", "-show_entries", "stream=codec_name,width,height,nb_read_frames",
                "-of", "csv=p=0", file.path,
            ])
        #expect(probe.status == 0, "\(probe.stderr)")
        let fields = String(decoding: probe.stdout, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ",")
        #expect(fields.count == 4 && fields[0] == "h264" && fields[1] == "320" && fields[2] == "240", "\(fields)")
        #expect(fields.last.flatMap { Int($0) } == fragments.count, "ffprobe read \(fields), the stream had \(fragments.count) fragments")
        // (Frames keep their own times: under load two frames a millisecond apart would share
        // a tick of ffmpeg's default 1/fps time base and be reported as out of order.)
        let decode = try runProcess(
            "/usr/bin/ffmpeg", ["-v", "error", "-i", file.path, "-fps_mode:v", "passthrough", "-enc_time_base:v", "-1", "-f", "null", "-"])
        #expect(decode.status == 0 && decode.stderr.isEmpty, "\(decode.stderr)")
    }

    /// A second client that joins a running stream starts at a key frame of its own: the stage's
    /// next regular one is 10 s away here, so only the key frame asked for on joining comes soon.
    @Test func aLateJoinerStartsAtAKeyFrameAskedForWhenItJoins() throws {
        let served = try Self.served(settings: H264Settings(keyFrameInterval: 300))
        defer { served.close() }
        let first = try MP4Reader(port: served.port)
        _ = try first.fragments(15)
        let joined = Date()
        let late = try MP4Reader(port: served.port)
        let start = try late.fragments(1)
        let wait = Date().timeIntervalSince(joined)
        print("late joiner: first fragment after \(Int(wait * 1000)) ms")
        #expect(start.first?.isKey == true)
        #expect(start.first?.decodeTime == 0)
        #expect(wait < 5, "the first fragment came after \(wait) s: the key frame asked for did not come")
        // The first client goes on undisturbed.
        #expect(try first.fragments(5).count == 5)
    }

    /// Two clients at once both get every frame, from one encode per frame.
    @Test func twoClientsShareOneEncodePerFrame() throws {
        let served = try Self.served()
        defer { served.close() }
        let readers = try (0..<2).map { _ in try MP4Reader(port: served.port) }
        for r in readers { #expect(try r.fragments(30).count == 30) }
        // Read between two counts of what was published, since the camera goes on meanwhile:
        // each fragment published was encoded once, and frames encoded but not yet published
        // (in the stage) are few.
        let before = try Self.mp4State(served)["fragments"] as? Int ?? -1
        let encodes = served.session.stageEncodes
        let state = try Self.mp4State(served)
        let published = state["fragments"] as? Int ?? -1
        #expect(before >= 30)
        #expect(encodes >= before && encodes <= published + 3, "\(encodes) encodes for \(before)...\(published) fragments")
        #expect(state["clients"] as? Int == 2)
    }

    /// A client that stops reading does not slow another: the reader gets every frame.
    /// (That such a client is timed out is the route seam's, `RouteSeamTests`: the virtual
    /// camera's H.264 is too small to fill a socket's buffers in a test's time.)
    @Test func aClientThatStopsReadingSlowsNobody() throws {
        let served = try Self.served()
        defer { served.close() }
        let stalled = try RawClient(port: served.port, receiveBuffer: 4096)
        stalled.send("GET /stream.mp4 HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        #expect(waitUntil { (try? Self.mp4State(served)["clients"] as? Int) == 1 })
        let reader = try MP4Reader(port: served.port)
        let fragments = try reader.fragments(45)
        #expect(fragments.count == 45)
        let skipped = try Self.mp4Clients(served).map { $0["skipped"] as? Int ?? -1 }
        #expect(skipped.count == 2 && skipped.allSatisfy { $0 == 0 }, "skipped per client: \(skipped)")
        _ = stalled
    }

    /// Clients that stop reading cannot keep the route's places: each is ended once its socket
    /// holds more than 3 s of its stream it has not taken and 16 KiB, so a new client gets in
    /// within seconds of that, long before the connection time-out (5 minutes here). Before, 20
    /// such clients kept every other at 503 for as long as they stayed. How soon a stalled
    /// client holds 16 KiB depends on the camera's frame rate, which load lowers: the bound runs
    /// from that moment (a key frame every 5 frames makes it come within a few seconds at 30 fps).
    @Test func clientsThatStopReadingAreEndedAndFreeTheirPlaces() throws {
        let served = try Self.served(width: 640, height: 360, settings: H264Settings(keyFrameInterval: 5)) {
            $0.maxClients = 4
            $0.connectionTimeout = 300
        }
        defer { served.close() }
        let stalled = try (0..<4).map { _ in try RawClient(port: served.port, receiveBuffer: 1024) }
        for c in stalled { c.send("GET /stream.mp4 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") }
        #expect(waitUntil { (try? Self.mp4State(served)["clients"] as? Int) == 4 })
        #expect(try curl(served.base + "/stream.mp4", ["--max-time", "1"]).status == 503, "the route is full")
        // The moment every stalled client has been sent more than the floor (and what its own
        // 1 KB buffer took), or has been ended already.
        let floor = 16 * 1024 + 4096
        let started = Date()
        let overFloor = waitUntil(timeout: 120) {
            guard let clients = try? Self.mp4Clients(served) else { return false }
            return clients.allSatisfy { ($0["bytes"] as? Int ?? 0) > floor }
        }
        let filled = Date().timeIntervalSince(started)
        #expect(overFloor, "the stalled clients were not sent 20 KiB in 120 s")
        let since = Date()
        var admitted = false
        while !admitted, Date().timeIntervalSince(since) < 20 {
            admitted = try curl(served.base + "/stream.mp4", ["--max-time", "1"]).status == 200
        }
        let took = Date().timeIntervalSince(since)
        #expect(admitted && took < 10, "a new client got in \(took) s after the stalled ones held 20 KiB")
        let dropped = try Self.mp4State(served)["clients_dropped"] as? Int
        #expect(dropped == 4, "\(dropped ?? -1) stalled clients ended")
        print("mp4: stalled clients held 20 KiB after \(filled) s; 4 ended, a new one in \(took) s later")
        _ = stalled
    }

    /// The route goes with the server: stop ends its streams, a new start serves it again, and
    /// once nobody watches the encoder stops.
    @Test func theStreamStopsAndStartsWithTheServerAndTheEncoderIdlesWithoutClients() throws {
        let served = try Self.served()
        defer { served.close() }
        let head = try curl(served.base + "/stream.mp4", ["-I"])
        #expect(head.status == 200 && head.headers.contains("Content-Type: video/mp4"), "\(head.headers)")
        let post = try curl(served.base + "/stream.mp4", apiPost)
        #expect(post.status == 405)
        let reader = try MP4Reader(port: served.port)
        #expect(try reader.fragments(3).count == 3)
        served.server.stop()
        #expect(reader.client.readUntilClosed().closed)
        try served.server.start()
        let again = try MP4Reader(port: served.port)
        let fragments = try again.fragments(3)
        #expect(fragments.first?.isKey == true && fragments.count == 3)
        #expect(try Self.mp4State(served)["encoding"] as? Bool == true)
        again.client.shutdown()
        #expect(waitUntil(timeout: 15) { (try? Self.mp4State(served)["encoding"] as? Bool) == false })
        #expect(served.server.openConnections <= 1)
    }

    /// NAL units split at 3- and 4-byte start codes; SPS and PPS found; the codec named from the SPS.
    @Test func annexBIsSplitAndTheParameterSetsAreFound() {
        let sps: [UInt8] = [0x67, 0x64, 0x00, 0x1F, 0xAC, 0xD9]
        let pps: [UInt8] = [0x68, 0xEB, 0xE3, 0xCB]
        let stream: [UInt8] = [0, 0, 0, 1] + sps + [0, 0, 1] + pps + [0, 0, 0, 1, 0x65, 0x88, 0x00, 0x10]
        var nals: [[UInt8]] = []
        stream.withUnsafeBytes { MP4Boxes.forEachNAL($0) { nals.append(Array($0)) } }
        #expect(nals == [sps, pps, [0x65, 0x88, 0x00, 0x10]])
        let sets = MP4Boxes.parameterSets(stream)
        #expect(sets?.sps == sps && sets?.pps == pps)
        #expect(MP4Boxes.codec(sps: sps) == "avc1.64001F")
        #expect(MP4Boxes.parameterSets([0, 0, 1] + pps) == nil)
        let segment = MP4Boxes.initSegment(sps: sps, pps: pps, width: 320, height: 240)
        // ftyp then moov, whose sizes add up to the whole.
        let ftyp = Int(segment[0...3].reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
        let moov = Int(segment[ftyp..<ftyp + 4].reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
        #expect(String(decoding: segment[4..<8], as: UTF8.self) == "ftyp")
        #expect(String(decoding: segment[ftyp + 4..<ftyp + 8], as: UTF8.self) == "moov")
        #expect(ftyp + moov == segment.count)
    }

    static func mp4State(_ served: ServedCamera) throws -> [String: Any] {
        let r = try curl(served.base + "/state")
        let json = try JSONSerialization.jsonObject(with: r.body) as? [String: Any]
        let result = json?["result"] as? [String: Any]
        return try #require((result?["routes"] as? [String: Any])?["mp4"] as? [String: Any])
    }

    static func mp4Clients(_ served: ServedCamera) throws -> [[String: Any]] {
        ((try mp4State(served)["clients_stat"] as? [String: Any]) ?? [:]).values.compactMap { $0 as? [String: Any] }
    }
}

/// Reads `/stream.mp4` over HTTP/1.0 box by box, keeping every byte after the headers.
final class MP4Reader: @unchecked Sendable {
    struct Fragment {
        var sequence: UInt32
        var decodeTime: UInt64
        var isKey: Bool
        var size: Int
        /// 1: video, 2: audio.
        var track: UInt32
        /// The sample's duration (in its track's timescale).
        var duration: UInt32
    }

    let client: RawClient
    let status: Int
    let headers: [String: String]
    private(set) var received: [UInt8] = []
    private(set) var sawInit = false
    /// Every fragment read, in order.
    private(set) var history: [Fragment] = []

    init(port: Int) throws {
        client = try RawClient(port: port)
        client.send("GET /stream.mp4 HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        guard let head = client.responseHead() else { throw TestFailure("no response head for /stream.mp4") }
        status = head.status
        headers = head.headers
    }

    /// The next box: its type and bytes.
    func box() throws -> (type: String, bytes: [UInt8]) {
        guard let header = client.bytes(8) else { throw TestFailure("the stream ended") }
        let size = Int(header[0...3].reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
        guard size >= 8, size < 16_000_000 else { throw TestFailure("a box of \(size) bytes") }
        guard let rest = client.bytes(size - 8) else { throw TestFailure("the stream ended in a box") }
        received += header + rest
        return (String(decoding: header[4...7], as: UTF8.self), header + rest)
    }

    /// The next `count` fragments (moof + mdat) of `track` (nil: of any), after the init segment
    /// if it is still to come (every fragment read goes to `history`).
    func fragments(_ count: Int, track: UInt32? = nil) throws -> [Fragment] {
        var out: [Fragment] = []
        while out.count < count {
            let b = try box()
            switch b.type {
            case "ftyp": continue
            case "moov": sawInit = true
            case "moof":
                guard sawInit, b.bytes.count == 100 else { throw TestFailure("a moof of \(b.bytes.count) bytes before the init segment") }
                let mdat = try box()
                guard mdat.type == "mdat" else { throw TestFailure("\(mdat.type) after a moof") }
                let u32 = { (at: Int) in b.bytes[at..<at + 4].reduce(UInt32(0)) { $0 << 8 | UInt32($1) } }
                let f =
                    Fragment(
                        sequence: u32(20), decodeTime: UInt64(u32(60)) << 32 | UInt64(u32(64)), isKey: u32(96) == 0x0200_0000,
                        size: mdat.bytes.count - 8, track: u32(44), duration: u32(88))
                history.append(f)
                if track == nil || f.track == track { out.append(f) }
            default: throw TestFailure("an unexpected box \(b.type)")
            }
        }
        return out
    }
}
