internal import CLinux
import Foundation

/// Threads the library starts, named where Linux tools show them (`top -H`, `ps -L`, gdb,
/// perf): Foundation's `Thread.name` does not reach the kernel on Linux, and a thread otherwise
/// inherits the name of whichever thread started it.
package enum NamedThread {
    /// Starts `body` on a new thread named `name`: the kernel keeps its first 15 bytes, so the
    /// name should say what the thread is within them (e.g. "cap video0").
    package static func start(
        _ name: String, qualityOfService: QualityOfService = .default, _ body: @escaping @Sendable () -> Void
    ) {
        let t = Thread {
            nameCurrentThread(name)
            body()
        }
        t.name = name
        t.qualityOfService = qualityOfService
        t.start()
    }

    /// Names the calling thread (its first 15 bytes). A failure only leaves the old name: not
    /// reported.
    package static func nameCurrentThread(_ name: String) {
        let short = String(decoding: name.utf8.prefix(15), as: UTF8.self)
        _ = Syscall.run("prctl(PR_SET_NAME)", mock: nil, failure: -1) { clinux_set_thread_name(short) }
    }
}
