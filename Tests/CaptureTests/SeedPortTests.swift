// The seeds' own shapes, as the porting guide ports them, on the virtual pair and the virtual
// microphone: their device lookups, and seed 004's one delegate for video and audio.
import CaptureVirtual
import CaptureBackend
import Capture
import CaptureTestSupport
import Foundation
import Testing

/// Seed 004's class as the porting guide writes it: one object is the delegate of both data
/// outputs and tells them apart by connection. It has no `didDrop` of its own: that it compiles
/// at all is half the test.
final class SeedFourCapture: CaptureVideoDataOutputSampleBufferDelegate, CaptureAudioDataOutputSampleBufferDelegate,
    @unchecked Sendable
{
    let captureSession = CaptureSession()
    var currentVideoDeviceInput: CaptureDeviceInput?
    var videoConnection: CaptureConnection?
    private let lock = NSLock()
    private var _video = 0
    private var _audio = 0
    private var _misfiled = 0
    var video: Int { lock.withLock { _video } }
    var audio: Int { lock.withLock { _audio } }
    /// Buffers told apart wrongly: audio on the video connection or video on another one.
    var misfiled: Int { lock.withLock { _misfiled } }

    func setupCaptureVideo(front: CaptureDevice?, microphone: CaptureDevice?) throws {
        if let front { currentVideoDeviceInput = try CaptureDeviceInput(device: front) }
        let audioDeviceInput = try microphone.map { try CaptureDeviceInput(device: $0) }
        if let input = currentVideoDeviceInput, captureSession.canAddInput(input) { captureSession.addInput(input) }
        if let input = audioDeviceInput, captureSession.canAddInput(input) { captureSession.addInput(input) }
        let videoOutput = CaptureVideoDataOutput()
        videoOutput.setSampleBufferDelegate(self, queue: DispatchQueue(label: "Video Capture Queue"))
        let audioOutput = CaptureAudioDataOutput()
        audioOutput.setSampleBufferDelegate(self, queue: DispatchQueue(label: "Audio Capture Queue"))
        if captureSession.canAddOutput(videoOutput) { captureSession.addOutput(videoOutput) }
        if captureSession.canAddOutput(audioOutput) { captureSession.addOutput(audioOutput) }
        videoConnection = videoOutput.connection(with: .video)
        try captureSession.start()
    }

    func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
        lock.withLock {
            if videoConnection === connection {
                _video += 1
                if sampleBuffer.mediaType != .video { _misfiled += 1 }
            } else {
                _audio += 1
                if sampleBuffer.mediaType != .audio { _misfiled += 1 }
            }
        }
    }
}

/// The same shape with its own `didDrop`, which is then the one both outputs call.
final class SeedFourCaptureWithDrops: CaptureVideoDataOutputSampleBufferDelegate, CaptureAudioDataOutputSampleBufferDelegate,
    @unchecked Sendable
{
    func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {}
    func captureOutput(_ output: CaptureOutput, didDrop drop: DroppedFrames, from connection: CaptureConnection) {}
}

@Suite(.serialized) struct SeedPortTests {
    @Test func seedFourDelegateReceivesVideoAndAudio() throws {
        let pair = VirtualCamera.installDefaultPair()
        defer { VirtualCamera.uninstall(pair.front); VirtualCamera.uninstall(pair.back) }
        let mic = VirtualMicrophone(name: "Seed 004 Mic")
        VirtualMicrophone.install(mic)
        defer { VirtualMicrophone.uninstall(mic) }
        let front = try #require(CaptureDevice.devices(for: .video).first { $0.uniqueID == pair.front.uniqueID })
        let microphone = try #require(CaptureDevice.devices(for: .audio).first { $0.uniqueID == mic.uniqueID })
        let seed = SeedFourCapture()
        try seed.setupCaptureVideo(front: front, microphone: microphone)
        defer { seed.captureSession.stopRunning() }
        #expect(seed.videoConnection != nil)
        #expect(
            waitUntil(timeout: 20) { seed.video >= 5 && seed.audio >= 5 },
            "video \(seed.video), audio \(seed.audio): one delegate must get both")
        #expect(seed.misfiled == 0)

