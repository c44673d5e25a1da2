import Capture
import CaptureServer
import CaptureTestSupport
import CaptureWebRTC
import Foundation
import Testing

/// Viewers that go without a DELETE never keep their place: offers whose ICE never completes,
/// a browser that closes its peer connection, a browser killed. Each is ended within its bound
/// (12 s to connect, 5 s of silence, plus the watchdog's half-second tick) and the next viewer
/// gets in; what they took comes back. On the server's 127.0.0.1 ICE offers loopback only.
extension WebRTCSuites {
    @Suite struct WHEPLivenessTests {
        typealias Served = WHEPServerTests.Served

        /// Once a place is free: the next viewer (`offer`) gets in, its DELETE ends it, and the UDP
        /// sockets and GStreamer threads come back to `before`.
        static func nextViewerGetsInAndAllComesBack(_ s: Served, _ offer: String, to before: Resources, _ label: String) async throws {
            let next = try WHEPServerTests.post(s, offer)
            #expect(next.status == 201, "the next viewer: \(next.status) \(next.body)")
            _ = try WHEPServerTests.request(s.base + (WHEPServerTests.location(next.headers) ?? "/whep/x"), ["-X", "DELETE"])
            let back = await eventually(timeout: 10) { Resources.now.isBack(to: before) }
            print("\(label): before \(before), after \(Resources.now)")
            #expect(back, "before: \(before); after: \(Resources.now) (\(Resources.gstreamerThreadNames))")
        }

        /// Seconds until `condition`, polled every 100 ms, or nil after `timeout`.
        static func secondsUntil(timeout: Double, _ condition: () -> Bool) async throws -> Double? {
            let t0 = ContinuousClock.now
            while !condition() {
                let elapsed = ContinuousClock.now - t0
                if elapsed > .seconds(timeout) { return nil }
                try await Task.sleep(for: .milliseconds(100))
            }
            let d = ContinuousClock.now - t0
            return Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
        }

        /// Offers POSTed by a client that never does ICE (curl) fill a house of 3; a 4th gets 503.
        /// Within 15 s (the 12 s connect time-out, the tick, and slack a loaded machine cannot
        /// cross) every one is ended, a new viewer gets 201, and the UDP sockets and GStreamer
        /// threads they took are given back.
        @Test func offersThatNeverConnectAreEndedWithin15SecondsAndTheNextViewerGetsIn() async throws {
            let s = try Served("whep stuck", publishing: .init(maxViewers: 3))
            defer { s.stop() }
            let offer = syntheticOffer()
            // One viewer made and ended first: what GStreamer keeps after its first is the baseline.
            let warm = try WHEPServerTests.post(s, offer)
            #expect(warm.status == 201)
            _ = try WHEPServerTests.request(s.base + (WHEPServerTests.location(warm.headers) ?? "/whep/x"), ["-X", "DELETE"])
            try await Task.sleep(for: .milliseconds(500))
            let before = Resources.now
            for _ in 0..<3 {
                let r = try WHEPServerTests.post(s, offer)
                #expect(r.status == 201, "\(r.status) \(r.body)")
            }
            let full = try WHEPServerTests.post(s, offer)
            #expect(full.status == 503, "a 4th viewer in a house of 3: \(full.status)")
            let freed = try await Self.secondsUntil(timeout: 15) { s.publisher.viewerCount == 0 }
            print("whep: 3 viewers that never connected were ended after \(freed.map { String(format: "%.1f", $0) } ?? "more than 15") s")
            #expect(freed != nil, "after 15 s: \(s.publisher.viewers)")
            try await Self.nextViewerGetsInAndAllComesBack(s, offer, to: before, "whep stuck viewers")
        }

        /// A Chromium viewer (connected, decoding) that closes its RTCPeerConnection without a
        /// DELETE is ended within 10 s, and one whose browser is killed (SIGKILL, no close of any
        /// kind) likewise; each time the next viewer gets into the house of 1, and the UDP sockets
        /// and GStreamer threads come back.
        @Test func aBrowserThatClosesOrIsKilledWithoutDeleteIsEndedWithin10Seconds() async throws {
            let s = try Served("whep gone", publishing: .init(maxViewers: 1))
            defer { s.stop() }
            /// A viewer of `browser` through the server, connected on both sides.
            func join(_ browser: BrowserCycles) async throws {
                let r = try WHEPServerTests.post(s, try await browser.offer())
                #expect(r.status == 201, "\(r.status): \(r.body)")
                let (state, firstFrame) = try await browser.connect(answer: r.body)
                #expect(state == "connected" && firstFrame != nil, "the browser's connection: \(state), first frame \(firstFrame ?? -1) ms")
                let connected = await eventually(timeout: 5) { s.publisher.viewers.first?.state == .connected }
                #expect(connected, "the server's side: \(s.publisher.viewers)")
            }
            let browser = try BrowserCycles()
            // One viewer ended by DELETE first: GStreamer's shared threads and plugins are the baseline.
            try await join(browser)
            let first = try #require(s.publisher.viewers.first?.id)
            #expect(s.publisher.end(id: first))
            try await browser.close()
            _ = await eventually(timeout: 10) { !Resources.gstreamerThreadNames.contains { $0.hasPrefix("webrtcbin") } }
            let before = Resources.now

            try await join(browser)
            // A full house: nobody else gets in while it watches.
            #expect(try WHEPServerTests.post(s, syntheticOffer()).status == 503)
            try await browser.close()
            let closed = try await Self.secondsUntil(timeout: 10) { s.publisher.viewerCount == 0 }
            #expect(closed != nil, "10 s after the browser closed its connection: \(s.publisher.viewers)")

            try await join(browser)
            let killed = browser.kill()
            let afterKill = try await Self.secondsUntil(timeout: 10) { s.publisher.viewerCount == 0 }
            #expect(afterKill != nil, "10 s after the browser (\(killed) processes) was killed: \(s.publisher.viewers)")
            print(
                "whep: a closed peer connection ended after \(closed.map { String(format: "%.1f", $0) } ?? "> 10") s, a killed browser after \(afterKill.map { String(format: "%.1f", $0) } ?? "> 10") s"
            )
            try await Self.nextViewerGetsInAndAllComesBack(s, syntheticOffer(), to: before, "whep gone viewers")
        }

        /// A server on 127.0.0.1 (the default) answers with loopback candidates only: nothing of
        /// its media listens on the machine's other addresses (issue 39, item 16).
        @Test func aServerOnLoopbackOffersLoopbackCandidatesOnly() async throws {
            let s = try Served("whep loopback")
            defer { s.stop() }
            let r = try WHEPServerTests.post(s, syntheticOffer())
            #expect(r.status == 201, "\(r.status) \(r.body)")
            defer { _ = try? WHEPServerTests.request(s.base + (WHEPServerTests.location(r.headers) ?? "/whep/x"), ["-X", "DELETE"]) }
            // a=candidate:FOUNDATION COMPONENT TRANSPORT PRIORITY ADDRESS PORT typ TYPE ...
            let addresses = r.body.split(whereSeparator: \.isNewline).filter { $0.hasPrefix("a=candidate:") }
                .compactMap { $0.split(separator: " ").dropFirst(4).first.map(String.init) }
            #expect(!addresses.isEmpty, "no candidates in \(r.body)")
            #expect(addresses.allSatisfy { $0 == "127.0.0.1" }, "candidates on \(Set(addresses).sorted())")
        }
    }
}
