import Capture
import CaptureServer
import CaptureTestSupport
import CaptureVision
import CaptureVisionServer
import Foundation
import Testing

/// `/metadata` (CaptureVisionServer) on a virtual camera that shows a QR code made by `qrencode`:
/// the events carry the code where it was drawn, the server's host, credential and client rules
/// hold, a quiet stream gets keep-alive comments, and a client that stops reading slows nobody.
@Suite struct MetadataEventsTests {
    /// A 640x480 camera served with a metadata output looking for QR codes.
    static func served(configure: (inout CaptureStreamServer.Configuration) -> Void = { _ in }) throws -> ServedCamera {
        try ServedCamera(width: 640, height: 480, fps: 30, configure: configure) { server in
            let output = CaptureMetadataOutput()
            server.session.addOutput(output)
            try output.setMetadataObjectTypes([.qr])
            try server.serveMetadata(output)
        }
    }

    @Test func eventsCarryTheCodeWhereItIsAndSayWhenItGoes() throws {
        let served = try Self.served()
        defer { served.close() }
        let text = "metaweb \"quoted\" \\ é\nline two"
        // 8-pixel modules from (96, 64): the code's bounds are known to the pixel.
        let (picture, modules) = try qrCodePicture(text, module: 8, at: (96, 64))
        served.camera.picture = picture
        let events = try EventReader(port: served.port)
        #expect(events.status == 200)
        #expect(events.headers["content-type"] == "text/event-stream")
        let event = try #require(events.next { !$0.objects.isEmpty }, "no event with an object")
        let o = try #require(event.objects.first)
        #expect(o["type"] as? String == "qr")
        #expect(o["text"] as? String == text)
        let side = Double(modules * 8)
        let expected: [Double] = [96.0 / 640, 64.0 / 480, side / 640, side / 480]
        let bounds = o["bounds"] as? [Double] ?? []
        #expect(bounds.count == 4 && zip(bounds, expected).allSatisfy { abs($0 - $1) < 0.02 }, "bounds \(bounds), drawn at \(expected)")
        let corners = o["corners"] as? [[Double]] ?? []
        #expect(corners.count == 4, "\(corners)")
        // The frame's sequence number and capture time, on the event and on the object.
        let sequence = try #require(event.json["sequence"] as? Int)
        let time = try #require(event.json["time"] as? Double)
        #expect(o["sequence"] as? Int == sequence)
        #expect(o["time"] as? Double == time && time > 0)
        // The code goes: an event with no objects says so.
        served.camera.picture = nil
        #expect(events.next { $0.objects.isEmpty } != nil, "no empty event after the code went")
    }

    @Test func theServersHostCredentialAndClientRulesHold() throws {
        let served = try Self.served {
            $0.credentials = .init(user: "u", password: "p")
            $0.allowedOrigin = "http://app.test"
            $0.maxClients = 1
        }
        defer { served.close() }
        let auth = "Authorization: Basic \(Data("u:p".utf8).base64EncodedString())\r\n"
        #expect(try EventReader(port: served.port).status == 401)
        #expect(try EventReader(port: served.port, extraHeaders: auth, host: "rebound.test").status == 403)
        let post = try RawClient(port: served.port)
        post.send("POST /metadata HTTP/1.0\r\nHost: 127.0.0.1\r\n\(auth)X-Requested-With: t\r\nContent-Length: 0\r\n\r\n")
        #expect(post.responseHead()?.status == 405)
        let first = try EventReader(port: served.port, extraHeaders: auth + "Origin: http://app.test\r\n")
        #expect(first.status == 200)
        #expect(first.headers["access-control-allow-origin"] == "http://app.test")
        // The client limit (1) holds for event streams too.
        let second = try EventReader(port: served.port, extraHeaders: auth)
        #expect(second.status == 503)
        let state = try curl("\(served.base)/state", ["-u", "u:p"])
        let routes = try JSONSerialization.jsonObject(with: state.body) as? [String: Any]
        let metadata = ((routes?["result"] as? [String: Any])?["routes"] as? [String: Any])?["metadata"] as? [String: Any]
        #expect(metadata?["clients"] as? Int == 1 && metadata?["clients_refused"] as? Int == 1, "\(metadata ?? [:])")
        #expect(metadata?["types"] as? [String] == ["qr"])
    }

