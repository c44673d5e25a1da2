// The set-up most in-process tests start from, written once.
import CaptureBackend
import Capture
import Foundation
import Testing

/// A virtual camera installed under a name no other test uses (the name given, plus a random
/// tag), and the device discovery hands out for it. Uninstall it when done.
public struct InstalledCamera: Sendable {
    /// The mode most tests need: YUYV 320x240 at 30 fps.
    public static let smallMode = VirtualCamera.Mode(.yuyv, width: 320, height: 240, frameRates: [30])

    public let camera: VirtualCamera
    public let device: CaptureDevice

    public init(_ name: String, modes: [VirtualCamera.Mode] = [smallMode], position: DevicePosition = .back) throws {
        camera = VirtualCamera(name: "\(name) \(UUID().uuidString.prefix(6))", position: position, formats: modes)
        VirtualCamera.install(camera)
        let uniqueID = camera.uniqueID
        do {
            device = try #require(CaptureDevice.devices(for: .video).first { $0.uniqueID == uniqueID })
        } catch {
            VirtualCamera.uninstall(camera)
            throw error
        }
    }

    /// A new input on the device.
    public func input() throws -> CaptureDeviceInput { try CaptureDeviceInput(device: device) }
    public func uninstall() { VirtualCamera.uninstall(camera) }
}

/// A virtual microphone installed under a name no other test uses (the name given, plus a
/// random tag), playing a tone of `frequency` Hz, and the device discovery hands out for it.
/// Uninstall it when done.
public struct InstalledMicrophone: Sendable {
    public let microphone: VirtualMicrophone
    public let device: CaptureDevice

    public init(_ name: String, frequency: Double = 1000) throws {
        microphone = VirtualMicrophone(name: "\(name) \(UUID().uuidString.prefix(8))", frequency: frequency)
        VirtualMicrophone.install(microphone)
        do {
            device = try #require(CaptureDevice.device(withUniqueID: microphone.uniqueID))
        } catch {
            VirtualMicrophone.uninstall(microphone)
            throw error
        }
    }

    /// A new input on the device.
    public func input() throws -> CaptureDeviceInput { try CaptureDeviceInput(device: device) }
    public func uninstall() { VirtualMicrophone.uninstall(microphone) }
}

/// An `InstalledCamera` and a session holding its input and the outputs asked for, added in
/// the order given: a video data output that delivers to a `FrameCollector` on its queue,
/// and/or a still image output. Nothing is started; uninstall the camera when done (one
/// made `on:` a camera uninstalls that camera).
public struct VirtualSessionRig: Sendable {
    public enum Output: Sendable { case video, still }

    public let installed: InstalledCamera
    public let session: CaptureSession
    private let videoOutput: CaptureVideoDataOutput?
    private let stillOutput: CaptureStillImageOutput?
    /// Receives the video data output's frames (idle without `.video`).
    public let collector = FrameCollector()

    public var camera: VirtualCamera { installed.camera }
    public var device: CaptureDevice { installed.device }
    /// The video data output; only for a rig made with `.video`.
    public var output: CaptureVideoDataOutput {
        guard let videoOutput else { preconditionFailure("VirtualSessionRig made without .video") }
        return videoOutput
    }
    /// The still image output; only for a rig made with `.still`.
    public var still: CaptureStillImageOutput {
        guard let stillOutput else { preconditionFailure("VirtualSessionRig made without .still") }
        return stillOutput
    }

    /// A session on a new `InstalledCamera(name, modes:, position:)`.
    public init(
        _ name: String, modes: [VirtualCamera.Mode] = [InstalledCamera.smallMode], position: DevicePosition = .back,
        outputs: [Output] = [.video], videoSettings: CaptureVideoDataOutput.VideoSettings = .init(),
        discardsLate: Bool = true
    ) throws {
        let installed = try InstalledCamera(name, modes: modes, position: position)
        do {
            try self.init(on: installed, outputs: outputs, videoSettings: videoSettings, discardsLate: discardsLate)
        } catch {
            installed.uninstall()
            throw error
        }
    }

    /// A session on a camera already installed.
    /// - Parameters:
    ///   - videoSettings, discardsLate: the video data output's `videoSettings` and
    ///     `alwaysDiscardsLateVideoFrames`.
    public init(
        on installed: InstalledCamera, outputs: [Output] = [.video],
        videoSettings: CaptureVideoDataOutput.VideoSettings = .init(), discardsLate: Bool = true
    ) throws {
        self.installed = installed
        session = CaptureSession()
        session.addInput(try installed.input())
        var video: CaptureVideoDataOutput?, still: CaptureStillImageOutput?
        for kind in outputs {
            switch kind {
            case .video:
                let output = CaptureVideoDataOutput()
                output.videoSettings = videoSettings
                output.alwaysDiscardsLateVideoFrames = discardsLate
                output.setSampleBufferDelegate(collector, queue: collector.queue)
                session.addOutput(output)
                video = output
            case .still:
                let output = CaptureStillImageOutput()
                session.addOutput(output)
                still = output
            }
        }
        videoOutput = video
        stillOutput = still
    }

    public func uninstall() { installed.uninstall() }
}
