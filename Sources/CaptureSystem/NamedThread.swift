internal import CLinux
import Foundation

/// Threads the library starts, named where Linux tools show them (`top -H`, `ps -L`, gdb,
/// perf): Foundation's `Thread.name` does not reach the kernel on Linux, and a thread otherwise
/// inherits the name of whichever thread started it.
package enum NamedThread {
    /// Starts `body` on a new thread named `name`: the kernel keeps its first 15 bytes, so the
    /// name should say what the thread is within them (e.g. "cap video0"). A thread of
    /// `.utility` or `.background` quality runs at nice 10 or 19 (Foundation leaves every thread
    /// at the process's 0 on Linux), so that it takes a core from capture and encoding only when
    /// they leave it free; the higher classes stay at the process's nice value, as raising it
    /// needs a privilege.
    package static func start(
        _ name: String, qualityOfService: QualityOfService = .default, _ body: @escaping @Sendable () -> Void
    ) {
        let nice: Int32? =
            switch qualityOfService {
            case .utility: 10
            case .background: 19
            default: nil
            }
        let t = Thread {
            nameCurrentThread(name)
            if let nice { lowerCurrentThread(toNice: nice) }
            body()
        }
        t.name = name
        t.qualityOfService = qualityOfService
        t.start()
    }

    /// Sets the calling thread's nice value (Linux keeps one per thread). A failure leaves the
    /// thread at its old priority: not reported.
    package static func lowerCurrentThread(toNice nice: Int32) {
        _ = Syscall.run("setpriority", mock: nil, failure: -1) { clinux_set_thread_nice(nice) }
    }

    /// Names the calling thread (its first 15 bytes). A failure only leaves the old name: not
    /// reported.
    package static func nameCurrentThread(_ name: String) {
        let short = String(decoding: name.utf8.prefix(15), as: UTF8.self)
        _ = Syscall.run("prctl(PR_SET_NAME)", mock: nil, failure: -1) { clinux_set_thread_name(short) }
    }
}
