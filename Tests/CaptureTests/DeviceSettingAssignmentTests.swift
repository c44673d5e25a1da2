// Device settings assigned as AVFoundation code assigns them, between lockForConfiguration() and
// unlockForConfiguration(), on the virtual camera: they take effect (read back, the controls
// underneath, the session's frame rate), and a broken rule traps with a message naming it (in a
// child process: an exit test).
import CaptureBackend
import CaptureVirtual
import Capture
import CaptureTestSupport
import Foundation
import Testing

@Suite(.serialized) struct DeviceSettingAssignmentTests {
    /// Two sizes, each at 30 and 15 fps.
    static let modes: [VirtualCamera.Mode] = [
        .init(.yuyv, width: 320, height: 240, frameRates: [30, 15]),
        .init(.yuyv, width: 160, height: 120, frameRates: [30, 15]),
    ]

    static func camera(_ name: String) throws -> (CaptureDevice, VirtualCamera) {
        let installed = try InstalledCamera("Assign \(name)", modes: modes)
        return (installed.device, installed.camera)
    }

    static func error(_ body: () throws(CaptureError) -> Void) -> CaptureError? {
        do { try body(); return nil } catch { return error }
    }

    // MARK: Taking effect

    /// The AVFoundation way, written as an iOS developer writes it: every setting assigned
    /// inside the lock reads back, and the device's controls say the same.
    @Test func assignmentsInsideTheLockTakeEffect() throws {
        let (device, cam) = try Self.camera("effect")
        defer { VirtualCamera.uninstall(cam) }
        let small = try #require(device.formats.first { $0.dimensions == VideoDimensions(width: 160, height: 120) })
        #expect(device.focusMode == .continuousAutoFocus && device.exposureMode == .continuousAutoExposure)
        #expect(device.whiteBalanceMode == .continuousAutoWhiteBalance && device.torchMode == .off)

        try device.lockForConfiguration()
        device.focusMode = .locked
        device.exposureMode = .locked
        device.whiteBalanceMode = .locked
        device.videoZoomFactor = 2
        device.torchMode = .on
        device.activeFormat = small
        device.activeVideoMinFrameDuration = FrameInterval(numerator: 1, denominator: 15)
        device.activeVideoMaxFrameDuration = FrameInterval(numerator: 1, denominator: 15)
        device.unlockForConfiguration()

        #expect(device.focusMode == .locked && device.exposureMode == .locked && device.whiteBalanceMode == .locked)
        #expect(try device.value(of: .focusAutomatic) == 0)
        #expect(try device.value(of: .exposureMode) == 1)  // V4L2 manual
        #expect(try device.value(of: .whiteBalanceAutomatic) == 0)
        #expect(device.videoZoomFactor == 2)
        #expect(try device.value(of: .zoom) == 200)
        #expect(device.torchMode == .on && device.isTorchActive && device.torchLevel == 1)
        #expect(device.activeFormat == small)
        #expect(device.activeVideoMinFrameDuration == FrameInterval(numerator: 1, denominator: 15))
        #expect(device.activeVideoMaxFrameDuration == FrameInterval(numerator: 1, denominator: 15))

        // Back, the same way; nil frame durations go back to the defaults (the highest rate).
        try device.lockForConfiguration()
        device.focusMode = .continuousAutoFocus
        device.exposureMode = .continuousAutoExposure
        device.whiteBalanceMode = .continuousAutoWhiteBalance
        device.videoZoomFactor = 1
        device.torchMode = .off
        device.activeVideoMinFrameDuration = nil
        device.activeVideoMaxFrameDuration = nil
        device.unlockForConfiguration()
        #expect(device.focusMode == .continuousAutoFocus)
        #expect(try device.value(of: .focusAutomatic) == 1)
        #expect(device.exposureMode == .continuousAutoExposure && device.whiteBalanceMode == .continuousAutoWhiteBalance)
        #expect(device.videoZoomFactor == 1 && device.torchMode == .off && device.torchLevel == 0)
        #expect(device.activeVideoMinFrameDuration == FrameInterval(numerator: 1, denominator: 30))
        #expect(device.activeVideoMaxFrameDuration == FrameInterval(numerator: 1, denominator: 30))
    }

