// Names the system gives this machine and this user, through the funnel.
#if canImport(Glibc)
import Glibc
#endif

package enum SystemIdentity {
    /// This machine's host name (`gethostname`), or the failed call.
    package static func hostName() -> Result<String, SystemCallError> {
        var name = [CChar](repeating: 0, count: 256)
        // One byte kept 0: a name cut at the buffer's end is not terminated.
        return Syscall.run("gethostname", mock: nil, failure: -1) { gethostname(&name, name.count - 1) }
            .map { _ in String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) }
            .mapError { SystemCallError(operation: "gethostname", errno: $0) }
    }

    /// The home folder the password database gives the process's real user, or nil when it
    /// gives none (no entry, or a failed lookup).
    package static func homeDirectory() -> String? {
        var size = 4096
        while size <= 1 << 20 {
            var buffer = [CChar](repeating: 0, count: size)
            let found = buffer.withUnsafeMutableBufferPointer { b -> Result<String?, Errno> in
                var entry = passwd()
                var result: UnsafeMutablePointer<passwd>?
                // getpwuid_r returns its error instead of setting errno; the funnel reads errno.
                return Syscall.run("getpwuid_r", mock: nil, failure: -1) { () -> Int32 in
                    let rc = getpwuid_r(getuid(), &entry, b.baseAddress!, b.count, &result)
                    if rc != 0 { errno = rc }
                    return rc == 0 ? 0 : -1
                }.map { _ in result == nil ? nil : entry.pw_dir.map { String(cString: $0) } }
            }
            switch found {
            case .failure(.outOfRange): size *= 2
            case .failure: return nil
            case .success(let dir): return dir
            }
        }
        return nil
    }
}