    /// With nothing found, the stream stays open past the server's connection time-out (3 s
    /// here), kept alive by comments.
    @Test func aQuietStreamGetsKeepAliveCommentsAndStaysOpen() throws {
        let served = try Self.served()
        defer { served.close() }
        let events = try EventReader(port: served.port)
        let start = Date()
        _ = events.next(timeout: 20, keepAlives: 3) { _ in false }
        #expect(events.keepAlives >= 3, "\(events.keepAlives) keep-alive comments in \(Date().timeIntervalSince(start)) s")
        #expect(events.received.isEmpty, "events came with no code in view")
        #expect(!events.client.isClosedByPeer)
    }

    /// A client that stops reading holds up neither detection nor another client, and is
    /// dropped once its socket holds 64 KiB it has not taken (the kernel would take megabytes
    /// before the server's time-out could see it stall); the reader gets events in order all
    /// along, and detection runs at no less than half its rate of the seconds before the stall.
    /// Detection runs at nice 10, so other work on the machine moves its rate from one second to
    /// the next: the two rates are measured again, with a new stalled client, up to three rounds;
    /// a detector the stalled client held up would be slow in every round.
    @Test func aClientThatStopsReadingIsDroppedAndSlowsNobody() throws {
        let served = try Self.served()
        defer { served.close() }
        // A long text: events of about 700 bytes, so the stalled client passes the limit in seconds.
        served.camera.picture = try qrCodePicture(String(repeating: "slow client ", count: 30), module: 4, at: (100, 40)).picture
        func metadataState() throws -> [String: Any] {
            let state = try JSONSerialization.jsonObject(with: try curl("\(served.base)/state").body) as? [String: Any]
            let routes = (state?["result"] as? [String: Any])?["routes"] as? [String: Any]
            return routes?["metadata"] as? [String: Any] ?? [:]
        }
        func detected(_ state: [String: Any]) -> Int { state["frames_detected"] as? Int ?? 0 }
        let reader = try EventReader(port: served.port)
        let first = try #require(reader.next { !$0.objects.isEmpty })
        var ids = [first.id]
        var rates: [(alone: Double, stalled: Double)] = []
        for round in 1...3 {
            // Detection's rate with the reader alone, over 3 s of events and at least 10 frames
            // (on a loaded machine it may take longer to see them).
            let alone = (state: try metadataState(), at: Date())
            var aloneEvents = 0
            while Date().timeIntervalSince(alone.at) < 30, Date().timeIntervalSince(alone.at) < 3 || aloneEvents < 10,
                let e = reader.next(where: { !$0.objects.isEmpty })
            {
                ids.append(e.id)
                aloneEvents += 1
            }
            let aloneDetected = detected(try metadataState()) - detected(alone.state)
            let aloneRate = Double(aloneDetected) / Date().timeIntervalSince(alone.at)
            #expect(aloneDetected >= 10, "detection saw \(aloneDetected) frames in 30 s with one reader")
            let stalled = try RawClient(port: served.port, receiveBuffer: 4096)
            stalled.send("GET /metadata HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            let before = (state: try metadataState(), at: Date())
            var asked = Date()
            var state = before.state
            // Until the stalled client is dropped and the reader has had 20 events since (or 60 s).
            var droppedAt: Int?
            let eventsBefore = ids.count
            while let e = reader.next(where: { !$0.objects.isEmpty }) {
                ids.append(e.id)
                if droppedAt == nil, Date().timeIntervalSince(asked) > 0.5 {
                    asked = Date()
                    state = try metadataState()
                    if state["clients_dropped"] as? Int == round { droppedAt = ids.count }
                }
                if let droppedAt, ids.count >= droppedAt + 20 { break }
                if ids.count - eventsBefore > 60 * 30 { break }
            }
            state = try metadataState()
            #expect(droppedAt != nil, "round \(round): the stalled client was not dropped: \(state)")
            #expect(state["clients"] as? Int == 1, "round \(round): \(state)")
            let stalledRate = Double(detected(state) - detected(before.state)) / Date().timeIntervalSince(before.at)
            rates.append((aloneRate, stalledRate))
            let after = droppedAt.map { $0 - eventsBefore } ?? -1
            print(
                "metadata round \(round): the stalled client was dropped after \(after) events of the reader's; detection \(stalledRate) frames/s with it, \(aloneRate) before"
            )
            withExtendedLifetime(stalled) {}
            if droppedAt == nil || stalledRate >= aloneRate / 2 { break }
        }
        // In order (a reader more than 8 events behind would skip to the newest: not this one,
        // unless the machine starves the server's thread).
        #expect(zip(ids, ids.dropFirst()).allSatisfy { $0 < $1 }, "\(ids)")
        #expect(
            rates.contains { $0.stalled >= $0.alone / 2 },
            "detection ran at less than half its rate with a stalled client in every round (frames/s with, without): \(rates)")
    }
}

