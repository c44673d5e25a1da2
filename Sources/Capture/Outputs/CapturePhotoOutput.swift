import CaptureImaging
import CaptureBackend
import CaptureSystem
import Foundation
import Synchronization

/// How one photo is to be taken, as `AVCapturePhotoSettings`. Use a new one for each capture.
public struct CapturePhotoSettings: Sendable, Hashable {
    /// The keys of `format`, as `AVVideoCodecKey`.
    public enum FormatKey: String, Sendable, Hashable { case codec }
    /// The photo codecs, as `AVVideoCodecType`. Only JPEG exists here.
    public enum Codec: String, Sendable, Hashable { case jpeg }
    /// A flash mode, as `AVCaptureDevice.FlashMode`.
    public enum FlashMode: String, Sendable, Hashable { case off, on, auto }

    private static let ids = Atomic<Int64>(0)

    /// Tells this capture's callbacks from others' (`resolvedSettings.uniqueID` is the same).
    public let uniqueID: Int64
    /// The format, as `[AVVideoCodecKey: AVVideoCodecType.jpeg]`.
    public let format: [FormatKey: Codec]
    /// JPEG quality from 1 to 100.
    public var quality: Int = 90
    /// Chroma subsampling; nil keeps the camera's.
    public var subsampling: ChromaSubsampling?
    /// The flash; only the output's `supportedFlashModes` may be asked for.
    public var flashMode: FlashMode = .off
    /// Turn the pixels as the connection's orientation and mirroring say (the default; EXIF
    /// orientation 1), or only write the orientation tag (`.exifOnly`).
    public var orientationMode: StillOrientationMode = .rotatePixels
    /// The largest photo wanted (nil: the camera's active format). Photos have the active
    /// format's size; a smaller maximum than that is refused with a message that says so.
    public var maxPhotoDimensions: VideoDimensions?

    /// Settings for a photo in `format` (JPEG, the default).
    public init(format: [FormatKey: Codec] = [.codec: .jpeg]) {
        uniqueID = Self.ids.add(1, ordering: .relaxed).newValue
        self.format = format
    }

    /// The codec asked for.
    public var codec: Codec { format[.codec] ?? .jpeg }
}

/// What a capture ended up with, as `AVCaptureResolvedPhotoSettings`.
public struct CaptureResolvedPhotoSettings: Sendable, Hashable {
    /// The `uniqueID` of the settings the capture was asked with.
    public let uniqueID: Int64
    /// The photo's size as the sensor makes it, as in AVFoundation (a photo turned a quarter is
    /// stored with width and height swapped: see `CapturePhoto.metadata`).
    public let photoDimensions: VideoDimensions
    /// Whether the flash fires.
    public let isFlashEnabled: Bool
    /// Photos this capture delivers (1).
    public let expectedPhotoCount: Int
}

/// One photo, as `AVCapturePhoto`. Immutable; any thread.
public final class CapturePhoto: @unchecked Sendable {
    /// The JPEG file; nil for a capture that failed.
    private let data: Data?
    /// When the frame was captured, on the clock the session's samples use.
    public let timestamp: CaptureTime
    /// The settings the capture resolved to.
    public let resolvedSettings: CaptureResolvedPhotoSettings
    /// The camera's frame sequence number the photo was made of.
    public let sequenceNumber: UInt64
    /// The photo's EXIF, as `AVCapturePhoto.metadata`'s `{TIFF}`/`{Exif}` entries flattened:
    /// `Orientation` (1-8), `Make`, `Model`, `DateTime`, `PixelXDimension`, `PixelYDimension`
    /// (the stored picture's size: turned a quarter, width and height swap).
    public let metadata: [String: String]
    /// Photos of this capture so far, counting this one (1).
    public var photoCount: Int { 1 }