    /// The longest frame duration: its default is the rate in use; a longer one is kept; a
    /// shorter one raises the rate; a new minimum above it takes it along.
    @Test func maxFrameDurationKeepsTheMinimumAtOrBelowIt() throws {
        let (device, cam) = try Self.camera("max")
        defer { VirtualCamera.uninstall(cam) }
        let fast = FrameInterval(numerator: 1, denominator: 30), slow = FrameInterval(numerator: 1, denominator: 15)
        try device.lockForConfiguration()
        defer { device.unlockForConfiguration() }
        #expect(device.activeVideoMinFrameDuration == fast && device.activeVideoMaxFrameDuration == fast)
        device.activeVideoMaxFrameDuration = slow
        #expect(device.activeVideoMinFrameDuration == fast && device.activeVideoMaxFrameDuration == slow)
        device.activeVideoMinFrameDuration = slow
        device.activeVideoMaxFrameDuration = fast  // below the minimum: the rate goes up to it
        #expect(device.activeVideoMinFrameDuration == fast && device.activeVideoMaxFrameDuration == fast)
        device.activeVideoMaxFrameDuration = fast
        device.activeVideoMinFrameDuration = slow  // above the maximum: the maximum follows
        #expect(device.activeVideoMaxFrameDuration == slow)
        // The throwing form says what is wrong.
        let e = Self.error { () throws(CaptureError) in
            try device.setActiveVideoMaxFrameDuration(FrameInterval(numerator: 1, denominator: 7))
        }
        #expect(e?.code == .unsupportedFormat && e?.message.contains("videoSupportedFrameRateRanges") == true, "\(String(describing: e))")
    }

    /// Torch levels, as `setTorchModeOn(level:)`: the intensity control at that fraction; the
    /// levels AVFoundation refuses are refused.
    @Test func torchLevels() throws {
        let (device, cam) = try Self.camera("torch")
        defer { VirtualCamera.uninstall(cam) }
        #expect(device.isTorchAvailable && device.torchLevel == 0)
        try device.lockForConfiguration()
        defer { device.unlockForConfiguration() }
        try device.setTorchModeOn(level: 0.5)
        #expect(device.torchMode == .on && device.torchLevel == 0.5)
        #expect(try device.value(of: .flashTorchIntensity) == 200)
        try device.setTorchModeOn(level: CaptureDevice.maxAvailableTorchLevel)
        #expect(device.torchLevel == 1)
        try device.setTorchModeOn(level: 0.01)  // below the driver's lowest step: its lowest
        #expect(device.torchLevel == 25 / 400 && device.torchMode == .on)
        for level: Float in [0, -1, 1.5, .nan] {
            let e = Self.error { () throws(CaptureError) in try device.setTorchModeOn(level: level) }
            #expect(e?.code == .invalidArgument && e?.message.contains("outside 0...1") == true, "\(level): \(String(describing: e))")
        }
        device.unlockForConfiguration()
        let e = Self.error { () throws(CaptureError) in try device.setTorchModeOn(level: 1) }
        #expect(e?.code == .invalidState && e?.message.contains("call lockForConfiguration() first") == true)
        try device.lockForConfiguration()
    }

    /// V4L2 has no focus or metering point: the queries say no, the point reads the centre, and
    /// the throwing setters say which query to ask.
    @Test func pointsOfInterestAreUnsupported() throws {
        let (device, cam) = try Self.camera("points")
        defer { VirtualCamera.uninstall(cam) }
        #expect(!device.isFocusPointOfInterestSupported && !device.isExposurePointOfInterestSupported)
        #expect(device.focusPointOfInterest == CGPoint(x: 0.5, y: 0.5) && device.exposurePointOfInterest == CGPoint(x: 0.5, y: 0.5))
        try device.lockForConfiguration()
        defer { device.unlockForConfiguration() }
        let f = Self.error { () throws(CaptureError) in try device.setFocusPointOfInterest(CGPoint(x: 0.2, y: 0.2)) }
        #expect(f?.code == .invalidArgument && f?.message.contains("check isFocusPointOfInterestSupported first") == true)
        let x = Self.error { () throws(CaptureError) in try device.setExposurePointOfInterest(CGPoint(x: 0.2, y: 0.2)) }
        #expect(x?.code == .invalidArgument && x?.message.contains("check isExposurePointOfInterestSupported first") == true)
    }

