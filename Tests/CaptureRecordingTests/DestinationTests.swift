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

    @Test func aCloseDuringAWriteLeavesTheDescriptorToTheWrite() throws {
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
        // The reader's opening and the writer's: the write still uses its descriptor.
        #expect(openings(of: path) == withWriter)
        let done = Date().addingTimeInterval(10)
        while result.withLock({ $0 }) == nil, Date() < done { Thread.sleep(forTimeInterval: 0.01) }
        #expect(result.withLock { $0 } == -EBADF, "a write cut by a close says so")
        // The last user closed it: only the reader's opening is left.
        #expect(openings(of: path) == withWriter - 1)
    }
}
