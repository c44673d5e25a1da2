import CCaptureServerShim
import CMicroHTTPD
import Capture
import CaptureSystem
import Foundation

/// Keeps slow and idle clients from holding the server (slowloris). libmicrohttpd's idle time-out
/// starts again with every byte, so a client that trickles its headers never has to finish them;
/// its connection limits count such a client as much as a stream. The guard follows every
/// connection and cuts those still waiting for their request's headers:
/// - when the headers have taken longer than the deadline in all (swept every second);
/// - the oldest first, when the open connections near the per-address limit, so that a new
///   request (and every stream) is still taken.
///
/// A connection is cut by shutting its socket down: libmicrohttpd then sees its end and closes it
/// on its own thread. Thread-safe: the callbacks come on the daemon's thread, the sweep on the
/// server's queue; the socket is shut down only under the lock, and libmicrohttpd tells the
/// guard a connection is gone (under the same lock) before it closes its socket.
final class ConnectionGuard: @unchecked Sendable {
    private struct Entry {
        let fd: Int32
        /// When the connection began waiting for a request's headers.
        var since: CaptureTime
        var inHeaders: Bool
        var isCut: Bool
    }

    /// Seconds a request's headers may take in all.
    let headersDeadline: Int
    /// Open connections at most before waiting ones are cut: below libmicrohttpd's per-address
    /// limit, so that a new connection is always accepted.
    let softLimit: Int
    private let lock = NSLock()
    private var entries: [UInt: Entry] = [:]

    init(headersDeadline: Int, softLimit: Int) {
        self.headersDeadline = headersDeadline
        self.softLimit = softLimit
    }

    private static func key(_ c: OpaquePointer) -> UInt { UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(c))) }

    /// A connection was accepted; cuts the oldest waiting ones when there are too many.
    func started(_ c: OpaquePointer) {
        let fd = capture_server_connection_fd(c)
        let key = Self.key(c)
        lock.withLock {
            entries[key] = Entry(fd: fd, since: .now(), inHeaders: true, isCut: false)
            var open = entries.values.lazy.filter { !$0.isCut }.count
            guard open > softLimit else { return }
            let waiting = entries.filter { $0.key != key && $0.value.inHeaders && !$0.value.isCut }
                .sorted { $0.value.since < $1.value.since }
            for (k, _) in waiting {
                guard open > softLimit else { break }
                cutLocked(k)
                open -= 1
            }
        }
    }

    /// A request's headers are all in: its connection is no longer cut for them.
    func headersReceived(_ c: OpaquePointer) {
        lock.withLock { entries[Self.key(c)]?.inHeaders = false }
    }

    /// A request was answered: a kept-alive connection now waits for the next request's headers.
    func requestCompleted(_ c: OpaquePointer) {
        lock.withLock {
            let key = Self.key(c)
            guard entries[key] != nil else { return }
            entries[key]!.inHeaders = true
            entries[key]!.since = .now()
        }
    }

    /// libmicrohttpd closes the connection (its socket is still open).
    func closed(_ c: OpaquePointer) {
        _ = lock.withLock { entries.removeValue(forKey: Self.key(c)) }
    }

    /// Cuts the connections whose headers are past the deadline.
    func sweep(now: CaptureTime) {
        let deadline = UInt64(headersDeadline) * 1_000_000_000
        lock.withLock {
            for (k, e) in entries where e.inHeaders && !e.isCut && now - e.since > deadline { cutLocked(k) }
        }
    }

    /// Shuts the socket down; libmicrohttpd closes the connection. Under `lock`.
    private func cutLocked(_ key: UInt) {
        guard let e = entries[key], e.fd >= 0 else { return }
        _ = Syscall.run("shutdown", mock: nil, failure: Int32(-1)) { shutdown(e.fd, Int32(SHUT_RDWR)) }
        entries[key]!.isCut = true
    }
}

// MARK: libmicrohttpd's callbacks (on the daemon's thread; `cls` is the guard)

func guardNotifyConnection(
    _ cls: UnsafeMutableRawPointer?, _ connection: OpaquePointer?, _ socketContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
    _ code: MHD_ConnectionNotificationCode
) {
    guard let cls, let connection else { return }
    let g = Unmanaged<ConnectionGuard>.fromOpaque(cls).takeUnretainedValue()
    // MHD_CONNECTION_NOTIFY_STARTED is 0, MHD_CONNECTION_NOTIFY_CLOSED 1.
    if code.rawValue == 0 { g.started(connection) } else { g.closed(connection) }
}

func guardRequestCompleted(
    _ cls: UnsafeMutableRawPointer?, _ connection: OpaquePointer?, _ requestContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
    _ code: MHD_RequestTerminationCode
) {
    // A request of an added route that read a body held it here (`startRouteRequest`).
    if let context = requestContext?.pointee, context != RequestLimits.refused {
        Unmanaged<RouteBody>.fromOpaque(context).release()
        requestContext?.pointee = nil
    }
    guard let cls, let connection else { return }
    Unmanaged<ConnectionGuard>.fromOpaque(cls).takeUnretainedValue().requestCompleted(connection)
}
