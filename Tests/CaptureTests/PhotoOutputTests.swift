import CaptureTestSupport
import Foundation
import Testing
@testable import Capture

/// Records a photo delegate's callbacks in the order they came.
private final class PhotoRecorder: CapturePhotoCaptureDelegate, @unchecked Sendable {
    enum Call: Equatable {
        case willBegin(Int64)
        case willCapture(Int64)
        case didCapture(Int64)
        case processed(Int64, failed: Bool)
        case finished(Int64, failed: Bool)
    }
    let lock = NSLock()
    private(set) var calls: [Call] = []
    private(set) var photos: [CapturePhoto] = []
    private(set) var errors: [CaptureError] = []
    /// The resolved settings' dimensions `didCapturePhotoFor` was given.
    private(set) var dimensions: [VideoDimensions] = []
    let done = DispatchSemaphore(value: 0)

    func photoOutput(_ output: CapturePhotoOutput, willBeginCaptureFor resolvedSettings: CaptureResolvedPhotoSettings) {
        lock.withLock { calls.append(.willBegin(resolvedSettings.uniqueID)) }
    }
    func photoOutput(_ output: CapturePhotoOutput, willCapturePhotoFor resolvedSettings: CaptureResolvedPhotoSettings) {
        lock.withLock { calls.append(.willCapture(resolvedSettings.uniqueID)) }
    }
    func photoOutput(_ output: CapturePhotoOutput, didCapturePhotoFor resolvedSettings: CaptureResolvedPhotoSettings) {
        lock.withLock {
            calls.append(.didCapture(resolvedSettings.uniqueID))
            dimensions.append(resolvedSettings.photoDimensions)
        }
    }
    func photoOutput(_ output: CapturePhotoOutput, didFinishProcessingPhoto photo: CapturePhoto, error: (any Error)?) {
        lock.withLock {
            calls.append(.processed(photo.resolvedSettings.uniqueID, failed: error != nil))
            photos.append(photo)
            if let e = error as? CaptureError { errors.append(e) }
        }
    }
    func photoOutput(_ output: CapturePhotoOutput, didFinishCaptureFor resolvedSettings: CaptureResolvedPhotoSettings, error: (any Error)?)
    {
        lock.withLock { calls.append(.finished(resolvedSettings.uniqueID, failed: error != nil)) }
        done.signal()
    }
}

@Suite("Photo output")
struct PhotoOutputTests {
    /// A running session on a new virtual camera with `output` (and `extra` outputs).
    private static func running(
        _ format: PixelFormat, width: Int = 320, height: Int = 180,
        _ output: CaptureOutput, extra: [CaptureOutput] = []
    ) throws -> (CaptureSession, VirtualCamera) {
        let installed = try InstalledCamera("Photo Test", modes: [.init(format, width: width, height: height, frameRates: [30])])
        let session = CaptureSession()
        session.beginConfiguration()
        session.addInput(try installed.input())
        for o in [output] + extra {
            #expect(session.canAddOutput(o))
            session.addOutput(o)
        }
        #expect(!session.commitConfiguration().isRejected)
        try session.start()
        return (session, installed.camera)
    }

