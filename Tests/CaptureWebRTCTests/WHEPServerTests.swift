import Capture
import CaptureServer
import CaptureTestSupport
import CaptureWebRTC
import Foundation
import Testing

/// WHEP on the camera server's port: Chromium's offer POSTed to /whep, the 201's answer and
/// Location, the viewer's DELETE; bad requests refused with their status, the server serving on.
extension WebRTCSuites {
    @Suite struct WHEPServerTests {
        /// A server on a free port with the publisher of a rig's session behind /whep.
        struct Served: @unchecked Sendable {
            let rig: WebRTCRig
            let publisher: WebRTCPublisher
            let server: CaptureStreamServer
            var base: String { "http://127.0.0.1:\(server.port)" }

            init(_ name: String, credentials: CaptureStreamServer.Credentials? = nil, publishing: WebRTCPublisher.Configuration = .init())
                throws
            {
                rig = try WebRTCRig(name, tone: 1000)
                publisher = try WebRTCPublisher(session: rig.session, configuration: publishing)
                server = try CaptureStreamServer(
                    session: rig.session, configuration: .init(port: 0, credentials: credentials, connectionTimeout: 5))
                try server.serveWebRTC(publisher)
                try server.start()
            }

            func stop() {
                server.stop()
                rig.stop()
            }
        }

        /// curl with `body` (if any) from a file: (status, body, headers).
        static func request(_ url: String, _ args: [String], body: Data? = nil) throws -> (status: Int, body: String, headers: String) {
            let dir = FileManager.default.temporaryDirectory
            let headerFile = dir.appendingPathComponent("whep-h-\(UUID().uuidString)")
            let bodyFile = dir.appendingPathComponent("whep-b-\(UUID().uuidString)")
            defer {
                try? FileManager.default.removeItem(at: headerFile)
                try? FileManager.default.removeItem(at: bodyFile)
            }
            var extra = args
            if let body {
                try body.write(to: bodyFile)
                extra += ["--data-binary", "@" + bodyFile.path]
            }
            let r = try runProcess("/usr/bin/curl", ["-s", "-S", "--max-time", "30", "-D", headerFile.path, "-o", "-"] + extra + [url])
            let headers = (try? String(contentsOf: headerFile, encoding: .utf8)) ?? ""
            let statusLine = headers.split(separator: "\r\n").last { $0.hasPrefix("HTTP/") } ?? ""
            let status = statusLine.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? -1
            return (status, r.text, headers)
        }

        static func post(_ s: Served, _ offer: String, type: String = "application/sdp", extra: [String] = []) throws -> (
            status: Int, body: String, headers: String
        ) {
            try request(s.base + "/whep", ["-X", "POST", "-H", "Content-Type: \(type)"] + extra, body: Data(offer.utf8))
        }

        static func location(_ headers: String) -> String? {
            headers.split(separator: "\r\n").first { $0.lowercased().hasPrefix("location:") }
                .map { $0.dropFirst("location:".count).trimmingCharacters(in: .whitespaces) }
        }

        /// A browser through the server: 201 with the answer and a Location, connected and decoding
        /// H.264 at >= 27 fps of the camera's 30 (`viewerFloor`), listed in /state; its DELETE ends it (a second one is 404).
        @Test func aBrowserWatchesThroughWHEPAndItsDeleteEndsIt() async throws {
            let s = try Served("whep browser")
            defer { s.stop() }
            let peer = try BrowserPeer(viewers: 1, window: 3)
            let offer = try #require(try await peer.offers().first)
            let r = try Self.post(s, offer)
            #expect(r.status == 201, "\(r.status): \(r.body)")
            #expect(r.headers.lowercased().contains("content-type: application/sdp"))
            let location = try #require(Self.location(r.headers), "no Location in \(r.headers)")
            #expect(location.hasPrefix("/whep/") && location.count > "/whep/".count + 16, "\(location)")
            #expect(r.body.contains("H264/90000"))
            try peer.send(answers: [r.body], measure: false)
            // Connected and sent frames first; then the page measures, held to the rate sent meanwhile
            // (what the camera and the shared encoder gave on a machine whose load may slow both).
            _ = await eventually(timeout: 10) { s.publisher.viewers.allSatisfy { $0.framesSent >= 10 } }
            let sent0 = s.publisher.viewers.first?.framesSent ?? 0, made0 = s.rig.camera.camera.framesProduced, t0 = Date()
            try peer.send(measure: true)
            let v = try #require(try await peer.report().first)
            let sent = Double((s.publisher.viewers.first?.framesSent ?? 0) - sent0) / Date().timeIntervalSince(t0)
            let camera = Double(s.rig.camera.camera.framesProduced - made0) / Date().timeIntervalSince(t0)
            let floor = viewerFloor(camera: camera)
            let connect = try #require(v["connectMs"] as? Double)
            #expect(connect < 3000, "connected after \(connect) ms")
            #expect((v["codec"] as? String)?.lowercased() == "video/h264")
            #expect(
                (v["fps"] as? Double ?? 0) >= floor, "decoded \(v["fps"] ?? "nothing") fps; the camera made \(camera), sent \(sent)")
            #expect(wrongBars(v).isEmpty, "bars: \(wrongBars(v))")
            let state = try Self.request(s.base + "/state", [])
            #expect(state.body.contains("\"whep\""), "\(state.body.prefix(400))")
            #expect(s.publisher.viewerCount == 1)
            #expect(try Self.request(s.base + location, ["-X", "DELETE"]).status == 200)
            #expect(s.publisher.viewerCount == 0)
            #expect(try Self.request(s.base + location, ["-X", "DELETE"]).status == 404)
        }

