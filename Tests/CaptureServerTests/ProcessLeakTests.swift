import Capture
import CaptureTestSupport
import Foundation
import Testing

/// Every descriptor and every thread of the process back to where it was after clients of the
/// streaming routes come and go: counted whole (all of `/proc/self/fd` and `/proc/self/task`),
/// not per kind. Whole counts mean something only when nothing else runs in the process:
/// `scripts/test` runs the suites named `ProcessLeak…` on their own, one test at a time, after
/// the others (`swift test --filter ProcessLeak --no-parallel`).
@Suite(.serialized) struct ProcessLeakServerTests {
    /// `count` clients of `path`, each taking `bytes` of the stream and leaving: `together` at
    /// once, the rest one after another.
    static func cycle(_ served: ServedCamera, _ path: String, count: Int, together: Int, bytes: Int) throws {
        func client() throws -> RawClient {
            let c = try RawClient(port: served.port)
            c.send("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            return c
        }
        let group = try (0..<together).map { _ in try client() }
        for c in group { #expect(c.bytes(bytes) != nil, "a client of \(path) got no bytes") }
        for c in group { c.shutdown() }
        for _ in 0..<(count - together) {
            let c = try client()
            #expect(c.bytes(bytes) != nil, "a client of \(path) got no bytes")
            c.shutdown()
        }
    }

    /// Runs `work` twice: the first time to reach the steady state (threads made on first use),
    /// the second measured against the counts between them, each time waiting for `settled`.
    static func measured(settled: @escaping () -> Bool, _ work: () throws -> Void) throws -> (ProcessCounts, ProcessCounts) {
        try work()
        #expect(waitUntil(timeout: 20, settled), "the routes did not settle after the first round")
        Thread.sleep(forTimeInterval: 1)
        let before = ProcessCounts.now
        try work()
        #expect(waitUntil(timeout: 20, settled), "the routes did not settle")
        _ = waitUntil(timeout: 20) { ProcessCounts.now.isBack(to: before) }
        return (before, ProcessCounts.now)
    }

    /// 20 `/stream.mp4` clients (10 at once, 10 one after another) come and go, twice.
    @Test func mp4ClientCyclesGiveBackEveryDescriptorAndThread() throws {
        let served = try FragmentedMP4Tests.served()
        defer { served.close() }
        let idle: () -> Bool = {
            guard let s = try? FragmentedMP4Tests.mp4State(served) else { return false }
            return s["clients"] as? Int == 0 && s["encoding"] as? Bool == false
        }
        let (before, after) = try Self.measured(settled: idle) {
            try Self.cycle(served, "/stream.mp4", count: 20, together: 10, bytes: 4096)
        }
        print("process leak, /stream.mp4: before \(before), after 20 clients \(after)")
        #expect(after.isBack(to: before), "before: \(before); after 20 clients: \(after)")
    }

    /// 50 `/metadata` clients (10 at once, 40 one after another) come and go, twice.
    @Test func metadataClientCyclesGiveBackEveryDescriptorAndThread() throws {
        let served = try MetadataEventsTests.served()
        defer { served.close() }
        let idle: () -> Bool = {
            let state = (try? JSONSerialization.jsonObject(with: try curl("\(served.base)/state").body)) as? [String: Any]
            let routes = (state?["result"] as? [String: Any])?["routes"] as? [String: Any]
            return (routes?["metadata"] as? [String: Any])?["clients"] as? Int == 0
        }
        let (before, after) = try Self.measured(settled: idle) {
            try Self.cycle(served, "/metadata", count: 50, together: 10, bytes: 40)
        }
        print("process leak, /metadata: before \(before), after 50 clients \(after)")
        #expect(after.isBack(to: before), "before: \(before); after 50 clients: \(after)")
    }
}
