// A small D-Bus client over libdbus-1 (loaded at run time by CDBusShim): a private connection,
// blocking method calls with a timeout, signals awaited with a deadline, and the value types the
// portal speaks. Not a general binding: what the camera portal needs, typed.
#if canImport(Glibc)
import Glibc
#endif
internal import CDBusShim
import CaptureSystem
import Foundation

private let bus = "org.freedesktop.DBus"

/// A D-Bus value, read from or written into a message.
package indirect enum DBusValue: Sendable, Equatable {
    case string(String)
    case objectPath(String)
    case signature(String)
    case bool(Bool)
    case byte(UInt8)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    /// A descriptor the message carried (`h`); read ones belong to the reader, who must close them.
    case fileDescriptor(Int32)
    case variant(DBusValue)
    /// An array; written with `elementSignature` when empty.
    case array([DBusValue], elementSignature: String)
    case dictEntry(DBusValue, DBusValue)
    case structure([DBusValue])

    /// A vardict (`a{sv}`), the options and results of every portal call.
    package static func vardict(_ entries: [(String, DBusValue)]) -> DBusValue {
        .array(entries.map { .dictEntry(.string($0.0), .variant($0.1)) }, elementSignature: "{sv}")
    }

    /// The entries of a vardict, variants unwrapped; nil for anything else.
    package var vardict: [String: DBusValue]? {
        guard case .array(let items, _) = self else { return nil }
        var out: [String: DBusValue] = [:]
        for item in items {
            guard case .dictEntry(.string(let key), let value) = item else { return nil }
            if case .variant(let inner) = value { out[key] = inner } else { out[key] = value }
        }
        return out
    }

    /// The type signature of this value.
    package var signature: String {
        switch self {
        case .string: "s"
        case .objectPath: "o"
        case .signature: "g"
        case .bool: "b"
        case .byte: "y"
        case .int16: "n"
        case .uint16: "q"
        case .int32: "i"
        case .uint32: "u"
        case .int64: "x"
        case .uint64: "t"
        case .double: "d"
        case .fileDescriptor: "h"
        case .variant: "v"
        case .array(_, let element): "a" + element
        case .dictEntry(let k, let v): "{" + k.signature + v.signature + "}"
        case .structure(let fields): "(" + fields.map(\.signature).joined() + ")"
        }
    }
}

