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
        lookUpGroup { getgrgid_r(gid, $0, $1, $2, $3) }?.name
    }

    private static func groupID(_ name: String) -> gid_t? {
        lookUpGroup { getgrnam_r(name, $0, $1, $2, $3) }?.id
    }

    /// Runs a reentrant group lookup with its record and string buffer alive for the whole read
    /// (the record's strings point into the buffer), growing the buffer while the call says
    /// ERANGE. What it read of the record found, or nil.
    private static func lookUpGroup(
        _ call: (
            UnsafeMutablePointer<Glibc.group>, UnsafeMutablePointer<CChar>, Int, UnsafeMutablePointer<UnsafeMutablePointer<Glibc.group>?>
        ) ->
            Int32
    ) -> GroupRecord? {
        var size = 4096
        while size <= 1 << 20 {
            let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: size)
            defer { buffer.deallocate() }
            var group = Glibc.group()
            var result: UnsafeMutablePointer<Glibc.group>?
            let found: GroupRecord?? = withUnsafeMutablePointer(to: &group) { g in
                let e = call(g, buffer, size, &result)
                if e == ERANGE { return .none }
                guard e == 0, result != nil else { return .some(nil) }
                return .some(GroupRecord(name: g.pointee.gr_name.map { String(cString: $0) }, id: g.pointee.gr_gid))
            }
            if let found { return found }
            size *= 4
        }
        return nil
    }

    /// What is read of a group record while its buffer lives.
    private struct GroupRecord {
        var name: String?
        var id: gid_t
    }
}
