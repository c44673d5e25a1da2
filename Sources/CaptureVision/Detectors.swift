import CaptureBackend
import Foundation
internal import CVisionShim

/// zxing-cpp's reader for a set of code types, with its result buffers made once.
///
/// Owned by the detection thread.
final class BarcodeReader {
    private let handle: OpaquePointer
    private var codes = [cvision_code](repeating: cvision_code(), count: BarcodeReader.maximumCodes)
    private var text = [CChar](repeating: 0, count: 64 * 1024)
    static let maximumCodes = 32

    /// The code types the library build reads.
    static let availableTypes: [MetadataObjectType] = {
        let bits = cvision_barcode_formats_available()
        return MetadataObjectType.machineReadableCodes.filter { bits & $0.zxingFormats == $0.zxingFormats }
    }()

    init(types: Set<MetadataObjectType>) throws(CaptureError) {
        let formats = types.reduce(UInt32(0)) { $0 | $1.zxingFormats }
        guard let h = cvision_barcode_reader_create(formats) else {
            throw CaptureError(.driverError, "zxing-cpp could not make a barcode reader (out of memory?)")
        }
        handle = h
    }

    deinit { cvision_barcode_reader_destroy(handle) }

    /// A found code in the luma's pixels.
    struct Code {
        var type: MetadataObjectType
        var corners: [CGPoint]
        var text: String
    }

    /// Reads the codes in `luma` (`stride` bytes a row). Throws `.driverError` if the library failed.
    func read(_ luma: UnsafePointer<UInt8>, width: Int, height: Int, stride: Int) throws(CaptureError) -> [Code] {
        let n = codes.withUnsafeMutableBufferPointer { c in
            text.withUnsafeMutableBufferPointer { t in
                cvision_barcode_read(
                    handle, luma, Int32(width), Int32(height), Int32(stride), c.baseAddress, Int32(c.count), t.baseAddress,
                    Int32(t.count))
            }
        }
        guard n >= 0 else { throw CaptureError(.driverError, "zxing-cpp failed on a \(width)x\(height) frame") }
        guard n > 0 else { return [] }
        var found: [Code] = []
        for c in codes.prefix(Int(n)) {
            guard let (type, isUPCA) = MetadataObjectType.fromZXing(c.format) else { continue }
            let corners = withUnsafeBytes(of: c.corners) { raw in
                let f = raw.bindMemory(to: Float.self)
                return (0..<4).map { CGPoint(x: Double(f[2 * $0]), y: Double(f[2 * $0 + 1])) }
            }
            let s = text.withUnsafeBufferPointer { t in
                String(
                    decoding: UnsafeRawBufferPointer(
                        rebasing: UnsafeRawBufferPointer(t)[Int(c.text_offset)..<Int(c.text_offset + c.text_length)]), as: UTF8.self)
            }
            found.append(Code(type: type, corners: corners, text: isUPCA ? "0" + s : s))
        }
        return found
    }
}

/// OpenCV's cascade face detector.
///
/// Owned by the detection thread.
package final class FaceDetector {
    private let handle: OpaquePointer
    private var rects = [cvision_rect](repeating: cvision_rect(), count: FaceDetector.maximumFaces)
    static let maximumFaces = 64
    /// The longer side frames are shrunk to before the cascade runs (it finds faces of 24
    /// pixels and up there: a face of 1/15 of the frame's longer side).
    package static let workingSide = 360
    package static let minimumFace = 24

    /// The cascade used unless `CAPTURE_FACE_CASCADE` names another: OpenCV's frontal-face
    /// "alt2" Haar cascade from Debian's opencv-data (chosen by measurement, see the docs).
    package static var cascadePath: String {
        ProcessInfo.processInfo.environment["CAPTURE_FACE_CASCADE"]
            ?? "/usr/share/opencv4/haarcascades/haarcascade_frontalface_alt2.xml"
    }

    /// Whether the cascade file is there (faces are available only then).
    static var isAvailable: Bool { FileManager.default.isReadableFile(atPath: cascadePath) }

    init() throws(CaptureError) {
        let path = Self.cascadePath
        guard let h = cvision_face_detector_create(path) else {
            throw CaptureError(
                .unsupportedFormat, "OpenCV could not load the face cascade '\(path)': install opencv-data or set CAPTURE_FACE_CASCADE")
        }
        handle = h
    }

    deinit { cvision_face_detector_destroy(handle) }

    /// Faces in `luma`, in its pixels. Throws `.driverError` if the library failed.
    func detect(_ luma: UnsafePointer<UInt8>, width: Int, height: Int, stride: Int) throws(CaptureError) -> [CGRect] {
        let n = rects.withUnsafeMutableBufferPointer { r in
            cvision_face_detect(
                handle, luma, Int32(width), Int32(height), Int32(stride), Int32(Self.workingSide), Int32(Self.minimumFace),
                r.baseAddress, Int32(r.count))
        }
        guard n >= 0 else { throw CaptureError(.driverError, "OpenCV's face detector failed on a \(width)x\(height) frame") }
        return rects.prefix(Int(n)).map { CGRect(x: Int($0.x), y: Int($0.y), width: Int($0.width), height: Int($0.height)) }
    }
}

/// Gives each face an ID that stays while it stays in view: a new box takes the ID of the box
/// of the last detection it overlaps most (intersection over union at least 0.3); others get new
/// IDs, and IDs of faces not seen again end.
///
/// Owned by the detection thread.
struct FaceTracker {
    private var last: [(id: Int, box: CGRect)] = []
    private var nextID = 1

    mutating func track(_ boxes: [CGRect]) -> [(id: Int, box: CGRect)] {
        var free = last
        var out: [(id: Int, box: CGRect)] = []
        for box in boxes {
            var best = -1
            var bestIoU = 0.3
            for (i, old) in free.enumerated() {
                let v = Self.iou(box, old.box)
                if v >= bestIoU { best = i; bestIoU = v }
            }
            if best >= 0 {
                out.append((free[best].id, box))
                free.remove(at: best)
            } else {
                out.append((nextID, box))
                nextID += 1
            }
        }
        last = out
        return out
    }

    mutating func reset() { last = [] }

    static func iou(_ a: CGRect, _ b: CGRect) -> Double {
        let i = a.intersection(b)
        guard !i.isNull, i.width > 0, i.height > 0 else { return 0 }
        let inter = Double(i.width * i.height)
        return inter / (Double(a.width * a.height) + Double(b.width * b.height) - inter)
    }
}
