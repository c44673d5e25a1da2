// Typed camera controls (focus, exposure, ISO, bias, white balance, zoom, torch) on the virtual
// camera: round trips, the picture's response to exposure and ISO, unsupported modes, the lock.
import CaptureImaging
import CaptureBackend
import CaptureVirtual
import Capture
import CaptureTestSupport
import Foundation
import Testing

@Suite(.serialized) struct CameraControlsTests {
    private static func camera(_ name: String) throws -> (CaptureDevice, VirtualCamera) {
        let installed = try InstalledCamera("Controls \(name)")
        return (installed.device, installed.camera)
    }

    private static func code(_ body: () throws(CaptureError) -> Void) -> CaptureError? {
        do { try body(); return nil } catch { return error }
    }

    @Test func changesWithoutTheLockThrowSayingToLockFirst() throws {
        let (device, cam) = try Self.camera("lock")
        defer { VirtualCamera.uninstall(cam) }
        let attempts: [(String, () throws(CaptureError) -> Void)] = [
            ("focus", { () throws(CaptureError) in try device.setFocusMode(.locked) }),
            ("lens", { () throws(CaptureError) in try device.setFocusModeLocked(lensPosition: 0.5) }),
            ("exposure", { () throws(CaptureError) in try device.setExposureMode(.locked) }),
            ("custom", { () throws(CaptureError) in try device.setExposureModeCustom(duration: .milliseconds(10), iso: 200) }),
            ("bias", { () throws(CaptureError) in try device.setExposureTargetBias(1) }),
            ("wb", { () throws(CaptureError) in try device.setWhiteBalanceMode(.locked) }),
            ("temperature", { () throws(CaptureError) in try device.setWhiteBalanceModeLocked(temperature: 5000) }),
            ("zoom", { () throws(CaptureError) in try device.setVideoZoomFactor(2) }),
            ("torch", { () throws(CaptureError) in try device.setTorchMode(.on) }),
        ]
        for (name, attempt) in attempts {
            let e = Self.code(attempt)
            #expect(e?.code == .invalidState, "\(name): \(String(describing: e))")
            #expect(e?.message.contains("call lockForConfiguration() first") == true, "\(name): \(String(describing: e))")
            #expect(e?.message.contains("\n") == false)
        }
        // Nothing changed.
        #expect(device.focusMode == .continuousAutoFocus && device.exposureMode == .continuousAutoExposure)
        #expect(device.torchMode == .off && device.videoZoomFactor == 1)
        // After unlocking, the lock is needed again.
        try device.lockForConfiguration()
        try device.setTorchMode(.on)
        device.unlockForConfiguration()
        #expect(Self.code { () throws(CaptureError) in try device.setTorchMode(.off) }?.code == .invalidState)
        #expect(device.torchMode == .on)
    }

