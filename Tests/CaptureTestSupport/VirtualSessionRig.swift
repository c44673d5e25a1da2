// The set-up most in-process tests start from, written once.
import CaptureBackend
import Capture
import Foundation
import Testing

/// A virtual camera under a name no other test uses (installed: uninstall it when done), found
/// as a device, and a session holding its input and a video data output that delivers to a
/// `FrameCollector` on its queue. Nothing is started.
public struct VirtualSessionRig {
    public let camera: VirtualCamera
    public let device: CaptureDevice
    public let session: CaptureSession
    public let output: CaptureVideoDataOutput
    public let collector: FrameCollector

    public init(
        _ name: String, modes: [VirtualCamera.Mode], position: DevicePosition = .external,
        videoSettings: CaptureVideoDataOutput.VideoSettings = .init()
    ) throws {
        camera = VirtualCamera(name: "\(name) \(UUID().uuidString.prefix(6))", position: position, formats: modes)
        VirtualCamera.install(camera)
        let uniqueID = camera.uniqueID
        device = try #require(CaptureDevice.devices(for: .video).first { $0.uniqueID == uniqueID })
        session = CaptureSession()
        session.addInput(try CaptureDeviceInput(device: device))
        output = CaptureVideoDataOutput()
        output.videoSettings = videoSettings
        collector = FrameCollector()
        output.setSampleBufferDelegate(collector, queue: collector.queue)
        session.addOutput(output)
    }
}
