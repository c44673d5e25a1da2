import Capture
@testable import CaptureServer
import Testing

/// The server's reused part buffers: a frame is refilled only once every holder let go, by the
/// holds they declare (no reference-count introspection).
@Suite struct ServedFramePoolTests {
    private static func take(_ pool: inout ServedFramePool, _ byte: UInt8, serial: UInt64) -> ServedFrame {
        let jpeg = [UInt8](repeating: byte, count: 1000)
        return jpeg.withUnsafeBytes {
            pool.take(
                jpeg: $0, serial: serial, sequence: serial, timestamp: CaptureTime(nanoseconds: 0),
                dimensions: VideoDimensions(width: 16, height: 16))
        }
    }

    @Test func aHeldFrameKeepsItsBytesAndAFreedOneIsReused() {
        var pool = ServedFramePool(limit: 4)
        let a = Self.take(&pool, 0xAA, serial: 1)
        a.hold()  // a client sends it
        let b = Self.take(&pool, 0xBB, serial: 2)
        #expect(a !== b, "a held frame was refilled")
        #expect(a.serial == 1 && a.jpeg.allSatisfy { $0 == 0xAA }, "a held frame's bytes changed")
        // Still held: the next frame is yet another buffer, or `b`, which nobody holds.
        let c = Self.take(&pool, 0xCC, serial: 3)
        #expect(c !== a)
        a.letGo()
        // Let go: reused, no new buffer.
        b.hold()
        c.hold()
        let d = Self.take(&pool, 0xDD, serial: 4)
        #expect(d === a && d.serial == 4 && d.jpeg.allSatisfy { $0 == 0xDD })
        // Two holders: it stays out until both let go.
        d.hold()
        d.hold()
        d.letGo()
        #expect(d.isHeld)
        d.letGo()
        #expect(!d.isHeld)
    }
}