    /// `activeVideoMinFrameDuration` assigned while the session runs: the frames come at the
    /// new rate. Measured from the frames' own sequence numbers and timestamps after the change
    /// (the period over 30 frames: lost frames do not shorten it, and a loaded machine only
    /// lengthens it), so 15 fps must give more than 55 ms where 30 fps gives 33.3 ms; back at
    /// the default, some 10-frame stretch must run faster than 50 ms a frame.
    @Test(.timeLimit(.minutes(2))) func frameDurationAssignedWhileRunningSetsTheFrameRate() async throws {
        let (device, cam) = try Self.camera("rate")
        defer { VirtualCamera.uninstall(cam) }
        let session = CaptureSession()
        session.addInput(try CaptureDeviceInput(device: device))
        let output = CaptureVideoDataOutput()
        let collector = FrameCollector()
        output.setSampleBufferDelegate(collector, queue: collector.queue)
        session.addOutput(output)
        try session.start()
        defer { session.stopRunning() }
        #expect(await collector.eventually(frames: 3))

        try device.lockForConfiguration()
        device.activeVideoMinFrameDuration = FrameInterval(numerator: 1, denominator: 15)
        device.activeVideoMaxFrameDuration = FrameInterval(numerator: 1, denominator: 15)
        device.unlockForConfiguration()
        let slow = try await Self.frames(collector, after: .now(), count: 31)
        let slowPeriod = Self.period(slow)
        #expect(slowPeriod > 0.055, "15 fps gave \(slowPeriod * 1000) ms a frame")
        #expect(session.isRunning && device.activeVideoMinFrameDuration == FrameInterval(numerator: 1, denominator: 15))

        try device.lockForConfiguration()
        device.activeVideoMinFrameDuration = nil
        device.unlockForConfiguration()
        let fast = try await Self.frames(collector, after: .now(), count: 40)
        let fastest = stride(from: 0, through: fast.count - 11, by: 1).map { Self.period(Array(fast[$0...($0 + 10)])) }.min() ?? 1
        #expect(fastest < 0.050, "back at 30 fps, the fastest 10 frames took \(fastest * 1000) ms a frame")
    }

    /// The first `count` frames stamped after `start`: (sequence, timestamp).
    static func frames(_ collector: FrameCollector, after start: CaptureTime, count: Int) async throws -> [(UInt64, CaptureTime)] {
        var got: [(UInt64, CaptureTime)] = []
        let ok = await eventually(timeout: 30) {
            zip(collector.sequences, collector.timestamps).filter { start < $0.1 }.count >= count
        }
        #expect(ok, "fewer than \(count) frames in 30 s")
        got = zip(collector.sequences, collector.timestamps).filter { start < $0.1 }
        return Array(got.prefix(count))
    }

    /// Seconds per frame from the first to the last of `frames`, counted by sequence number.
    static func period(_ frames: [(UInt64, CaptureTime)]) -> Double {
        guard let a = frames.first, let b = frames.last, b.0 > a.0 else { return 0 }
        return Double(b.1 - a.1) / 1e9 / Double(b.0 - a.0)
    }

    // MARK: Broken rules trap, as AVFoundation raises

