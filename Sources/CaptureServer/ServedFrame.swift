import Capture
import CaptureSystem

/// One frame as the server sends it: a whole multipart part (boundary, part headers, JPEG, CRLF)
/// in one buffer the server owns, shared by every client that sends it. The camera's sample is
/// copied here once and let go at once, so that no client, however slow, holds a driver buffer or
/// an encoder's ring slot. Written only by the frame pool while nobody holds the frame (holders
/// say so with `hold`/`letGo`: the server's newest frame, a stream client's part, a snapshot
/// answer); read-only for its holders. Guarded by the server's lock (see `CaptureStreamServer`).
final class ServedFrame: @unchecked Sendable {
    /// The part's bytes and their holders.
    private let buffer: HeldBuffer
    /// Bytes before the JPEG (boundary and part headers).
    private(set) var headerCount = 0
    /// The server's own count of frames published (1, 2, ...): gaps are frames a client skipped.
    private(set) var serial: UInt64 = 0
    private(set) var cameraSequence: UInt64 = 0
    private(set) var timestamp = CaptureTime(nanoseconds: 0)
    private(set) var dimensions = VideoDimensions(width: 0, height: 0)

    init(capacity: Int) { buffer = HeldBuffer(capacity: max(capacity, 4096)) }

    /// A holder keeps the frame: the pool does not refill it until every holder let go.
    func hold() { buffer.hold() }
    /// A holder is done with the frame's bytes.
    func letGo() { buffer.letGo() }
    /// Whether anyone holds the frame (the pool's test before it refills it).
    var isHeld: Bool { buffer.isHeld }
    /// Bytes of the whole part.
    var count: Int { buffer.count }

    /// The whole part.
    var part: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: buffer.base, count: buffer.count) }
    /// The JPEG alone (for snapshots).
    var jpeg: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: buffer.base! + headerCount, count: buffer.count - headerCount - 2)
    }

    /// Rewrites the frame. Only for the pool, while nobody holds it.
    func fill(
        jpeg: UnsafeRawBufferPointer, serial: UInt64, sequence: UInt64, timestamp: CaptureTime,
        dimensions: VideoDimensions
    ) {
        var header =
            "--\(MultipartStream.boundary)\r\nContent-Type: image/jpeg\r\nContent-Length: \(jpeg.count)\r\n"
            + "X-Timestamp: \(Self.seconds(timestamp))\r\nX-Sequence: \(sequence)\r\n\r\n"
        let needed = header.utf8.count + jpeg.count + 2
        let target = buffer.reserve(needed)
        headerCount = header.withUTF8 { h in
            target.copyMemory(from: h.baseAddress!, byteCount: h.count)
            return h.count
        }
        if let src = jpeg.baseAddress { (target + headerCount).copyMemory(from: src, byteCount: jpeg.count) }
        target.storeBytes(of: 0x0D, toByteOffset: headerCount + jpeg.count, as: UInt8.self)
        target.storeBytes(of: 0x0A, toByteOffset: headerCount + jpeg.count + 1, as: UInt8.self)
        buffer.setCount(needed)
        self.serial = serial
        self.cameraSequence = sequence
        self.timestamp = timestamp
        self.dimensions = dimensions
    }

    /// Seconds on the monotonic clock with six decimals, as uStreamer's `X-Timestamp`.
    static func seconds(_ t: CaptureTime) -> String {
        let us = t.nanoseconds / 1000
        let frac = String(us % 1_000_000)
        return "\(us / 1_000_000)." + String(repeating: "0", count: 6 - frac.count) + frac
    }
}

/// Reused frames: a new frame goes into one nobody holds any more, so that serving allocates
/// nothing per frame once the pool has grown to what the clients hold at once. Not thread-safe:
/// used under the server's lock.
struct ServedFramePool {
    private var frames: [ServedFrame] = []
    /// Frames kept for reuse at most; beyond them a frame is made and freed with its last holder.
    let limit: Int

    init(limit: Int) { self.limit = limit }

    /// A frame nobody holds, filled with `jpeg`.
    mutating func take(
        jpeg: UnsafeRawBufferPointer, serial: UInt64, sequence: UInt64, timestamp: CaptureTime,
        dimensions: VideoDimensions
    ) -> ServedFrame {
        var chosen: ServedFrame?
        for i in frames.indices where !frames[i].isHeld {
            chosen = frames[i]
            break
        }
        if chosen == nil {
            let f = ServedFrame(capacity: jpeg.count + 512)
            if frames.count < limit { frames.append(f) }
            chosen = f
        }
        chosen!.fill(jpeg: jpeg, serial: serial, sequence: sequence, timestamp: timestamp, dimensions: dimensions)
        return chosen!
    }
}

/// The multipart stream's fixed strings.
enum MultipartStream {
    static let boundary = "boundarydonotcross"
    static let contentType = "multipart/x-mixed-replace;boundary=\(boundary)"
    /// Ends the multipart body (RFC 2046) after the last part's CRLF.
    static let closeDelimiter: [UInt8] = Array("--\(boundary)--\r\n".utf8)
}