        /// A browser that asks for audio from a server without a microphone (the web app always
        /// does): the answer's audio never sends, and the viewer gets the video all the same.
        @Test func aViewerAskingForAudioGetsVideoFromAServerWithoutAMicrophone() async throws {
            let rig = try WebRTCRig("whep no mic", audio: false)
            defer { rig.stop() }
            let publisher = try WebRTCPublisher(session: rig.session, configuration: .loopback)
            defer { publisher.stop() }
            #expect(!publisher.sendsAudio)
            let peer = try BrowserPeer(viewers: 1, window: 2, audio: true)
            let (_, answer) = try await publisher.answer(offer: try #require(try await peer.offers().first))
            #expect(answer.contains("m=audio"), "\(answer)")
            try peer.send(answers: [answer], measure: false)
            let sending = await eventually(timeout: 10) { (publisher.viewers.first?.framesSent ?? 0) >= 10 }
            #expect(sending, "\(publisher.viewers)")
            try peer.send(measure: true)
            let v = try #require(try await peer.report().first)
            #expect((v["framesDecoded"] as? Double ?? 0) > 0 || (v["framesDecoded"] as? Int ?? 0) > 0, "\(v.filter { $0.key != "bars" })")
        }

        /// Garbage, a 1 MB body, an offer without video, another content type, trickle ICE and an
        /// unknown viewer get 4xx, the server going on; with credentials, a DELETE without them is
        /// refused and the viewer stays. Joins and leaves give back every descriptor and thread.
        @Test func badRequestsAreRefusedAndViewersComeAndGoWithoutLeaks() async throws {
            let s = try Served("whep bad", credentials: .init(user: "u", password: "p"))
            defer { s.stop() }
            let auth = ["-u", "u:p"]
            let offer = syntheticOffer()
            #expect(try Self.post(s, "hello, not SDP", extra: auth).status == 400)
            #expect(try Self.post(s, String(repeating: "v=0\r\n", count: 200_000), extra: auth).status == 413)
            // The offer without its video section (audio only).
            let sections = offer.components(separatedBy: "\r\nm=")
            let audioOnly = sections.enumerated().filter { !$0.element.hasPrefix("video") }.map(\.element).joined(separator: "\r\nm=")
            #expect(audioOnly.contains("m=audio") && !audioOnly.contains("m=video"))
            let novideo = try Self.post(s, audioOnly, extra: auth)
            #expect(novideo.status == 400, "\(novideo.status): \(novideo.body)")
            #expect(try Self.post(s, offer, type: "text/plain", extra: auth + ["-H", "X-Requested-With: x"]).status == 415)
            #expect(try Self.request(s.base + "/whep/nobody", ["-X", "DELETE"] + auth).status == 404)
            #expect(try Self.request(s.base + "/whep/nobody", ["-X", "PATCH"] + auth).status == 405)
            #expect(try Self.post(s, offer).status == 401, "no credentials")
            // A viewer, and a DELETE of it without the credentials.
            let made = try Self.post(s, offer, extra: auth)
            #expect(made.status == 201)
            let location = try #require(Self.location(made.headers))
            #expect(try Self.request(s.base + location, ["-X", "DELETE"]).status == 401)
            #expect(s.publisher.viewerCount == 1)
            #expect(try Self.request(s.base + location, ["-X", "DELETE"] + auth).status == 200)
            // Joins and leaves through HTTP: back to where they began (one round first, for what
            // stays made; the publisher's own cycles are WebRTCPublisherTests').
            let warm = try Self.post(s, offer, extra: auth)
            _ = try Self.request(s.base + (Self.location(warm.headers) ?? "/whep/x"), ["-X", "DELETE"] + auth)
            try await Task.sleep(for: .milliseconds(500))
            let before = Resources.now
            for _ in 0..<10 {
                let r = try Self.post(s, offer, extra: auth)
                #expect(r.status == 201)
                #expect(try Self.request(s.base + (Self.location(r.headers) ?? "/whep/x"), ["-X", "DELETE"] + auth).status == 200)
            }
            let back = await eventually(timeout: 10) {
                let now = Resources.now
                return now.udpSockets <= before.udpSockets && now.gstreamerThreads <= before.gstreamerThreads + Resources.idlePoolThreads
            }
            #expect(back, "before: \(before); after 10 cycles: \(Resources.now)")
            #expect(try Self.request(s.base + "/state", auth).status == 200, "the server goes on")
        }
    }
}