    /// Each broken rule, done in a child process: it traps, and the message names the rule.
    @Test(arguments: [
        ("focusMode without the lock", "call lockForConfiguration() before setting focusMode"),
        ("activeVideoMaxFrameDuration without the lock", "call lockForConfiguration() before setting activeVideoMaxFrameDuration"),
        ("focusMode autoFocus", "focusMode .autoFocus is not supported by Assign trap: check isFocusModeSupported(_:) first"),
        ("torchMode auto", "torchMode .auto is not supported by Assign trap: check isTorchModeSupported(_:) first"),
        (
            "videoZoomFactor 5",
            "videoZoomFactor 5.0 is not supported by Assign trap: check minAvailableVideoZoomFactor...maxAvailableVideoZoomFactor first"
        ),
        (
            "activeVideoMinFrameDuration 1/7",
            "activeVideoMinFrameDuration 1/7 s is not supported by Assign trap: check activeFormat.videoSupportedFrameRateRanges first"
        ),
        ("activeFormat of another camera", "activeFormat MJPG 1920x1080 @ 30 fps is not supported by Assign trap: check formats first"),
        (
            "focusPointOfInterest",
            "focusPointOfInterest (0.3, 0.3) is not supported by Assign trap: check isFocusPointOfInterestSupported first"
        ),
    ])
    func aBrokenRuleTrapsNamingIt(_ rule: String, _ message: String) async throws {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) { [rule] in
            Self.breakRule(rule)
        }
        let stderr = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
        #expect(stderr.contains("Fatal error: \(message)"), "\(rule): \(stderr.prefix(600))")
    }

    /// Runs in the exit test's child: makes the camera and breaks `rule`.
    static func breakRule(_ rule: String) {
        let cam = VirtualCamera(name: "Assign trap", position: .back, formats: modes)
        VirtualCamera.install(cam)
        guard let device = CaptureDevice.device(withUniqueID: cam.uniqueID) else { return }
        if !rule.contains("without the lock") { try? device.lockForConfiguration() }
        switch rule {
        case "focusMode without the lock": device.focusMode = .locked
        case "activeVideoMaxFrameDuration without the lock": device.activeVideoMaxFrameDuration = nil
        case "focusMode autoFocus": device.focusMode = .autoFocus
        case "torchMode auto": device.torchMode = .auto
        case "videoZoomFactor 5": device.videoZoomFactor = 5
        case "activeVideoMinFrameDuration 1/7": device.activeVideoMinFrameDuration = FrameInterval(numerator: 1, denominator: 7)
        case "activeFormat of another camera":
            device.activeFormat = CaptureDevice.Format(
                pixelFormat: .mjpeg, dimensions: VideoDimensions(width: 1920, height: 1080),
                videoSupportedFrameRateRanges: [
                    FrameRateRange(
                        minFrameDuration: FrameInterval(numerator: 1, denominator: 30),
                        maxFrameDuration: FrameInterval(numerator: 1, denominator: 30))
                ])
        case "focusPointOfInterest": device.focusPointOfInterest = CGPoint(x: 0.3, y: 0.3)
        default: return
        }
    }

    /// The same rules through the throwing setters: no trap, a typed error, nothing changed.
    @Test func theThrowingSettersReportTheSameRules() throws {
        let (device, cam) = try Self.camera("throwing")
        defer { VirtualCamera.uninstall(cam) }
        let withoutLock = Self.error { () throws(CaptureError) in try device.setActiveVideoMaxFrameDuration(nil) }
        #expect(withoutLock?.code == .invalidState && withoutLock?.message.contains("call lockForConfiguration() first") == true)
        try device.lockForConfiguration()
        defer { device.unlockForConfiguration() }
        #expect(Self.error { () throws(CaptureError) in try device.setFocusMode(.autoFocus) }?.code == .invalidArgument)
        #expect(Self.error { () throws(CaptureError) in try device.setTorchMode(.auto) }?.code == .invalidArgument)
        #expect(Self.error { () throws(CaptureError) in try device.setVideoZoomFactor(5) }?.code == .invalidArgument)
        #expect(
            Self.error { () throws(CaptureError) in try device.setActiveVideoMinFrameDuration(FrameInterval(numerator: 1, denominator: 7))
            }?
            .code == .unsupportedFormat)
        #expect(device.focusMode == .continuousAutoFocus && device.torchMode == .off && device.videoZoomFactor == 1)
        #expect(device.activeVideoMinFrameDuration == FrameInterval(numerator: 1, denominator: 30))
    }

    /// A device that went away is a fault, not a broken rule: assigning to it inside the lock
    /// does not trap (checked in a child process, so that a trap fails only this test).
    @Test func assigningToADisconnectedDeviceDoesNotTrap() async {
        await #expect(processExitsWith: .success) {
            let cam = VirtualCamera(
                name: "Assign gone", position: .back, formats: DeviceSettingAssignmentTests.modes)
            VirtualCamera.install(cam)
            guard let device = CaptureDevice.device(withUniqueID: cam.uniqueID) else { exit(3) }
            do { try device.lockForConfiguration() } catch { exit(4) }
            cam.disconnect()
            device.focusMode = .locked
            device.exposureMode = .locked
            device.torchMode = .on
            device.videoZoomFactor = 3
            device.activeVideoMinFrameDuration = FrameInterval(numerator: 1, denominator: 15)
            device.activeVideoMaxFrameDuration = FrameInterval(numerator: 1, denominator: 15)
            exit(0)
        }
    }
}
