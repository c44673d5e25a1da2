// Typed camera controls on vivid in the VM: vivid has AUTOGAIN and GAIN (and BRIGHTNESS,
// CONTRAST...), no exposure time, bias, focus, white balance, zoom or flash LED. What it has
// round-trips through the typed API; what it lacks says so in a one-line typed error.
import CaptureBackend
import Capture
import CaptureTestSupport
import Foundation
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct CameraControlsDriverTests {
    private static func code(_ body: () throws(CaptureError) -> Void) -> CaptureError? {
        do { try body(); return nil } catch { return error }
    }

    @Test func gainIsISOAndAutogainIsContinuousExposureOnVivid() throws {
        let cam = try VM.vividCameras(count: 1)[0]
        let names = try cam.controls().map(\.name)
        let gain = try #require(cam.control(.gain), "vivid has no gain control: \(names)")
        #expect(cam.minISO == Float(gain.minimum) && cam.maxISO == Float(gain.maximum))
        #expect(
            cam.isExposureModeSupported(.continuousAutoExposure) && cam.isExposureModeSupported(.locked)
                && cam.isExposureModeSupported(.custom))
        // The lock first.
        let unlocked = Self.code { () throws(CaptureError) in
            try cam.setExposureModeCustom(duration: CaptureDevice.currentExposureDuration, iso: 200)
        }
        #expect(unlocked?.code == .invalidState && unlocked?.message.contains("lockForConfiguration()") == true)
        try cam.lockForConfiguration()
        defer { cam.unlockForConfiguration() }
        try cam.setExposureMode(.continuousAutoExposure)
        #expect(cam.exposureMode == .continuousAutoExposure)
        #expect(try cam.value(of: .gainAutomatic) == 1)
        try cam.setExposureModeCustom(duration: CaptureDevice.currentExposureDuration, iso: 200)
        #expect(cam.exposureMode == .custom && cam.iso == 200)
        #expect(try cam.value(of: .gainAutomatic) == 0)
        #expect(try cam.value(of: .gain) == 200)
        try cam.setExposureModeCustom(duration: CaptureDevice.currentExposureDuration, iso: 17)
        #expect(cam.iso == 17)
        try cam.setExposureMode(.locked)
        #expect(cam.exposureMode == .locked && cam.iso == 17)
        let outOfRange = Self.code { () throws(CaptureError) in
            try cam.setExposureModeCustom(duration: CaptureDevice.currentExposureDuration, iso: 300)
        }
        #expect(outOfRange?.code == .invalidArgument && outOfRange?.message.contains("ISO 300.0 is outside") == true)
        try cam.setExposureMode(.continuousAutoExposure)
        #expect(cam.exposureMode == .continuousAutoExposure)
    }

    @Test func whatVividLacksIsUnsupportedInOneLine() throws {
        let cam = try VM.vividCameras(count: 1)[0]
        #expect(cam.exposureDuration == nil && cam.minExposureDuration == nil)
        #expect(
            !cam.isFocusModeSupported(.locked) && !cam.isFocusModeSupported(.continuousAutoFocus) && !cam.isFocusModeSupported(.autoFocus))
        #expect(cam.lensPosition.isNaN && !cam.isLockingFocusWithCustomLensPositionSupported)
        #expect(!cam.isWhiteBalanceModeSupported(.continuousAutoWhiteBalance) && cam.whiteBalanceTemperature == nil)
        #expect(!cam.hasTorch && !cam.isTorchModeSupported(.on) && cam.torchMode == .off)
        #expect(cam.maxAvailableVideoZoomFactor == 1 && cam.videoZoomFactor == 1)
        #expect(cam.minExposureTargetBias == 0 && cam.maxExposureTargetBias == 0)
        try cam.lockForConfiguration()
        defer { cam.unlockForConfiguration() }
        let cases: [(String, () throws(CaptureError) -> Void)] = [
            ("does not support focus mode continuousAutoFocus", { () throws(CaptureError) in try cam.setFocusMode(.continuousAutoFocus) }),
            ("does not support a custom lens position", { () throws(CaptureError) in try cam.setFocusModeLocked(lensPosition: 0.5) }),
            (
                "does not support a custom exposure duration",
                { () throws(CaptureError) in
                    try cam.setExposureModeCustom(duration: .milliseconds(10), iso: CaptureDevice.currentISO)
                }
            ),
            ("does not support an exposure target bias", { () throws(CaptureError) in try cam.setExposureTargetBias(0) }),
            (
                "does not support white balance mode continuousAutoWhiteBalance",
                { () throws(CaptureError) in
                    try cam.setWhiteBalanceMode(.continuousAutoWhiteBalance)
                }
            ),
            (
                "does not support a white balance temperature",
                { () throws(CaptureError) in try cam.setWhiteBalanceModeLocked(temperature: 5000) }
            ),
            ("does not support torch mode on", { () throws(CaptureError) in try cam.setTorchMode(.on) }),
            ("zoom factor 2.0 is outside", { () throws(CaptureError) in try cam.setVideoZoomFactor(2) }),
        ]
        for (words, attempt) in cases {
            let e = Self.code(attempt)
            #expect(e?.code == .invalidArgument && e?.message.contains(words) == true, "\(words): \(String(describing: e))")
            #expect(e?.message.contains("\n") == false)
        }
        try cam.setVideoZoomFactor(1)  // 1x is every camera's zoom
    }

    /// AVFoundation-style assignments on vivid inside the lock: the exposure mode reaches
    /// AUTOGAIN, a small format and a lower frame rate reach the running session. The rate is
    /// measured from the frames' sequence numbers and timestamps (vivid counts the periods it
    /// skips when late, so a loaded VM does not shorten the period): more than 1.6 times the
    /// fast rate's period where the fast rate gives 1.
    @Test func assignmentsInsideTheLockReachVividAndItsStream() async throws {
        let cam = try VM.vividCameras(count: 1)[0]
        let original = cam.activeFormat
        let small = try #require(
            cam.formats.filter { $0.pixelFormat == .yuyv && $0.maxFrameRate >= 30 }.min {
                $0.dimensions.width * $0.dimensions.height < $1.dimensions.width * $1.dimensions.height
            }, "vivid has no YUYV format at 30 fps or more: \(cam.formats)")
        let fast = FrameInterval(numerator: 1, denominator: 30)
        try #require(small.supports(fast), "vivid's \(small) has no 30 fps")
        let slow = try #require(
            small.videoSupportedFrameRateRanges.map(\.maxFrameDuration).filter { fast.seconds * 1.9 < $0.seconds && $0.seconds < 0.25 }
                .min(),
            "no rate in \(small) at least 1.9 times slower than 30 fps")

        try cam.lockForConfiguration()
        cam.exposureMode = .locked
        cam.activeFormat = small
        cam.activeVideoMinFrameDuration = fast
        cam.unlockForConfiguration()
        #expect(cam.exposureMode == .locked)
        #expect(try cam.value(of: .gainAutomatic) == 0)
        #expect(cam.activeFormat == small && cam.activeVideoMinFrameDuration == fast)

        let session = CaptureSession()
        session.sessionPreset = .inputPriority
        session.addInput(try CaptureDeviceInput(device: cam))
        let output = CaptureVideoDataOutput()
        let collector = FrameCollector()
        output.setSampleBufferDelegate(collector, queue: collector.queue)
        session.addOutput(output)
        try session.start()
        defer {
            session.stopRunning()
            try? cam.lockForConfiguration()
            cam.exposureMode = .continuousAutoExposure
            if let original { cam.activeFormat = original }
            cam.activeVideoMinFrameDuration = nil
            cam.unlockForConfiguration()
        }
        let fastFrames = await Self.frames(collector, after: .now(), count: 16)
        try cam.lockForConfiguration()
        cam.activeVideoMinFrameDuration = slow
        cam.activeVideoMaxFrameDuration = slow
        cam.unlockForConfiguration()
        let slowFrames = await Self.frames(collector, after: .now(), count: 16)
        let fastPeriod = Self.period(fastFrames), slowPeriod = Self.period(slowFrames)
        #expect(session.isRunning && cam.activeVideoMinFrameDuration == slow && cam.activeVideoMaxFrameDuration == slow)
        #expect(
            slowPeriod > fastPeriod * 1.6 && slowPeriod > slow.seconds * 0.8,
            "at \(slow) \(slowPeriod * 1000) ms a frame, at \(fast) \(fastPeriod * 1000) ms")
    }

    /// The first `count` frames stamped after `start`: (sequence, timestamp).
    static func frames(_ collector: FrameCollector, after start: CaptureTime, count: Int) async -> [(UInt64, CaptureTime)] {
        func after() -> [(UInt64, CaptureTime)] { zip(collector.sequences, collector.timestamps).filter { start < $0.1 } }
        let ok = await eventually(timeout: 60) { zip(collector.sequences, collector.timestamps).filter { start < $0.1 }.count >= count }
        #expect(ok, "fewer than \(count) frames in 60 s")
        return Array(after().prefix(count))
    }

    /// Seconds per frame from the first to the last of `frames`, counted by sequence number.
    static func period(_ frames: [(UInt64, CaptureTime)]) -> Double {
        guard let a = frames.first, let b = frames.last, b.0 > a.0 else { return 0 }
        return Double(b.1 - a.1) / 1e9 / Double(b.0 - a.0)
    }
}