    init(
        jpeg: Data?, timestamp: CaptureTime, sequenceNumber: UInt64, resolvedSettings: CaptureResolvedPhotoSettings,
        pixelDimensions: VideoDimensions? = nil
    ) {
        data = jpeg
        self.timestamp = timestamp
        self.sequenceNumber = sequenceNumber
        self.resolvedSettings = resolvedSettings
        let size = pixelDimensions ?? resolvedSettings.photoDimensions
        var m: [String: String] = [
            "PixelXDimension": String(size.width),
            "PixelYDimension": String(size.height),
        ]
        if let exif = jpeg?.withUnsafeBytes({ EXIFInfo(jpeg: $0) }) {
            m["Orientation"] = String(exif.orientation.rawValue)
            if let v = exif.make { m["Make"] = v }
            if let v = exif.model { m["Model"] = v }
            if let v = exif.dateTime { m["DateTime"] = v }
        }
        metadata = m
    }

    /// The photo as a JPEG file (with its EXIF), ready to write or to save to the album; nil
    /// when the capture failed (the delegate's `error` says why), as in AVFoundation.
    public func fileDataRepresentation() -> Data? { data }
}

/// Receives a photo capture's progress, as `AVCapturePhotoCaptureDelegate`. Every method has an
/// empty default: write the ones you need. Called on the photo output's private serial queue, in
/// this order, each at most once per capture, all with the same `uniqueID`: `willBeginCaptureFor`,
/// `willCapturePhotoFor`, `didCapturePhotoFor`, `didFinishProcessingPhoto`, `didFinishCaptureFor`.
/// A capture that fails before it has a frame (settings refused, no frame in time, the session
/// stopped) skips `willCapturePhotoFor` and `didCapturePhotoFor`: there was no exposure to
/// announce. The first and the last two always come.
public protocol CapturePhotoCaptureDelegate: AnyObject, Sendable {
    /// The capture was accepted and waits for the camera's next frame.
    func photoOutput(_ output: CapturePhotoOutput, willBeginCaptureFor resolvedSettings: CaptureResolvedPhotoSettings)
    /// The frame the photo is made of has been chosen (the moment to play a shutter sound or
    /// flash the screen). A V4L2 camera exposes continuously, so the frame is already taken:
    /// `didCapturePhotoFor` follows at once.
    func photoOutput(_ output: CapturePhotoOutput, willCapturePhotoFor resolvedSettings: CaptureResolvedPhotoSettings)
    /// The photo's frame is in hand; encoding comes next.
    func photoOutput(_ output: CapturePhotoOutput, didCapturePhotoFor resolvedSettings: CaptureResolvedPhotoSettings)
    /// The photo is made (`error` nil), or could not be (its `fileDataRepresentation()` is then nil).
    func photoOutput(_ output: CapturePhotoOutput, didFinishProcessingPhoto photo: CapturePhoto, error: (any Error)?)
    /// The capture is over; `error` is the failure, if any (the same as the photo's).
    func photoOutput(_ output: CapturePhotoOutput, didFinishCaptureFor resolvedSettings: CaptureResolvedPhotoSettings, error: (any Error)?)
}

extension CapturePhotoCaptureDelegate {
    public func photoOutput(_ output: CapturePhotoOutput, willBeginCaptureFor resolvedSettings: CaptureResolvedPhotoSettings) {}
    public func photoOutput(_ output: CapturePhotoOutput, willCapturePhotoFor resolvedSettings: CaptureResolvedPhotoSettings) {}
    public func photoOutput(_ output: CapturePhotoOutput, didCapturePhotoFor resolvedSettings: CaptureResolvedPhotoSettings) {}
    public func photoOutput(_ output: CapturePhotoOutput, didFinishProcessingPhoto photo: CapturePhoto, error: (any Error)?) {}
    public func photoOutput(
        _ output: CapturePhotoOutput, didFinishCaptureFor resolvedSettings: CaptureResolvedPhotoSettings, error: (any Error)?
    ) {}
}