/// A `/metadata` stream read over HTTP/1.0 (no chunking), event by event.
final class EventReader: @unchecked Sendable {
    struct Event {
        var id: UInt64
        var json: [String: Any]
        var objects: [[String: Any]] { json["objects"] as? [[String: Any]] ?? [] }
    }

    let client: RawClient
    let status: Int
    let headers: [String: String]
    private(set) var keepAlives = 0
    private(set) var received: [Event] = []

    init(port: Int, extraHeaders: String = "", host: String = "127.0.0.1") throws {
        client = try RawClient(port: port, readTimeout: 10)
        client.send("GET /metadata HTTP/1.0\r\nHost: \(host)\r\n\(extraHeaders)\r\n")
        guard let head = client.responseHead() else { throw TestFailure("no response head for /metadata") }
        status = head.status
        headers = head.headers
    }

    /// The next event that satisfies `test` (others are kept in `received`), or nil at the end of
    /// the stream, after `timeout` seconds or once `keepAlives` keep-alive comments came.
    func next(timeout: Double = 20, keepAlives: Int = .max, where test: (Event) -> Bool) -> Event? {
        let deadline = Date().addingTimeInterval(timeout)
        var id: UInt64?
        var data: String?
        while Date() < deadline, self.keepAlives < keepAlives, let line = client.line() {
            if line == ": keep-alive" { self.keepAlives += 1 }
            if line.hasPrefix("id: ") { id = UInt64(line.dropFirst(4)) }
            if line.hasPrefix("data: ") { data = String(line.dropFirst(6)) }
            guard line.isEmpty, let i = id, let d = data else { continue }
            id = nil
            data = nil
            guard let json = try? JSONSerialization.jsonObject(with: Data(d.utf8)) as? [String: Any] else { continue }
            let e = Event(id: i, json: json)
            received.append(e)
            if test(e) { return e }
        }
        return nil
    }
}

/// A 640x480 grey picture with a QR code of `text` made by `qrencode`, `module` pixels a module
/// from `at` (its top-left corner, without its quiet zone, which is drawn white around it); and
/// how many modules a side it has.
func qrCodePicture(_ text: String, module: Int, at: (x: Int, y: Int)) throws -> (picture: VirtualCamera.Picture, modules: Int) {
    let r = try runProcess("/usr/bin/qrencode", ["-t", "ASCII", "-m", "0", "-o", "-", text])
    // Two characters a module, '#' dark.
    let rows = String(decoding: r.stdout, as: UTF8.self).split(separator: "\n").map { line in
        stride(from: 0, to: line.count, by: 2).map { Array(line)[$0] == "#" }
    }
    let n = rows.count
    guard n >= 21, rows.allSatisfy({ $0.count == n }) else { throw TestFailure("qrencode made no code of '\(text)': \(r.stderr)") }
    var grey = [UInt8](repeating: 128, count: 640 * 480)
    for y in (at.y - 4 * module)..<(at.y + (n + 4) * module) where (0..<480).contains(y) {
        for x in (at.x - 4 * module)..<(at.x + (n + 4) * module) where (0..<640).contains(x) {
            let u = (x - at.x).quotient(module), v = (y - at.y).quotient(module)
            grey[y * 640 + x] = (0..<n).contains(u) && (0..<n).contains(v) && rows[v][u] ? 0 : 255
        }
    }
    return (try VirtualCamera.Picture(grey: grey, width: 640, height: 480), n)
}

extension Int {
    /// Division rounding down (for negative numbers too).
    fileprivate func quotient(_ d: Int) -> Int { self >= 0 ? self / d : -((-self + d - 1) / d) }
}