    @Test(
        "the delegate hears willBegin, willCapture, didCapture, the photo, then the end, once each, with one unique ID; the JPEG decodes to the camera's size with colour bars and carries make, model and date",
        arguments: [PixelFormat.yuyv, .nv12, .mjpeg])
    func delegateOrderAndPhoto(format: PixelFormat) throws {
        let output = CapturePhotoOutput()
        let (session, camera) = try Self.running(format, output)
        defer { session.stopRunning(); VirtualCamera.uninstall(camera) }
        let recorder = PhotoRecorder()
        var settings = CapturePhotoSettings(format: [.codec: .jpeg])
        settings.quality = 80
        #expect(output.availablePhotoCodecTypes == [.jpeg])
        #expect(output.maxPhotoDimensions == VideoDimensions(width: 320, height: 180))
        output.capturePhoto(with: settings, delegate: recorder)
        #expect(recorder.done.wait(timeout: .now() + 20) == .success)
        // A moment for any call after the last (each must come once).
        Thread.sleep(forTimeInterval: 0.05)
        let id = settings.uniqueID
        #expect(
            recorder.lock.withLock { recorder.calls } == [
                .willBegin(id), .willCapture(id), .didCapture(id), .processed(id, failed: false), .finished(id, failed: false),
            ])
        #expect(recorder.lock.withLock { recorder.dimensions } == [VideoDimensions(width: 320, height: 180)])
        let photo = try #require(recorder.lock.withLock { recorder.photos.first })
        #expect(photo.resolvedSettings.photoDimensions == VideoDimensions(width: 320, height: 180))
        let data = try #require(photo.fileDataRepresentation())
        let image = try #require(TestJPEG.decode(data))
        #expect(image.width == 320 && image.height == 180)
        #expect(ColorBars.mismatches(image, row: 150) == [])
        #expect(photo.metadata["Model"] == camera.name)
        #expect(photo.metadata["Make"] == "swift-capture")
        #expect(photo.metadata["Orientation"] == "1")
        #expect(photo.metadata["DateTime"]?.count == 19)
        #expect(photo.timestamp.nanoseconds > 0)
    }

    @Test("async photos at two qualities at once each get their own JPEG; the orientation turns one's pixels and lands in the other's EXIF")
    func asyncPhotosAtTwoQualities() async throws {
        let output = CapturePhotoOutput()
        let (session, camera) = try Self.running(.yuyv, width: 640, height: 360, output)
        defer { session.stopRunning(); VirtualCamera.uninstall(camera) }
        output.connection(with: .video)?.videoOrientation = .portrait
        var low = CapturePhotoSettings()
        low.quality = 20
        low.orientationMode = .exifOnly
        var high = CapturePhotoSettings()
        high.quality = 98
        async let a = output.capturePhoto(with: low)
        async let b = output.capturePhoto(with: high)
        let (pa, pb) = try await (a, b)
        let da = try #require(pa.fileDataRepresentation()), db = try #require(pb.fileDataRepresentation())
        #expect(TestJPEG.decode(da)?.width == 640 && TestJPEG.decode(db)?.width == 360)
        // The same frame at 20 and at 98: the first is smaller (each was encoded at its own).
        #expect(da.count < db.count, "q20 \(da.count) B, q98 \(db.count) B")
        #expect(TestJPEG.exifOrientation(da) == 6 && TestJPEG.exifOrientation(db) == 1)
        #expect(pa.metadata["Orientation"] == "6" && pb.metadata["Orientation"] == "1")
    }

    @Test("a photo at the quality of a JPEG video data output takes that output's encode")
    func sharesTheStreamsEncode() async throws {
        let output = CapturePhotoOutput()
        let video = CaptureVideoDataOutput()
        video.videoSettings = .init(jpeg: .init(quality: 85))
        final class Sink: CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
            func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {}
        }
        let sink = Sink()
        video.setSampleBufferDelegate(sink, queue: DispatchQueue(label: "photo-test.video"))
        let (session, camera) = try Self.running(.yuyv, output, extra: [video])
        defer { session.stopRunning(); VirtualCamera.uninstall(camera) }
        var settings = CapturePhotoSettings()
        settings.quality = 85
        for _ in 0..<3 {
            let photo = try await output.capturePhoto(with: settings)
            #expect(photo.metadata["Model"] == camera.name)
        }
        #expect(output.ownEncodes == 0)
    }

    @Test("settings it cannot do are refused through the delegate, in order, with a message that says what to do")
    func refusals() throws {
        let output = CapturePhotoOutput()
        let (session, camera) = try Self.running(.yuyv, output)
        defer { session.stopRunning(); VirtualCamera.uninstall(camera) }
        var flash = CapturePhotoSettings()
        flash.flashMode = .on
        var small = CapturePhotoSettings()
        small.maxPhotoDimensions = VideoDimensions(width: 160, height: 90)
        var quality = CapturePhotoSettings()
        quality.quality = 0
        for (settings, code, words) in [
            (flash, CaptureError.Code.invalidArgument, "supportedFlashModes"),
            (small, .unsupportedFormat, "maxPhotoDimensions"),
            (quality, .invalidArgument, "1 to 100"),
        ] {
            let recorder = PhotoRecorder()
            output.capturePhoto(with: settings, delegate: recorder)
            #expect(recorder.done.wait(timeout: .now() + 10) == .success)
            let id = settings.uniqueID
            #expect(
                recorder.lock.withLock { recorder.calls } == [.willBegin(id), .processed(id, failed: true), .finished(id, failed: true)])
            let e = try #require(recorder.lock.withLock { recorder.errors.first })
            #expect(e.code == code && e.message.contains(words), "\(e)")
            // No frame was taken: no willCapture/didCapture, and no data (nil, not empty).
            #expect(recorder.lock.withLock { recorder.photos.count } == 1)
            #expect(recorder.lock.withLock { recorder.photos.first?.fileDataRepresentation() } == nil)
        }
    }

    @Test("a capture failing without a frame (session stopped): willBegin, a photo with nil data, the end; no willCapture")
    func failureWithoutAFrame() throws {
        let output = CapturePhotoOutput()
        let (session, camera) = try Self.running(.yuyv, output)
        defer { VirtualCamera.uninstall(camera) }
        session.stopRunning()
        let recorder = PhotoRecorder()
        let settings = CapturePhotoSettings()
        output.capturePhoto(with: settings, delegate: recorder)
        #expect(recorder.done.wait(timeout: .now() + 10) == .success)
        let id = settings.uniqueID
        #expect(recorder.lock.withLock { recorder.calls } == [.willBegin(id), .processed(id, failed: true), .finished(id, failed: true)])
        #expect(recorder.lock.withLock { recorder.errors.map(\.code) } == [.invalidState])
        let photo = try #require(recorder.lock.withLock { recorder.photos.first })
        #expect(photo.fileDataRepresentation() == nil)
        #expect(photo.resolvedSettings.uniqueID == id)
    }

    @Test("jpegStillImageNSDataRepresentation, the name iOS code uses, gives the still's JPEG")
    func nsDataRepresentationAlias() async throws {
        let still = CaptureStillImageOutput()
        let (session, camera) = try Self.running(.yuyv, still)
        defer { session.stopRunning(); VirtualCamera.uninstall(camera) }
        let sample = try await still.captureStillImage(from: try #require(still.connection(with: .video)))
        let data = try #require(CaptureStillImageOutput.jpegStillImageNSDataRepresentation(sample))
        #expect(data == CaptureStillImageOutput.jpegStillImageDataRepresentation(sample))
        #expect(TestJPEG.decode(data)?.width == 320)
    }

    @Test("without a running session the capture fails at once with the still output's error")
    func notRunning() async throws {
        let output = CapturePhotoOutput()
        let (session, camera) = try Self.running(.yuyv, output)
        session.stopRunning()
        defer { VirtualCamera.uninstall(camera) }
        do {
            _ = try await output.capturePhoto(with: CapturePhotoSettings())
            Issue.record("a photo without a running session")
        } catch {
            #expect(error.code == .invalidState)
        }
    }
}
