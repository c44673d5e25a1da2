import CaptureTestSupport
import Foundation
import Testing

/// The tests' way to run programs (`RunningProcess`) must let a program get the signals the
/// tests send it.
@Suite struct RunningProcessTests {
    /// A program that does not handle SIGTERM ends at once when terminated: its signal mask is not
    /// the test thread's (worker threads block signals, and a child inherits its spawner's mask,
    /// so it used to sit out the time-out and be killed).
    @Test func terminateEndsAProgramThatDoesNotHandleSIGTERM() throws {
        let p = try RunningProcess(URL(fileURLWithPath: "/bin/sleep"), ["30"])
        let start = Date()
        let status = p.terminate(timeout: 10)
        let took = Date().timeIntervalSince(start)
        #expect(status == 128 + SIGTERM, "status \(String(describing: status)) after \(took) s")
        #expect(took < 5, "terminate took \(took) s")
    }
}