/// A private connection to a message bus, closed when the last reference goes.
///
/// One thread at a time (libdbus serialises the calls, but a caller's awaited signal would be
/// popped by another's wait); open one per task.
package final class DBusConnection {
    private let api: UnsafePointer<capture_dbus_api>
    private let connection: OpaquePointer
    /// The bus's name for this connection (`:1.42`).
    package let uniqueName: String
    /// The bus it is connected to.
    package let address: String

    /// The session bus's address as libdbus would find it: `DBUS_SESSION_BUS_ADDRESS`, else
    /// `$XDG_RUNTIME_DIR/bus` when that socket exists (never X11 autolaunch); nil with neither.
    package static func sessionBusAddress(environment: [String: String]) -> String? {
        if let address = environment["DBUS_SESSION_BUS_ADDRESS"], !address.isEmpty { return address }
        if let dir = environment["XDG_RUNTIME_DIR"], !dir.isEmpty {
            var st = stat()
            if case .success = Syscall.run("stat", mock: nil, failure: -1, { stat(dir + "/bus", &st) }), st.st_mode & S_IFMT == S_IFSOCK {
                return "unix:path=\(dir)/bus"
            }
        }
        return nil
    }

    /// Connects to the bus at `address` and says Hello, giving up after `timeout` seconds. libdbus
    /// authenticates with no time limit (a peer that accepts the socket and never speaks holds its
    /// poll forever), so that happens on a thread of its own: on a timeout the caller gets
    /// `.timedOut` and the thread closes the connection whenever libdbus lets it go. The process
    /// never exits when the bus goes away.
    package init(address: String, timeout: Double = 5) throws(PortalError) {
        guard let api = capture_dbus_load() else { throw .libraryMissing(String(cString: capture_dbus_load_error())) }
        let attempt = ConnectAttempt(api: api, address: address)
        let finished = DispatchSemaphore(value: 0)
        NamedThread.start("cap dbus") {
            attempt.run()
            finished.signal()
        }
        let deadline = DispatchTime.now() + .milliseconds(Int((timeout * 1000).rounded(.up)))
        let outcome: ConnectAttempt.Outcome
        if finished.wait(timeout: deadline) == .timedOut {
            outcome = attempt.state.withLock { state in
                if case .pending = state { state = .abandoned }
                return state
            }
        } else {
            outcome = attempt.state.withLock { $0 }
        }
        switch outcome {
        case .connected(let connection, let name):
            self.api = api
            self.address = address
            self.connection = connection.pointer
            self.uniqueName = name
        case .failed(let error): throw error
        case .pending, .abandoned: throw .timedOut(what: "connecting to \(address)", seconds: timeout)
        }
    }

    /// A connection being made on its own thread; whoever comes last (the thread, or the caller
    /// giving up) decides who owns it. Thread-safe.
    private final class ConnectAttempt: @unchecked Sendable {
        /// An opened connection, passed from the connecting thread to the caller.
        struct Handle: @unchecked Sendable { let pointer: OpaquePointer }
        enum Outcome {
            case pending
            case connected(Handle, String)
            case failed(PortalError)
            case abandoned
        }
        let state = Locked<Outcome>(.pending)
        private let api: UnsafePointer<capture_dbus_api>
        private let address: String

        init(api: UnsafePointer<capture_dbus_api>, address: String) {
            self.api = api
            self.address = address
        }

        func run() {
            let outcome = connect()
            let keep = state.withLock { state -> Bool in
                guard case .pending = state else { return false }
                state = outcome
                return true
            }
            // The caller left: nobody else will close it.
            if !keep, case .connected(let connection, _) = outcome {
                api.pointee.connection_close(connection.pointer)
                api.pointee.connection_unref(connection.pointer)
            }
        }

        private func connect() -> Outcome {
            var error = capture_dbus_error()
            api.pointee.error_init(&error)
            defer { api.pointee.error_free(&error) }
            guard let connection = api.pointee.connection_open_private(address, &error) else {
                return .failed(
                    .connectionFailed(address: address, name: DBusConnection.name(error), message: DBusConnection.message(error)))
            }
            api.pointee.connection_set_exit_on_disconnect(connection, 0)
            var name: String?
            if let hello = api.pointee.message_new_method_call(bus, "/org/freedesktop/DBus", bus, "Hello") {
                // -1: libdbus's default (25 s); the caller's own deadline is the one that counts.
                if let reply = api.pointee.connection_send_with_reply_and_block(connection, hello, -1, &error) {
                    var iter = capture_dbus_iter()
                    var text: UnsafePointer<CChar>?
                    // 115: 's'.
                    if api.pointee.message_iter_init(reply, &iter) != 0, api.pointee.message_iter_get_arg_type(&iter) == 115 {
                        api.pointee.message_iter_get_basic(&iter, &text)
                        name = text.map { String(cString: $0) }
                    }
                    api.pointee.message_unref(reply)
                }
                api.pointee.message_unref(hello)
            }
            guard let name else {
                let failure = PortalError.connectionFailed(
                    address: address, name: DBusConnection.name(error), message: DBusConnection.message(error))
                api.pointee.connection_close(connection)
                api.pointee.connection_unref(connection)
                return .failed(failure)
            }
            return .connected(Handle(pointer: connection), name)
        }
    }

    deinit {
        api.pointee.connection_close(connection)
        api.pointee.connection_unref(connection)
    }

    /// Whether descriptors can travel on this connection (a Unix socket that negotiated them).
    package var canPassFileDescriptors: Bool { api.pointee.connection_can_send_type(connection, Int32(UInt8(ascii: "h"))) != 0 }

    /// Calls `method` (`interface.member`) on `path` of `destination` and returns the reply's
    /// arguments; waits at most `timeout` seconds.
    package func call(
        destination: String, path: String, interface: String, member: String, arguments: [DBusValue] = [], timeout: Double
    ) throws(PortalError) -> [DBusValue] {
        let method = interface + "." + member
        guard let message = api.pointee.message_new_method_call(destination, path, interface, member) else {
            throw .callFailed(method: method, name: "org.freedesktop.DBus.Error.NoMemory", message: "no message")
        }
        defer { api.pointee.message_unref(message) }
        var iter = capture_dbus_iter()
        api.pointee.message_iter_init_append(message, &iter)
        for argument in arguments where !append(argument, to: &iter) {
            throw .callFailed(method: method, name: "org.freedesktop.DBus.Error.NoMemory", message: "appending \(argument.signature)")
        }
        var error = capture_dbus_error()
        api.pointee.error_init(&error)
        defer { api.pointee.error_free(&error) }
        let ms = Int32(clamping: Int((timeout * 1000).rounded(.up)))
        guard let reply = api.pointee.connection_send_with_reply_and_block(connection, message, ms, &error) else {
            let name = Self.name(error)
            if name == "org.freedesktop.DBus.Error.NoReply" || name == "org.freedesktop.DBus.Error.Timeout" {
                throw .timedOut(what: method, seconds: timeout)
            }
            if name == "org.freedesktop.DBus.Error.Disconnected" { throw .disconnected }
            throw .callFailed(method: method, name: name, message: Self.message(error))
        }
        defer { api.pointee.message_unref(reply) }
        return readArguments(of: reply)
    }

    /// Asks the bus to route signals that match `rule` (`type='signal',path=...`) here.
    package func addMatch(_ rule: String, timeout: Double = 5) throws(PortalError) {
        _ = try call(
            destination: bus, path: "/org/freedesktop/DBus", interface: bus, member: "AddMatch", arguments: [.string(rule)],
            timeout: timeout)
    }

    /// Waits for the signal `interface.member` from `path` (any of `paths`) until `timeout`
    /// seconds pass, and returns its arguments; other messages that arrive meanwhile are dropped.
    package func waitForSignal(paths: Set<String>, interface: String, member: String, timeout: Double) throws(PortalError) -> [DBusValue] {
        let deadline = ContinuousClock.now + .milliseconds(Int64((timeout * 1000).rounded(.up)))
        while true {
            while let message = api.pointee.connection_pop_message(connection) {
                defer { api.pointee.message_unref(message) }
                // 4: DBUS_MESSAGE_TYPE_SIGNAL.
                guard api.pointee.message_get_type(message) == 4,
                    let p = api.pointee.message_get_path(message), paths.contains(String(cString: p)),
                    let i = api.pointee.message_get_interface(message), String(cString: i) == interface,
                    let m = api.pointee.message_get_member(message), String(cString: m) == member
                else { continue }
                return readArguments(of: message)
            }
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { throw .timedOut(what: interface + "." + member, seconds: timeout) }
            let ms = max(1, Int32(clamping: left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000))
            if api.pointee.connection_read_write(connection, ms) == 0 { throw .disconnected }
        }
    }

    // MARK: Marshalling

    private func append(_ value: DBusValue, to iter: inout capture_dbus_iter) -> Bool {
        func basic<T>(_ type: Character, _ v: T) -> Bool {
            withUnsafePointer(to: v) { api.pointee.message_iter_append_basic(&iter, Int32(type.asciiValue!), $0) != 0 }
        }
        func string(_ type: Character, _ s: String) -> Bool {
            s.withCString { c in basic(type, c) }
        }
        func container(_ type: Character, _ signature: String?, _ items: [DBusValue]) -> Bool {
            var sub = capture_dbus_iter()
            let opened =
                signature.map { s in s.withCString { api.pointee.message_iter_open_container(&iter, Int32(type.asciiValue!), $0, &sub) } }
                ?? api.pointee.message_iter_open_container(&iter, Int32(type.asciiValue!), nil, &sub)
            guard opened != 0 else { return false }
            var ok = true
            for item in items where ok { ok = append(item, to: &sub) }
            return api.pointee.message_iter_close_container(&iter, &sub) != 0 && ok
        }
        switch value {
        case .string(let s): return string("s", s)
        case .objectPath(let s): return string("o", s)
        case .signature(let s): return string("g", s)
        case .bool(let b): return basic("b", UInt32(b ? 1 : 0))
        case .byte(let v): return basic("y", v)
        case .int16(let v): return basic("n", v)
        case .uint16(let v): return basic("q", v)
        case .int32(let v): return basic("i", v)
        case .uint32(let v): return basic("u", v)
        case .int64(let v): return basic("x", v)
        case .uint64(let v): return basic("t", v)
        case .double(let v): return basic("d", v)
        case .fileDescriptor(let fd): return basic("h", fd)
        case .variant(let inner): return container("v", inner.signature, [inner])
        case .array(let items, let element): return container("a", element, items)
        case .dictEntry(let k, let v): return container("e", nil, [k, v])
        case .structure(let fields): return container("r", nil, fields)
        }
    }

    private func readArguments(of message: OpaquePointer) -> [DBusValue] {
        var iter = capture_dbus_iter()
        guard api.pointee.message_iter_init(message, &iter) != 0 else { return [] }
        return values(&iter)
    }

    /// The values from `iter` to the end of its container.
    private func values(_ iter: inout capture_dbus_iter) -> [DBusValue] {
        var out: [DBusValue] = []
        while true {
            let type = api.pointee.message_iter_get_arg_type(&iter)
            guard type != 0, let value = value(type, &iter) else { break }
            out.append(value)
            if api.pointee.message_iter_next(&iter) == 0 { break }
        }
        return out
    }

    private func value(_ type: Int32, _ iter: inout capture_dbus_iter) -> DBusValue? {
        func basic<T>(_ initial: T) -> T {
            var v = initial
            withUnsafeMutablePointer(to: &v) { api.pointee.message_iter_get_basic(&iter, $0) }
            return v
        }
        func text() -> String {
            let p: UnsafePointer<CChar>? = basic(nil)
            return p.map { String(cString: $0) } ?? ""
        }
        func contents() -> [DBusValue] {
            var sub = capture_dbus_iter()
            api.pointee.message_iter_recurse(&iter, &sub)
            return values(&sub)
        }
        switch UInt8(truncatingIfNeeded: type) {
        case UInt8(ascii: "s"): return .string(text())
        case UInt8(ascii: "o"): return .objectPath(text())
        case UInt8(ascii: "g"): return .signature(text())
        case UInt8(ascii: "b"): return .bool(basic(UInt32(0)) != 0)
        case UInt8(ascii: "y"): return .byte(basic(UInt8(0)))
        case UInt8(ascii: "n"): return .int16(basic(Int16(0)))
        case UInt8(ascii: "q"): return .uint16(basic(UInt16(0)))
        case UInt8(ascii: "i"): return .int32(basic(Int32(0)))
        case UInt8(ascii: "u"): return .uint32(basic(UInt32(0)))
        case UInt8(ascii: "x"): return .int64(basic(Int64(0)))
        case UInt8(ascii: "t"): return .uint64(basic(UInt64(0)))
        case UInt8(ascii: "d"): return .double(basic(Double(0)))
        // libdbus hands out a dup of the descriptor: the reader owns it.
        case UInt8(ascii: "h"): return .fileDescriptor(basic(Int32(-1)))
        case UInt8(ascii: "v"): return contents().first.map { .variant($0) }
        case UInt8(ascii: "a"):
            let items = contents()
            return .array(items, elementSignature: items.first?.signature ?? "")
        case UInt8(ascii: "e"):
            let kv = contents()
            return kv.count == 2 ? .dictEntry(kv[0], kv[1]) : nil
        case UInt8(ascii: "r"): return .structure(contents())
        default: return nil
        }
    }

    fileprivate static func name(_ error: capture_dbus_error) -> String { error.name.map { String(cString: $0) } ?? "" }
    fileprivate static func message(_ error: capture_dbus_error) -> String { error.message.map { String(cString: $0) } ?? "" }
}
