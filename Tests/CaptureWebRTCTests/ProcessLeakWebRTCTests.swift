import Capture
import CaptureTestSupport
import CaptureWebRTC
import Foundation
import Testing

/// The WebRTC suites whose checks count the process's descriptors and threads whole: run on
/// their own by scripts/test (`swift test --filter ProcessLeak --no-parallel`), after the others.
@Suite(.serialized) struct ProcessLeakWebRTCTests {
    typealias W = WebRTCSuites.WHEPServerTests

    /// 50 browser viewers that connect through WHEP (ICE and DTLS up, a frame decoded) and
    /// end with their DELETE give back every descriptor and thread they took (the process's, counted
    /// whole, and its UDP sockets and GStreamer threads by name for the message). Chromium's offers
    /// carry mDNS candidates, which GStreamer 1.22 would resolve in a way that keeps each ICE
    /// agent alive (see viewer.c). One browser page serves every cycle.
    @Test func fiftyConnectedViewersComeAndGoThroughWHEP() async throws {
        let s = try W.Served("whep cycles")
        defer { s.stop() }
        let browser = try BrowserCycles()
        var firstFrames: [Double] = []
        var offeredMDNS = false
        func cycle() async throws {
            let offer = try await browser.offer()
            offeredMDNS = offeredMDNS || offer.contains(".local ")
            let r = try W.post(s, offer)
            #expect(r.status == 201, "\(r.status): \(r.body)")
            let location = try #require(W.location(r.headers), "no Location in \(r.headers)")
            let (state, firstFrame) = try await browser.connect(answer: r.body)
            #expect(state == "connected" && firstFrame != nil, "the browser's connection: \(state), first frame \(firstFrame ?? -1) ms")
            if let firstFrame { firstFrames.append(firstFrame) }
            let connected = await eventually(timeout: 5) { s.publisher.viewers.first?.state == .connected }
            #expect(connected, "the server's side: \(s.publisher.viewers)")
            #expect(try W.request(s.base + location, ["-X", "DELETE"]).status == 200)
            try await browser.close()
        }
        // One cycle first: GStreamer loads its plugins and starts its shared threads once.
        try await cycle()
        // (Its webrtcbin's threads wind down: the baseline is taken once they did.)
        _ = await eventually(timeout: 10) { !Resources.gstreamerThreadNames.contains { $0.hasPrefix("webrtcbin") } }
        let before = Resources.now, whole = ProcessCounts.now, targets = ProcessResources.descriptorTargets
        let t0 = ContinuousClock.now
        for _ in 0..<50 { try await cycle() }
        let elapsed = ContinuousClock.now - t0
        let back = await eventually(timeout: 20) { Resources.now.isBack(to: before) && ProcessCounts.now.isBack(to: whole) }
        let p = percentiles(firstFrames)
        print(
            "whep 50 connected cycles in \(elapsed): before \(before), \(whole), after \(Resources.now), \(ProcessCounts.now); first frame p50 \(p?.p50 ?? -1) ms; opened since: \(ProcessResources.added(since: targets, now: ProcessResources.descriptorTargets))"
        )
        #expect(
            back,
            "before: \(before), \(whole); after 50 connected cycles: \(Resources.now), \(ProcessCounts.now) (\(Resources.gstreamerThreadNames)); opened since: \(ProcessResources.added(since: targets, now: ProcessResources.descriptorTargets))"
        )
        #expect(s.publisher.viewerCount == 0)
        #expect(offeredMDNS, "Chromium offered no mDNS candidate: the case this test is for did not come up")
    }
}
