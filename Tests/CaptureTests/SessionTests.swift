import CaptureVirtual
import Capture
import CaptureTestSupport
import Foundation
import Testing

/// The seeds' flows on the virtual camera, in-process.
@Suite(.serialized) struct SessionTests {
    /// A front/back pair with names unique to one test, so tests do not share devices.
    static func pair(_ tag: String, modes: [VirtualCamera.Mode] = VirtualCamera.defaultModes) -> (
        front: CaptureDevice, back: CaptureDevice, cams: [VirtualCamera]
    ) {
        let f = VirtualCamera(name: "Front \(tag)", position: .front, formats: modes)
        let b = VirtualCamera(name: "Back \(tag)", position: .back, formats: modes)
        VirtualCamera.install(f)
        VirtualCamera.install(b)
        let all = CaptureDevice.devices(for: .video)
        return (all.first { $0.uniqueID == f.uniqueID }!, all.first { $0.uniqueID == b.uniqueID }!, [f, b])
    }
    static func remove(_ cams: [VirtualCamera]) { for c in cams { VirtualCamera.uninstall(c) } }

    @Test func discoveryByPosition() {
        let (front, back, cams) = Self.pair("discovery")
        defer { Self.remove(cams) }
        #expect(front.position == .front && back.position == .back)
        #expect(CaptureDevice.isCameraAvailable)
        #expect(CaptureDevice.hasMultipleCameras)
        #expect(CaptureDevice.isFrontCameraAvailable && CaptureDevice.isRearCameraAvailable)
        let found = CaptureDevice.DiscoverySession(deviceTypes: [.virtual], mediaType: .video, position: .back).devices
        #expect(found.contains { $0 === back } && !found.contains { $0 === front })
        // The same device is the same object every time.
        #expect(CaptureDevice.devices(for: .video).first { $0.uniqueID == back.uniqueID } === back)
        #expect(!back.formats.isEmpty)
    }

    @Test func stillAt720p() async throws {
        let (_, back, cams) = Self.pair("still")
        defer { Self.remove(cams) }
        try await SessionFlows.stillAt720p(back)
    }

    @Test func toggle() throws {
        let (front, back, cams) = Self.pair("toggle")
        defer { Self.remove(cams) }
        try SessionFlows.toggleCameras(back, front)
    }

    @Test func framesInOrder() throws {
        let (front, _, cams) = Self.pair("order", modes: [.init(.yuyv, width: 320, height: 240, frameRates: [60])])
        defer { Self.remove(cams) }
        try SessionFlows.framesInOrder(front, count: 120)
    }

    @Test func outOfBuffers() throws {
        let (front, _, cams) = Self.pair("oob", modes: [.init(.yuyv, width: 320, height: 240, frameRates: [30])])
        defer { Self.remove(cams) }
        try SessionFlows.outOfBuffers(front)
    }

    @Test func discardsLateFrames() throws {
        let (front, _, cams) = Self.pair("late", modes: [.init(.yuyv, width: 320, height: 240, frameRates: [30])])
        defer { Self.remove(cams) }
        try SessionFlows.discardsLateFrames(front)
    }

    @Test func rejectedCommit() throws {
        let (front, _, cams) = Self.pair("reject", modes: [.init(.yuyv, width: 320, height: 240), .init(.yuyv, width: 640, height: 480)])
        defer { Self.remove(cams) }
        try SessionFlows.rejectedCommitKeepsRunning(front, impossible: .hd4K3840x2160)
    }
}
