import Foundation

/// The one thread the window tests drive SDL from (as an app drives it from its main thread):
/// test bodies run there one at a time and hand back what they found. Swift Testing's
/// expectations stay on the test's own task.
final class UIThread: @unchecked Sendable {
    static let shared = UIThread()
    private let condition = NSCondition()
    private var jobs: [() -> Void] = []

    private init() {
        let t = Thread { [unowned self] in
            while true {
                condition.lock()
                while jobs.isEmpty { condition.wait() }
                let job = jobs.removeFirst()
                condition.unlock()
                job()
            }
        }
        t.name = "preview-tests.ui"
        t.stackSize = 8 << 20
        t.start()
    }

    /// Runs `body` on the thread and returns its result (or its error).
    static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<T, any Error>) in
            shared.condition.lock()
            shared.jobs.append { c.resume(with: Result { try body() }) }
            shared.condition.signal()
            shared.condition.unlock()
        }
    }
}
