import CaptureImaging
import CaptureBackend
import Foundation

extension VirtualCamera {
    /// A still image the virtual camera shows instead of its test pattern (``VirtualCamera/picture``):
    /// 8-bit RGB pixels, from JPEG (decoded by TurboJPEG) or from pixels you decoded yourself.
    ///
    /// PNG is not read here: the core links no libpng. Decode a PNG with your own reader (the
    /// `capture` tool uses the preview's) and pass its pixels to ``init(rgba:width:height:)``.
    ///
    /// A value; any thread.
    public struct Picture: Sendable, Hashable {
        /// Size in pixels.
        public let width: Int
        public let height: Int
        /// Packed RGB, 3 bytes a pixel, rows without padding.
        package let rgb: [UInt8]

        /// Pictures may hold at most this many pixels (as `JPEGDecoder`'s default).
        public static let maximumPixelCount = 8192 * 8192

        /// A picture from packed RGB bytes (3 a pixel, no row padding).
        /// Throws `.invalidArgument` when the sizes do not match.
        public init(rgb: [UInt8], width: Int, height: Int) throws(CaptureError) {
            try Self.check(count: rgb.count, bytesPerPixel: 3, width: width, height: height)
            self.width = width
            self.height = height
            self.rgb = rgb
        }

        /// A picture from packed RGBA bytes (4 a pixel, no row padding); alpha is dropped (a
        /// transparent pixel shows its colour). Throws `.invalidArgument` when the sizes do not match.
        public init(rgba: [UInt8], width: Int, height: Int) throws(CaptureError) {
            try self.init(rgb: Self.expand(rgba, bytesPerPixel: 4, width: width, height: height), width: width, height: height)
        }

        /// A picture from 8-bit grey levels (1 byte a pixel, no row padding).
        /// Throws `.invalidArgument` when the sizes do not match.
        public init(grey: [UInt8], width: Int, height: Int) throws(CaptureError) {
            try self.init(rgb: Self.expand(grey, bytesPerPixel: 1, width: width, height: height), width: width, height: height)
        }

        /// Packed RGB from RGBA (alpha dropped) or grey (each level three times), sizes checked.
        private static func expand(_ bytes: [UInt8], bytesPerPixel n: Int, width: Int, height: Int) throws(CaptureError) -> [UInt8] {
            try check(count: bytes.count, bytesPerPixel: n, width: width, height: height)
            var out = [UInt8](repeating: 0, count: width * height * 3)
            for i in 0..<(width * height) {
                for c in 0..<3 { out[3 * i + c] = bytes[n * i + (n == 1 ? 0 : c)] }
            }
            return out
        }

        /// A picture from a JPEG file's bytes. Throws `.corruptFrame` for bytes TurboJPEG cannot
        /// decode, `.invalidArgument` for a picture over ``maximumPixelCount`` pixels.
        public init(jpeg: some ContiguousBytes) throws(CaptureError) {
            let decoder = JPEGDecoder(maximumPixelCount: Self.maximumPixelCount)
            let (header, pixels) = try decoder.decode(jpeg, as: .rgb)
            self.width = header.width
            self.height = header.height
            rgb = pixels
        }

        /// A picture from a JPEG file. Throws `.fileNotFound`-like errors as `.invalidArgument`
        /// with the path, and says what to do for a PNG or another format.
        public init(contentsOfFile path: String) throws(CaptureError) {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw CaptureError(.invalidArgument, "cannot read the picture '\(path)': check that the file exists and is readable")
            }
            if data.starts(with: [0xFF, 0xD8]) {
                try self.init(jpeg: data)
                return
            }
            if data.starts(with: [0x89, 0x50, 0x4E, 0x47]) {
                throw CaptureError(
                    .invalidArgument,
                    "'\(path)' is a PNG, which the virtual camera does not decode (the core links no libpng): "
                        + "convert it to JPEG, or decode it and use Picture(rgba:width:height:)")
            }
            throw CaptureError(.invalidArgument, "'\(path)' is not a JPEG file: the virtual camera shows JPEG pictures, or pixels you pass")
        }

        private static func check(count: Int, bytesPerPixel: Int, width: Int, height: Int) throws(CaptureError) {
            guard width > 0, height > 0, width * height <= maximumPixelCount else {
                throw CaptureError(
                    .invalidArgument,
                    "a picture of \(width)x\(height) pixels: each side must be above 0, at most \(maximumPixelCount) pixels in all")
            }
            guard count == width * height * bytesPerPixel else {
                throw CaptureError(
                    .invalidArgument,
                    "\(count) bytes for a \(width)x\(height) picture at \(bytesPerPixel) bytes a pixel (want \(width * height * bytesPerPixel))"
                )
            }
        }
    }

    /// How a ``Picture`` fills frames of another shape.
    public enum PictureFit: Sendable, Hashable, CaseIterable {
        /// Scaled to fit whole, centred, black bars on the sides left over (the default).
        case letterbox
        /// Scaled to cover the frame, centred, what sticks out cut off.
        case fill
        /// Scaled to the frame's size, its aspect ratio given up.
        case stretch

        /// Where a `pictureWidth` x `pictureHeight` picture lands in a `frameWidth` x `frameHeight`
        /// frame, in frame pixels (x, y, width, height; parts may lie outside the frame for
        /// `.fill`). Tests use it to know where something drawn on the picture appears.
        public func placement(
            pictureWidth: Int, pictureHeight: Int, frameWidth: Int, frameHeight: Int
        ) -> (x: Double, y: Double, width: Double, height: Double) {
            let fw = Double(frameWidth), fh = Double(frameHeight)
            let pw = Double(pictureWidth), ph = Double(pictureHeight)
            switch self {
            case .stretch:
                return (0, 0, fw, fh)
            case .letterbox, .fill:
                let sx = fw / pw, sy = fh / ph
                let s = self == .letterbox ? min(sx, sy) : max(sx, sy)
                let w = pw * s, h = ph * s
                return ((fw - w) / 2, (fh - h) / 2, w, h)
            }
        }
    }

    /// The picture the camera shows instead of its test pattern, or nil for the pattern (the
    /// default). Shown in every mode the camera has, scaled as ``pictureFit`` says; the
    /// brightness, contrast, saturation and exposure controls change it as they change the
    /// pattern; faults work as with the pattern. A picture has no frame counter or time code, so
    /// `frameNumber(in:)` reads nothing from its frames (the sample's `sequenceNumber` still
    /// counts). Frames drawn after a change show the new picture. Any thread.
    public var picture: Picture? {
        get { state.withLock { $0.picture } }
        set { changePicture { $0.picture = newValue } }
    }

    /// How ``picture`` fills frames of another shape; `.letterbox` unless set. Any thread.
    public var pictureFit: PictureFit {
        get { state.withLock { $0.pictureFit } }
        set { changePicture { $0.pictureFit = newValue } }
    }
}
