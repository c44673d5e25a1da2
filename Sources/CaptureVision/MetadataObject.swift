import CaptureBackend
import Foundation

/// Something a metadata output found in a frame, as `AVMetadataObject`: its type, the frame's
/// time, and its bounds.
///
/// Coordinates are AVFoundation's metadata coordinates: normalized to 0...1 over the frame as
/// the camera delivers it (the sensor's landscape buffer, before any rotation or mirroring of a
/// connection or preview), (0, 0) at the top left and (1, 1) at the bottom right. Convert them
/// for a preview layer with `CaptureVideoPreviewLayer.layerRectConverted(fromMetadataOutputRect:)`
/// or `transformedMetadataObject(for:)`.
///
/// Immutable; any thread.
public class MetadataObject: @unchecked Sendable, CustomStringConvertible {
    /// What it is.
    public let type: MetadataObjectType
    /// The capture time of the frame it was found in (the sample's presentation time stamp).
    public let time: CaptureTime
    /// The frame's sequence number, to match the object to a sample of another output.
    public let sequenceNumber: UInt64
    /// The smallest upright rectangle around it, normalized (see the class's discussion).
    public let bounds: CGRect

    package init(type: MetadataObjectType, time: CaptureTime, sequenceNumber: UInt64, bounds: CGRect) {
        self.type = type
        self.time = time
        self.sequenceNumber = sequenceNumber
        self.bounds = bounds
    }

    public var description: String { "\(type.name) \(Self.format(bounds))" }

    static func format(_ r: CGRect) -> String {
        func f(_ v: CGFloat) -> String { String(format: "%.4f", Double(v)) }
        return "(\(f(r.minX)), \(f(r.minY)), \(f(r.width)), \(f(r.height)))"
    }
}

/// A barcode or 2-D code and its text, as `AVMetadataMachineReadableCodeObject`.
public final class MetadataMachineReadableCodeObject: MetadataObject, @unchecked Sendable {
    /// The decoded text (UTF-8 as the code carries it), or nil if the code holds bytes that are
    /// not text.
    public let stringValue: String?
    /// The code's corners, normalized as `bounds`, in the order the decoder follows the code
    /// (for a QR code: its top-left, top-right, bottom-right and bottom-left corners as printed,
    /// wherever they are in the frame after a rotation).
    public let corners: [CGPoint]

    package init(type: MetadataObjectType, time: CaptureTime, sequenceNumber: UInt64, corners: [CGPoint], stringValue: String?) {
        self.stringValue = stringValue
        self.corners = corners
        let xs = corners.map(\.x), ys = corners.map(\.y)
        let box = CGRect(
            x: xs.min() ?? 0, y: ys.min() ?? 0, width: (xs.max() ?? 0) - (xs.min() ?? 0),
            height: (ys.max() ?? 0) - (ys.min() ?? 0))
        super.init(type: type, time: time, sequenceNumber: sequenceNumber, bounds: box)
    }

    public override var description: String { "\(type.name) \(Self.format(bounds)) \(stringValue ?? "<binary>")" }
}

/// A face, as `AVMetadataFaceObject`: its bounds and an ID that stays the same while the face
/// stays in view (frame to frame, the box that overlaps it most keeps its ID).
public final class MetadataFaceObject: MetadataObject, @unchecked Sendable {
    /// The same for one face while it stays in view; a face that comes back gets a new one.
    public let faceID: Int

    package init(faceID: Int, time: CaptureTime, sequenceNumber: UInt64, bounds: CGRect) {
        self.faceID = faceID
        super.init(type: .face, time: time, sequenceNumber: sequenceNumber, bounds: bounds)
    }

    public override var description: String { "face \(faceID) \(Self.format(bounds))" }
}