        // The shape with its own didDrop is the delegate of both outputs too.
        let both = SeedFourCaptureWithDrops()
        let videoOutput = CaptureVideoDataOutput()
        let audioOutput = CaptureAudioDataOutput()
        videoOutput.setSampleBufferDelegate(both, queue: DispatchQueue(label: "v"))
        audioOutput.setSampleBufferDelegate(both, queue: DispatchQueue(label: "a"))
        let sameDelegate = videoOutput.sampleBufferDelegate === both && audioOutput.sampleBufferDelegate === both
        #expect(sameDelegate)
    }

    /// Every lookup the seeds (and the guide's ports) make, on the virtual pair: found as the
    /// built-in wide-angle cameras a phone has, and still as virtual ones.
    @Test func seedLookupsFindTheVirtualPair() async throws {
        let pair = VirtualCamera.installDefaultPair()
        defer { VirtualCamera.uninstall(pair.front); VirtualCamera.uninstall(pair.back) }
        let all = CaptureDevice.devices(for: .video)
        let front = try #require(all.first { $0.uniqueID == pair.front.uniqueID })
        let back = try #require(all.first { $0.uniqueID == pair.back.uniqueID })
        #expect(front.deviceType == .builtInWideAngleCamera && back.deviceType == .builtInWideAngleCamera)
        #expect(front.isVirtual && back.isVirtual)

        // Seed 2's port: default(.builtInWideAngleCamera, for: .video, position:). Other suites
        // may install cameras meanwhile, so the whole answer is checked, and what comes first.
        for (position, camera) in [(DevicePosition.front, front), (.back, back)] {
            let found = CaptureDevice.DiscoverySession(deviceTypes: [.builtInWideAngleCamera], mediaType: .video, position: position)
                .devices
            let foundIt = found.contains { $0 === camera }
            #expect(foundIt, "\(position): \(found.map(\.localizedName))")
            let first = try #require(CaptureDevice.default(.builtInWideAngleCamera, for: .video, position: position))
            #expect(first.position == position && first.deviceType == .builtInWideAngleCamera)
            // A lookup for virtual cameras still finds them.
            let virtual = CaptureDevice.DiscoverySession(deviceTypes: [.virtual], mediaType: .video, position: position).devices
            let foundVirtual = virtual.contains { $0 === camera } && virtual.allSatisfy(\.isVirtual)
            #expect(foundVirtual)
            #expect(CaptureDevice.default(.virtual, for: .video, position: position)?.isVirtual == true)
        }
        let external = CaptureDevice.DiscoverySession(deviceTypes: [.external], mediaType: .video).devices.contains {
            $0 === front || $0 === back
        }
        #expect(!external)

        // Seeds 1, 2, 4 and 5: cameraWithPosition over devicesWithMediaType; seed 4's questions.
        #expect(all.first { $0.position == .back }?.position == .back)
        let frontFacing = all.contains { $0 === front && $0.position == .front }
        #expect(frontFacing)
        #expect(all.count > 1 && CaptureDevice.hasMultipleCameras)
        #expect(CaptureDevice.isFrontCameraAvailable && CaptureDevice.isRearCameraAvailable)
        // Seed 3: defaultDeviceWithMediaType gives a back camera first.
        #expect(CaptureDevice.default(for: .video)?.position == .back)

        // Seed 2's port runs on what its lookup found: a still from the back camera.
        let session = CaptureSession()
        let still = CaptureStillImageOutput()
        let input = try CaptureDeviceInput(device: back)
        #expect(session.canAddInput(input))
        session.addInput(input)
        session.addOutput(still)
        try session.start()
        defer { session.stopRunning() }
        let sample = try await still.captureStillImage(from: try #require(still.connection(with: .video)))
        #expect(sample.jpegData != nil && (sample.dimensions?.width ?? 0) > 0)
    }
}