    @Test func everyTypedControlRoundTripsOnTheVirtualCamera() throws {
        let (device, cam) = try Self.camera("round trip")
        defer { VirtualCamera.uninstall(cam) }
        try device.lockForConfiguration()
        defer { device.unlockForConfiguration() }

        // Focus
        #expect(device.isFocusModeSupported(.locked) && device.isFocusModeSupported(.continuousAutoFocus))
        #expect(device.focusMode == .continuousAutoFocus)
        try device.setFocusMode(.locked)
        #expect(device.focusMode == .locked)
        #expect(device.isLockingFocusWithCustomLensPositionSupported)
        try device.setFocusModeLocked(lensPosition: 0.6)
        #expect(abs(device.lensPosition - 0.6) < 0.01 && device.focusMode == .locked)
        #expect(try device.value(of: .focusPosition) == 153)  // 0.6 of 0...255
        try device.setFocusModeLocked(lensPosition: CaptureDevice.currentLensPosition)
        #expect(abs(device.lensPosition - 0.6) < 0.01)
        try device.setFocusMode(.continuousAutoFocus)
        #expect(device.focusMode == .continuousAutoFocus)

        // Exposure
        for mode in CaptureDevice.ExposureMode.allCases { #expect(device.isExposureModeSupported(mode), "\(mode)") }
        #expect(device.exposureMode == .continuousAutoExposure)
        #expect(device.minExposureDuration == .microseconds(100) && device.maxExposureDuration == .seconds(1))
        #expect(device.minISO == 100 && device.maxISO == 1600)
        try device.setExposureModeCustom(duration: .milliseconds(20), iso: 400)
        #expect(device.exposureMode == .custom)
        #expect(device.exposureDuration == .milliseconds(20) && device.iso == 400)
        #expect(try device.value(of: .exposureMode) == 1)
        #expect(try device.value(of: .exposureTime) == 200)
        try device.setExposureModeCustom(duration: CaptureDevice.currentExposureDuration, iso: 800)
        #expect(device.exposureDuration == .milliseconds(20) && device.iso == 800)
        try device.setExposureMode(.locked)
        #expect(device.exposureMode == .locked && device.iso == 800)
        try device.setExposureMode(.continuousAutoExposure)
        #expect(device.exposureMode == .continuousAutoExposure)
        #expect(try device.value(of: .exposureMode) == 3)  // aperture priority: the virtual camera's (UVC's) auto mode
        #expect(device.minExposureTargetBias == -2 && device.maxExposureTargetBias == 2 && device.exposureTargetBias == 0)
        try device.setExposureTargetBias(1.4)  // nearest half stop
        #expect(device.exposureTargetBias == 1.5)

        // White balance
        #expect(device.isWhiteBalanceModeSupported(.locked) && device.isWhiteBalanceModeSupported(.continuousAutoWhiteBalance))
        #expect(device.whiteBalanceMode == .continuousAutoWhiteBalance)
        try device.setWhiteBalanceModeLocked(temperature: 5200)
        #expect(device.whiteBalanceMode == .locked && device.whiteBalanceTemperature == 5200)
        #expect(device.whiteBalanceTemperatureRange == 2800...6500)
        try device.setWhiteBalanceMode(.continuousAutoWhiteBalance)
        #expect(device.whiteBalanceMode == .continuousAutoWhiteBalance)

        // Zoom: 100...400 on the control is 1x...4x.
        #expect(device.minAvailableVideoZoomFactor == 1 && device.maxAvailableVideoZoomFactor == 4)
        try device.setVideoZoomFactor(2.5)
        #expect(device.videoZoomFactor == 2.5)
        #expect(try device.value(of: .zoom) == 250)

        // Torch
        #expect(device.hasTorch && device.isTorchModeSupported(.on) && device.isTorchModeSupported(.off))
        try device.setTorchMode(.on)
        #expect(device.torchMode == .on && device.isTorchActive)
        try device.setTorchMode(.off)
        #expect(device.torchMode == .off)
    }

    @Test func unsupportedModesAndOutOfRangeValuesSaySoInOneLine() throws {
        let (device, cam) = try Self.camera("unsupported")
        defer { VirtualCamera.uninstall(cam) }
        try device.lockForConfiguration()
        defer { device.unlockForConfiguration() }
        #expect(
            !device.isTorchModeSupported(.auto) && !device.isFocusModeSupported(.autoFocus)
                && !device.isWhiteBalanceModeSupported(.autoWhiteBalance))
        let cases: [(String, String, () throws(CaptureError) -> Void)] = [
            (
                "torch", "does not support torch mode auto: check isTorchModeSupported(_:) first",
                { () throws(CaptureError) in try device.setTorchMode(.auto) }
            ),
            (
                "focus", "does not support focus mode autoFocus: check isFocusModeSupported(_:) first",
                { () throws(CaptureError) in try device.setFocusMode(.autoFocus) }
            ),
            (
                "wb", "does not support white balance mode autoWhiteBalance",
                { () throws(CaptureError) in try device.setWhiteBalanceMode(.autoWhiteBalance) }
            ),
            (
                "iso", "ISO 50.0 is outside",
                { () throws(CaptureError) in try device.setExposureModeCustom(duration: .milliseconds(10), iso: 50) }
            ),
            (
                "duration", "exposure duration 2.0 seconds is outside",
                { () throws(CaptureError) in try device.setExposureModeCustom(duration: .seconds(2), iso: 100) }
            ),
            ("lens", "lens position 1.5 is outside 0...1", { () throws(CaptureError) in try device.setFocusModeLocked(lensPosition: 1.5) }),
            ("zoom", "zoom factor 5.0 is outside", { () throws(CaptureError) in try device.setVideoZoomFactor(5) }),
            ("bias", "exposure bias 3.0 EV is outside", { () throws(CaptureError) in try device.setExposureTargetBias(3) }),
            (
                "temperature", "white balance temperature 9000.0 K is outside",
                { () throws(CaptureError) in try device.setWhiteBalanceModeLocked(temperature: 9000) }
            ),
        ]
        for (name, words, attempt) in cases {
            let e = Self.code(attempt)
            #expect(e?.code == .invalidArgument, "\(name): \(String(describing: e))")
            #expect(e?.message.contains(words) == true, "\(name): \(e?.message ?? "no error")")
            #expect(e?.message.contains("\n") == false)
        }
        // A refused custom exposure changed nothing.
        #expect(device.exposureMode == .continuousAutoExposure && device.iso == 100)
    }

