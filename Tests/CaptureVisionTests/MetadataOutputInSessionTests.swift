import Capture
import CaptureTestSupport
import CaptureVision
import Testing

/// The metadata output is one of the session's outputs, as `AVCaptureMetadataOutput` is an
/// `AVCaptureOutput`: added through `CaptureOutput`'s own `canAddOutput`/`addOutput`, listed in
/// `outputs` beside the core's, connected to the camera, and gone again with `removeOutput`.
@Suite struct MetadataOutputInSessionTests {
    @Test func theMetadataOutputIsOneOfTheSessionsOutputs() throws {
        let camera = try InstalledCamera("metadata in outputs")
        defer { camera.uninstall() }
        let session = CaptureSession()
        session.addInput(try camera.input())
        let data = CaptureVideoDataOutput()
        session.addOutput(data)
        let metadata = CaptureMetadataOutput()
        let output: CaptureOutput = metadata
        #expect(session.canAddOutput(output))
        session.addOutput(output)
        #expect(session.outputs.count == 2 && session.outputs.last === metadata)
        #expect(metadata.session === session && metadata.connection(with: .video) != nil)
        // Its types are the camera's session's to offer, once it is in one (as AVFoundation's).
        #expect(metadata.availableMetadataObjectTypes.contains(.qr))
        #expect(!session.canAddOutput(metadata) && !CaptureSession().canAddOutput(metadata))
        session.removeOutput(metadata)
        #expect(session.outputs.count == 1 && metadata.session == nil && metadata.connections.isEmpty)
        #expect(metadata.availableMetadataObjectTypes.isEmpty)
    }
}
