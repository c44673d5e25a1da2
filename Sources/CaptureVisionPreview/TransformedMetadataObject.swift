import Capture
import CapturePreview
import CaptureVision
import Foundation

extension PreviewGeometry {
    /// `object` in this geometry's layer coordinates: its bounds (and a code's corners) turned,
    /// mirrored and scaled as the picture is shown, as `transformedMetadataObject(for:)` gives it.
    /// A new object of the same kind, with the same type, text, face ID and time.
    public func transformed(_ object: MetadataObject) -> MetadataObject {
        switch object {
        case let code as MetadataMachineReadableCodeObject:
            return MetadataMachineReadableCodeObject(
                type: code.type, time: code.time, sequenceNumber: code.sequenceNumber,
                corners: code.corners.map { layerPoint(fromCaptureDevicePoint: $0) }, stringValue: code.stringValue)
        case let face as MetadataFaceObject:
            return MetadataFaceObject(
                faceID: face.faceID, time: face.time, sequenceNumber: face.sequenceNumber,
                bounds: layerRect(fromMetadataOutputRect: face.bounds))
        default:
            return MetadataObject(
                type: object.type, time: object.time, sequenceNumber: object.sequenceNumber,
                bounds: layerRect(fromMetadataOutputRect: object.bounds))
        }
    }
}

extension CaptureVideoPreviewLayer {
    /// A metadata output's object in this layer's coordinates, as AVFoundation's
    /// `transformedMetadataObject(for:)`: bounds and corners converted for the layer's gravity,
    /// its connection's turn and mirroring and the frames' size (see ``PreviewGeometry``). Nil
    /// when the layer has no size yet. Any thread.
    public func transformedMetadataObject(for object: MetadataObject) -> MetadataObject? {
        let g = geometry
        guard g.bounds.width > 0, g.bounds.height > 0 else { return nil }
        return g.transformed(object)
    }
}
