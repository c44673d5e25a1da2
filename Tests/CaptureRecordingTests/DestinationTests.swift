import CaptureSystem
import Foundation
import Testing
@testable import CaptureRecording

/// The recorder's file as FFmpeg writes it: a close from another thread while a write still waits
/// on a full pipe leaves the descriptor to that write, so its number is not reused under it.
@Suite struct DestinationTests {
    /// Where /proc/self/fd says the process has `path` open.
    private func openings(of path: String) -> Int {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return fds.filter { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)")) == path }.count
    }

    /// One try: (openings with the write waiting, openings just after the close, whether the
    /// write still waited once they were counted, the write's result, openings at the end).
    private func closeDuringAWrite() throws -> (withWriter: Int, afterClose: Int, stillWaiting: Bool, result: Int32?, atEnd: Int) {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("dest-\(UUID().uuidString).fifo").path
        #expect(mkfifo(path, 0o600) == 0)
        defer { unlink(path) }
        // A reader that never reads: the pipe fills and the write waits for room.
        let reader = open(path, O_RDONLY | O_NONBLOCK)
        #expect(reader >= 0)
        defer { close(reader) }
        let destination = Destination(path: path)
        #expect(destination.waitForOpen(seconds: 10) == 0)
        let result = Locked<Int32?>(nil)
        let big = [UInt8](repeating: 7, count: 4 << 20)
        let writer = Thread {
            let r = big.withUnsafeBytes { destination.write($0) }
            result.withLock { $0 = r }
        }
        writer.start()
        // Waiting for room: the pipe took what it holds and no more.
        let end = Date().addingTimeInterval(10)
        while destination.bytesWritten == 0 || destination.bytesWritten < 4096, Date() < end { Thread.sleep(forTimeInterval: 0.01) }
        Thread.sleep(forTimeInterval: 0.2)
        #expect(result.withLock { $0 } == nil, "the write should still wait")
        let withWriter = openings(of: path)
        destination.close()
        let afterClose = openings(of: path)
        // (The write sees the close within 50 ms and then lets the descriptor go, rightly: on a
        // loaded machine that can come before the count above, and then the try says nothing.)
        let stillWaiting = result.withLock { $0 } == nil
        let done = Date().addingTimeInterval(10)
        while result.withLock({ $0 }) == nil, Date() < done { Thread.sleep(forTimeInterval: 0.01) }
        return (withWriter, afterClose, stillWaiting, result.withLock { $0 }, openings(of: path))
    }

    @Test func aCloseDuringAWriteLeavesTheDescriptorToTheWrite() throws {
        var counted = 0
        for _ in 0..<10 where counted < 3 {
            let t = try closeDuringAWrite()
            // The reader's opening and the writer's: the write still uses its descriptor.
            if t.stillWaiting {
                counted += 1
                #expect(t.afterClose == t.withWriter, "closed under a write still waiting: \(t)")
            }
            #expect(t.result == -EBADF, "a write cut by a close says so: \(t)")
            // The last user closed it: only the reader's opening is left.
            #expect(t.atEnd == t.withWriter - 1, "\(t)")
        }
        #expect(counted == 3, "in 10 tries the write saw the close before it was counted more than 7 times")
    }
}
