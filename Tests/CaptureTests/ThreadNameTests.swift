import Foundation
import Testing
@testable import Capture
import CaptureTestSupport

/// The library's threads carry names Linux tools show (`top -H`, `ps -L`, gdb, perf).
@Suite struct ThreadNameTests {
    /// The kernel's names of this process's threads.
    private static func threadNames() -> Set<String> {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return Set(
            tasks.compactMap { try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8) }
                .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) })
    }

    @Test func captureEncoderAndCameraThreadsAreNamed() async throws {
        let rig = try MisuseRig("Thread names")
        defer { rig.uninstall() }
        let (session, video, collector) = try rig.videoSession()
        video.videoSettings = .init(jpeg: .init(quality: 80))
        try session.start()
        defer { session.stopRunning() }
        #expect(await collector.eventually(frames: 3))
        let names = Self.threadNames()
        for name in ["cap video", "cap jpeg 0", "cap virtual"] {
            #expect(names.contains(name), "no thread named \(name): \(names.sorted())")
        }
    }
}
