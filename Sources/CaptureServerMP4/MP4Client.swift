import Capture
import CaptureServer

/// One `/stream.mp4` client: the init segment, then its own moof before each shared mdat. Its
/// state is guarded by the routes' lock; `read` runs on the server's daemon thread.
final class MP4Client: RouteStream, @unchecked Sendable {
    enum Next {
        case initSegment([UInt8])
        case fragment(MP4Fragment)
        case wait
        case end
    }

    let id: Int
    let routes: FragmentedMP4Routes
    // Guarded by `routes.lock`.
    /// The init segment it belongs to (0: not sent yet).
    var generation = 0
    /// The serial of the next fragment it may send.
    var next: UInt64
    /// It waits for a key frame (it starts, or fell behind).
    var needsKey = true
    var sent = 0
    var skipped = 0
    var bytes = 0
    /// What it sends now: the init segment, or a fragment after its moof.
    private var initBytes: [UInt8]?
    private var fragment: MP4Fragment?
    private var moof = [UInt8](repeating: 0, count: MP4Boxes.moofSize)
    private var offset = 0
    /// Its moof sequence number; the capture time of the last fragment it sent and the decode
    /// time of the next.
    private var sequence: UInt32 = 0
    private var lastTime: CaptureTime?
    private var decodeTime: UInt64 = 0
    private var isEnded = false

    init(id: Int, routes: FragmentedMP4Routes, startAfter serial: UInt64) {
        self.id = id
        self.routes = routes
        next = serial + 1
    }

    /// Skips `count` fragments (counted once it has started).
    func skip(_ count: Int = 1) {
        next += UInt64(count)
        if sent > 0 { skipped += count }
    }

    func read(into buffer: UnsafeMutableRawBufferPointer, waker: RouteWaker) -> RouteStreamRead {
        routes.lock.withLock {
            if isEnded { return .end }
            if initBytes == nil && fragment == nil {
                switch routes.nextLocked(for: self, waker: waker) {
                case .wait: return .wait
                case .end:
                    isEnded = true
                    return .end
                case .initSegment(let bytes):
                    initBytes = bytes
                    offset = 0
                case .fragment(let f):
                    start(f)
                }
            }
            let n: Int
            if let initBytes {
                n = min(buffer.count, initBytes.count - offset)
                initBytes.withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress! + offset, byteCount: n) }
                offset += n
                if offset == initBytes.count { self.initBytes = nil }
            } else {
                let f = fragment!
                let total = MP4Boxes.moofSize + f.count
                n = min(buffer.count, total - offset)
                var written = 0
                if offset < MP4Boxes.moofSize {
                    let m = min(n, MP4Boxes.moofSize - offset)
                    moof.withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress! + offset, byteCount: m) }
                    written = m
                }
                if written < n {
                    let from = offset + written - MP4Boxes.moofSize
                    (buffer.baseAddress! + written).copyMemory(from: f.base + from, byteCount: n - written)
                }
                offset += n
                if offset == total {
                    f.letGo()
                    fragment = nil
                }
            }
            bytes += n
            return .bytes(n)
        }
    }

    /// Starts sending `f`: holds it and writes this client's moof. Under `routes.lock`.
    private func start(_ f: MP4Fragment) {
        f.hold()
        fragment = f
        offset = 0
        sequence &+= 1
        sent += 1
        // Each sample lasts as long as the time since the one before it: the samples follow each
        // other without gaps (a player stalls at a gap) whatever frames the stage or this client
        // skipped, and their times add up to the capture times' (one frame behind).
        var duration = f.duration
        if let last = lastTime {
            let ns = f.time.nanoseconds > last.nanoseconds ? f.time.nanoseconds - last.nanoseconds : 0
            duration = UInt32(min(max(ns / 1000 * MP4Boxes.timescale / 1_000_000, 90), MP4Boxes.timescale))
        }
        lastTime = f.time
        let decodeTime = self.decodeTime
        self.decodeTime += UInt64(duration)
        moof.withUnsafeMutableBytes {
            MP4Boxes.writeMoof(
                into: $0, sequence: sequence, decodeTime: decodeTime, duration: duration, size: UInt32(f.sampleSize), isKey: f.isKey)
        }
    }

    func ended() {
        routes.lock.withLock {
            isEnded = true
            fragment?.letGo()
            fragment = nil
            initBytes = nil
        }
        routes.clientEnded(self)
    }
}