/// Takes photos from the session's camera, as `AVCapturePhotoOutput`. Thread-safe.
///
/// It is the still output's path with per-capture settings: the newest frame, raw frames encoded
/// with libjpeg-turbo (shared with a JPEG video data output at the same settings), MJPEG frames
/// passed through with their Huffman tables completed. The connection's `videoOrientation` and
/// `isVideoMirrored` turn the pixels (orientation 1), or only set the EXIF orientation tag with
/// `CapturePhotoSettings.orientationMode` `.exifOnly`. Every photo carries EXIF: the
/// orientation, the device's manufacturer and name as Make and Model, and the date.
public final class CapturePhotoOutput: CaptureStillImageOutput, @unchecked Sendable {
    private let callbacks = DispatchQueue(label: "swift-capture.photo-delegate")

    public override init() { super.init() }

    /// The codecs photos can be taken in.
    public var availablePhotoCodecTypes: [CapturePhotoSettings.Codec] { [.jpeg] }

    /// The flash modes the camera can do (`.off` only: no V4L2 camera driver here exposes a flash
    /// that fires with a frame).
    public var supportedFlashModes: [CapturePhotoSettings.FlashMode] { [.off] }

    /// The largest photo: the camera's active format (nil without a camera).
    public var maxPhotoDimensions: VideoDimensions? { connection(with: .video)?.device?.activeFormat?.dimensions }

    /// Takes a photo with `settings`; `delegate` hears of it on the output's queue:
    /// `willBeginCaptureFor`, `willCapturePhotoFor` and `didCapturePhotoFor` (once the frame is
    /// chosen: not for a capture that fails before), `didFinishProcessingPhoto`, then
    /// `didFinishCaptureFor`, each once, with the still output's errors (no running session, no
    /// frame in time, a camera that went away, the session stopped) or `.invalidArgument` for
    /// settings it cannot do.
    public func capturePhoto(with settings: CapturePhotoSettings, delegate: any CapturePhotoCaptureDelegate) {
        let dims = maxPhotoDimensions ?? settings.maxPhotoDimensions ?? VideoDimensions(width: 0, height: 0)
        let resolved = CaptureResolvedPhotoSettings(
            uniqueID: settings.uniqueID, photoDimensions: dims,
            isFlashEnabled: settings.flashMode == .on, expectedPhotoCount: 1)
        if let problem = refusal(of: settings, photoDimensions: dims) {
            callbacks.async {
                delegate.photoOutput(self, willBeginCaptureFor: resolved)
                let photo = CapturePhoto(
                    jpeg: nil, timestamp: CaptureTime(nanoseconds: 0), sequenceNumber: 0, resolvedSettings: resolved)
                delegate.photoOutput(self, didFinishProcessingPhoto: photo, error: problem)
                delegate.photoOutput(self, didFinishCaptureFor: resolved, error: problem)
            }
            return
        }
        let still = OutputSettings(quality: settings.quality, subsampling: settings.subsampling, orientationMode: settings.orientationMode)
        // First on the serial queue, so before the photo whatever thread completes it.
        callbacks.async { delegate.photoOutput(self, willBeginCaptureFor: resolved) }
        guard let connection = connection(with: .video) else {
            let e = CaptureError(.invalidState, "the photo output has no camera: add a camera input to its session first")
            finish(nil, e, resolved, delegate)
            return
        }
        // The frame is chosen on the encode queue, before the photo is made of it.
        let frameChosen: @Sendable () -> Void = {
            self.callbacks.async {
                delegate.photoOutput(self, willCapturePhotoFor: resolved)
                delegate.photoOutput(self, didCapturePhotoFor: resolved)
            }
        }
        capture(from: connection, settings: still, alwaysEXIF: true, frameChosen: frameChosen) { sample, error in
            self.finish(sample, error, resolved, delegate)
        }
    }