    /// Mean luma of the white bar (sensor row 3/4 down) in a still.
    private static func whiteBar(_ still: CaptureStillImageOutput, _ connection: CaptureConnection) async throws -> Int {
        // The setting reaches the next frames; take a few so the still surely shows it.
        var level = 0
        for _ in 0..<3 {
            let jpeg = try #require(try await still.captureStillImage(from: connection).jpegData)
            let image = try #require(TestJPEG.decode(jpeg))
            let p = image.pixel(x: image.width / 16, y: image.height * 3 / 4)
            level = (p.r + p.g + p.b) / 3
        }
        return level
    }

    @Test func exposureTimeISOAndBiasChangeThePicture() async throws {
        let (device, cam) = try Self.camera("picture")
        defer { VirtualCamera.uninstall(cam) }
        let session = CaptureSession()
        session.addInput(try CaptureDeviceInput(device: device))
        let still = CaptureStillImageOutput()
        session.addOutput(still)
        try session.start()
        defer { session.stopRunning() }
        let c = try #require(still.connection(with: .video))
        let nominal = try await Self.whiteBar(still, c)
        #expect(abs(nominal - 191) <= 12, "75 % white at auto exposure: \(nominal)")
        try device.lockForConfiguration()
        defer { device.unlockForConfiguration() }
        // Half the nominal light (16.7 ms at ISO 100): about half as bright.
        try device.setExposureModeCustom(duration: .microseconds(16_700), iso: 100)
        let dark = try await Self.whiteBar(still, c)
        #expect(abs(dark - nominal / 2) <= 16, "half exposure: \(dark), nominal \(nominal)")
        // Same time, ISO 200: back to nominal.
        try device.setExposureModeCustom(duration: CaptureDevice.currentExposureDuration, iso: 200)
        let iso200 = try await Self.whiteBar(still, c)
        #expect(abs(iso200 - nominal) <= 16, "half time, double ISO: \(iso200), nominal \(nominal)")
        // ISO 800: clipped white.
        try device.setExposureModeCustom(duration: CaptureDevice.currentExposureDuration, iso: 800)
        #expect(try await Self.whiteBar(still, c) >= 250)
        // Back to auto with -1 EV bias: about half.
        try device.setExposureMode(.continuousAutoExposure)
        try device.setExposureTargetBias(-1)
        let minus1 = try await Self.whiteBar(still, c)
        #expect(abs(minus1 - nominal / 2) <= 16, "-1 EV: \(minus1), nominal \(nominal)")
    }
}
