import CaptureSystem
import Foundation
import Testing
@testable import Capture
import CaptureTestSupport

/// The virtual camera's time code: each frame shows its capture time (wall clock, ms), which a
/// screen's reader turns into a latency. Read back here from what the app gets.
@Suite struct VirtualTimeCodeTests {
    /// Milliseconds since the Unix epoch, modulo 2^32, as the time code counts them.
    static func wallClock() -> UInt32 { UInt32(truncatingIfNeeded: Int64(Date().timeIntervalSince1970 * 1000)) }

    @Test(arguments: [PixelFormat.yuyv, .nv12, .yuv420, .mjpeg])
    func eachFrameShowsWhenItWasCaptured(_ format: PixelFormat) async throws {
        let rig = try VirtualSessionRig("Time code \(format)", modes: [.init(format, width: 640, height: 480, frameRates: [30])])
        defer { rig.uninstall() }
        rig.camera.showsTimeCode = true
        // Each frame's code and the wall clock when the app had it.
        let seen = Locked<[(code: UInt32?, at: UInt32)]>([])
        rig.collector.onFrame = { s in
            let code = VirtualCamera.timeCode(in: s)
            seen.withLock { $0.append((code, Self.wallClock())) }
        }
        let started = Self.wallClock()
        try rig.session.start()
        #expect(await rig.collector.eventually(frames: 20))
        rig.session.stopRunning()
        let frames = seen.withLock { $0 }
        let codes = frames.compactMap(\.code)
        #expect(codes.count == frames.count, "\(frames.count - codes.count) of \(frames.count) frames had no readable code")
        for f in frames {
            guard let code = f.code else { continue }
            // Drawn after the test started and before the app had the frame (a loaded machine
            // may take a while in between, never a negative time).
            #expect(code &- started < 1 << 31 && f.at &- code < 10_000, "code \(code), started \(started), delivered \(f.at)")
        }
        // Later frames, later times.
        #expect(zip(codes, codes.dropFirst()).allSatisfy { $1 &- $0 < 1 << 31 }, "\(codes)")
        #expect(codes.last! &- codes.first! > 0)
    }

    /// A frame narrower than the code (512 pixels) has no time code to read.
    @Test func aNarrowFrameHasNoCodeToRead() async throws {
        let rig = try VirtualSessionRig("Time code narrow")
        defer { rig.uninstall() }
        rig.camera.showsTimeCode = true
        let codes = Locked<[UInt32?]>([])
        rig.collector.onFrame = { s in codes.withLock { $0.append(VirtualCamera.timeCode(in: s)) } }
        try rig.session.start()
        #expect(await rig.collector.eventually(frames: 5))
        rig.session.stopRunning()
        #expect(codes.withLock { $0.allSatisfy { $0 == nil } })
    }
}
