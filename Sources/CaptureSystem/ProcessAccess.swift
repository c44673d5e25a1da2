#if canImport(Glibc)
import Glibc
#endif

/// What the process may open, as the kernel decides it: the effective user, its groups, and
/// `access(2)` on device nodes. Prose-free; any thread.
package enum ProcessAccess {
    /// Whether the process runs as root (which may open every device node).
    package static var isRoot: Bool { geteuid() == 0 }

    /// Whether the effective user may open `path` for reading and writing (a device node is
    /// opened read-write). The check is `access(2)` with the effective IDs.
    package static func mayOpen(_ path: String) -> Result<Void, SystemCallError> {
        Syscall.run("access", mock: mock, failure: Int32(-1)) {
            faccessat(AT_FDCWD, path, R_OK | W_OK, AT_EACCESS)
        }.map { _ in () }.mapError { SystemCallError(operation: "access", errno: $0) }
    }

    /// The name of the group that owns `path` (nil when it cannot be read).
    package static func owningGroup(of path: String) -> String? {
        var st = stat()
        guard case .success = Syscall.run("stat", mock: mock, failure: Int32(-1), { stat(path, &st) })
        else { return nil }
        return groupName(st.st_gid)
    }

    /// Whether the process is a member of the group named `name` (its effective group or one
    /// of its supplementary groups).
    package static func isMember(ofGroup name: String) -> Bool {
        guard let gid = groupID(name) else { return false }
        if getegid() == gid { return true }
        let count = getgroups(0, nil)
        guard count > 0 else { return false }
        var groups = [gid_t](repeating: 0, count: Int(count))
        let n = getgroups(count, &groups)
        return n > 0 && groups[0..<Int(n)].contains(gid)
    }

    private static var mock: SyscallMock? {
        #if DEBUG
        SyscallMock.current
        #else
        nil
        #endif
    }

    private static func groupName(_ gid: gid_t) -> String? {
        var group = Glibc.group()
        var result: UnsafeMutablePointer<Glibc.group>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getgrgid_r(gid, &group, &buffer, buffer.count, &result) == 0, let r = result, let name = r.pointee.gr_name
        else { return nil }
        return String(cString: name)
    }

    private static func groupID(_ name: String) -> gid_t? {
        var group = Glibc.group()
        var result: UnsafeMutablePointer<Glibc.group>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getgrnam_r(name, &group, &buffer, buffer.count, &result) == 0, let r = result else { return nil }
        return r.pointee.gr_gid
    }
}