    /// Takes a photo with `settings` and returns it; throws what `capturePhoto(with:delegate:)`
    /// reports as its error.
    public func capturePhoto(with settings: CapturePhotoSettings) async throws(CaptureError) -> CapturePhoto {
        final class Waiter: CapturePhotoCaptureDelegate, @unchecked Sendable {
            // The result crosses through a lock: ThreadSanitizer cannot follow a resume.
            let result = Locked<Result<CapturePhoto, CaptureError>?>(nil)
            let continuation = Locked<CheckedContinuation<Void, Never>?>(nil)
            func photoOutput(_ output: CapturePhotoOutput, didFinishProcessingPhoto photo: CapturePhoto, error: (any Error)?) {
                let e = error.map { ($0 as? CaptureError) ?? CaptureError(.driverError, "the photo capture failed: \($0)") }
                result.withLock { $0 = e.map { .failure($0) } ?? .success(photo) }
            }
            func photoOutput(
                _ output: CapturePhotoOutput, didFinishCaptureFor resolvedSettings: CaptureResolvedPhotoSettings, error: (any Error)?
            ) {
                continuation.withLock { $0.take() }?.resume()
            }
        }
        let waiter = Waiter()
        await withCheckedContinuation { (cont: CheckedContinuation<Void, Never>) in
            waiter.continuation.withLock { $0 = cont }
            capturePhoto(with: settings, delegate: waiter)
        }
        let result = waiter.result.withLock { $0 } ?? .failure(CaptureError(.driverError, "the photo capture failed"))
        return try result.get()
    }

    /// Why `settings` cannot be taken, if they cannot.
    private func refusal(of settings: CapturePhotoSettings, photoDimensions: VideoDimensions) -> CaptureError? {
        if settings.format.keys.contains(where: { $0 != .codec }) || settings.codec != .jpeg {
            return CaptureError(.invalidArgument, "photos are JPEG only: use CapturePhotoSettings(format: [.codec: .jpeg])")
        }
        if !(1...100).contains(settings.quality) {
            return CaptureError(.invalidArgument, "photo quality \(settings.quality) is out of range: use 1 to 100")
        }
        if !supportedFlashModes.contains(settings.flashMode) {
            return CaptureError(
                .invalidArgument,
                "flash mode \(settings.flashMode.rawValue) is not supported by this camera: use one of supportedFlashModes (\(supportedFlashModes.map(\.rawValue).joined(separator: ", ")))"
            )
        }
        if let max = settings.maxPhotoDimensions, photoDimensions.width > 0,
            max.width < photoDimensions.width || max.height < photoDimensions.height
        {
            return CaptureError(
                .unsupportedFormat,
                "the camera takes \(photoDimensions.width)x\(photoDimensions.height) photos, more than maxPhotoDimensions \(max.width)x\(max.height): choose a smaller active format or a larger maximum"
            )
        }
        return nil
    }

    private func finish(
        _ sample: SampleBuffer?, _ error: CaptureError?, _ resolved: CaptureResolvedPhotoSettings,
        _ delegate: any CapturePhotoCaptureDelegate
    ) {
        // The JPEG is copied out of the reused still sample, so the photo is the app's alone.
        let jpeg = error == nil ? sample?.jpegData.map { Data($0) } : nil
        let photo = CapturePhoto(
            jpeg: jpeg, timestamp: sample?.presentationTimeStamp ?? CaptureTime(nanoseconds: 0),
            sequenceNumber: sample?.sequenceNumber ?? 0, resolvedSettings: resolved,
            pixelDimensions: sample?.dimensions)
        let failure: CaptureError? = error ?? (jpeg == nil ? CaptureError(.driverError, "the photo capture gave no JPEG") : nil)
        callbacks.async {
            delegate.photoOutput(self, didFinishProcessingPhoto: photo, error: failure)
            delegate.photoOutput(self, didFinishCaptureFor: resolved, error: failure)
        }
    }
}
