import Capture
import CaptureRTSP
import CaptureTestSupport
import Foundation
import Testing

/// Servers stopped with clients on them give everything back: their sockets, the media's
/// pipeline and the threads of both. Counts the process whole, so scripts/test runs it alone
/// (its name starts with ProcessLeak).
@Suite(.serialized) struct ProcessLeakRTSPTests {
    /// One cycle: a server, a client that reads 10 frames and leaves, one stuck after PLAY (never
    /// reads) and one that is reading when the server stops.
    static func cycle(_ n: Int) throws {
        let rig = try RTSPRig("leak \(n)")
        defer { rig.stop() }
        let stuck = try StalledRTSPClient(url: rig.url, port: rig.server.port)
        defer { stuck.close() }
        try stuck.play()
        let r = try runProcess("/usr/bin/ffmpeg", decodeArguments(rig.url, transport: "tcp", frames: 10), timeout: 90)
        #expect(r.status == 0, "cycle \(n): ffmpeg exited \(r.status): \(r.stderr)")
        let reading = try RunningProcess(
            URL(fileURLWithPath: "/usr/bin/ffmpeg"), decodeArguments(rig.url, transport: "udp", frames: 100_000))
        let server = rig.server
        _ = waitUntil(timeout: 30) { server.clientCount >= 2 }
        rig.server.stop()
        #expect(rig.server.clientCount == 0)
        _ = reading.terminate()
    }

    @Test func stoppedServersWithClientsLeaveNothing() async throws {
        // A first cycle warms up GStreamer's registry, x264 and the pools.
        try Self.cycle(0)
        let whole = ProcessCounts.now, targets = ProcessResources.descriptorTargets
        for n in 1...5 { try Self.cycle(n) }
        let back = await eventually(timeout: 30) { ProcessCounts.now.isBack(to: whole) }
        #expect(
            back,
            "before \(whole), after 5 cycles \(ProcessCounts.now); opened since: \(ProcessResources.added(since: targets, now: ProcessResources.descriptorTargets))"
        )
        print("rtsp leak: before \(whole), after 5 cycles \(ProcessCounts.now)")
    }
}
