import Capture
import CaptureServer

/// One `/metadata` client: the preamble, then the shared events in order (skipping to the newest
/// when it fell behind), keep-alive comments when quiet. Its state is guarded by the routes'
/// lock; `read` runs on the server's daemon thread.
final class MetadataClient: RouteStream, @unchecked Sendable {
    enum Next {
        case bytes([UInt8])
        case wait
        case end
    }

    let id: Int
    let routes: MetadataRoutes
    // Guarded by `routes.lock`.
    /// The serial of the next event it may send.
    var next: UInt64
    var greeted = false
    var sent = 0
    var skipped = 0
    var bytes = 0
    /// When it last wrote a byte (capture clock, seconds).
    var lastWrite: Double
    /// What it sends now (shared with the ring and the other clients: not copied) and how far.
    private var pending: [UInt8]?
    private var offset = 0
    private var isEnded = false

    init(id: Int, routes: MetadataRoutes, startAfter serial: UInt64) {
        self.id = id
        self.routes = routes
        next = serial + 1
        lastWrite = CaptureTime.now().seconds
    }

    /// Skips the events before `serial` (counted once it has sent one).
    func skip(to serial: UInt64) {
        guard serial > next else { return }
        if sent > 0 { skipped += Int(serial - next) }
        next = serial
    }

    func read(into buffer: UnsafeMutableRawBufferPointer, waker: RouteWaker) -> RouteStreamRead {
        routes.lock.withLock {
            if isEnded { return .end }
            if pending == nil {
                // A client that has not taken what its socket holds is dropped: its events would
                // wait in the kernel for minutes before the time-out could see it stall.
                if greeted, let unsent = waker.unsentBytes, unsent > MetadataRoutes.unsentLimit {
                    isEnded = true
                    routes.droppedLocked()
                    return .end
                }
                let now = CaptureTime.now().seconds
                switch routes.nextLocked(for: self, waker: waker, now: now) {
                case .wait: return .wait
                case .end:
                    isEnded = true
                    return .end
                case .bytes(let b):
                    pending = b
                    offset = 0
                    lastWrite = now
                }
            }
            guard let p = pending else { return .wait }
            let n = min(buffer.count, p.count - offset)
            p.withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress! + offset, byteCount: n) }
            offset += n
            bytes += n
            if offset == p.count { pending = nil }
            return .bytes(n)
        }
    }

    func ended() {
        routes.lock.withLock {
            isEnded = true
            pending = nil
        }
        routes.clientEnded(self)
    }
}
