internal import CPNG
import Foundation

/// PNG to RGBA through libpng's simplified reading API, with the pixel count capped before the
/// pixels are allocated (a header can claim any size). Any thread. (Package-wide: the tool's
/// picture camera reads PNG with it, since the core links no libpng.)
package enum PNGDecoding {
    package static let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
    static let maximumPixelCount = 8192 * 8192

    package struct Failure: Error, CustomStringConvertible {
        package var description: String
    }

    package static func decode(_ data: Data) -> Result<(Int, Int, [UInt8]), Failure> {
        guard data.starts(with: signature) else { return .failure(Failure(description: "no PNG signature")) }
        // libpng reads from the bytes until finish_read: both calls inside one access to them.
        return data.withUnsafeBytes { bytes -> Result<(Int, Int, [UInt8]), Failure> in
            var image = png_image()
            image.version = cpng_image_version()
            func message() -> String {
                withUnsafeBytes(of: image.message) { raw in String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self) }
            }
            guard png_image_begin_read_from_memory(&image, bytes.baseAddress, bytes.count) != 0 else {
                return .failure(Failure(description: message()))
            }
            defer { png_image_free(&image) }
            let width = Int(image.width), height = Int(image.height)
            guard width > 0, height > 0, width * height <= maximumPixelCount else {
                return .failure(Failure(description: "\(width)x\(height) is beyond \(maximumPixelCount) pixels"))
            }
            image.format = cpng_format_rgba()
            var pixels = [UInt8](repeating: 0, count: width * height * 4)
            let done = pixels.withUnsafeMutableBytes { png_image_finish_read(&image, nil, $0.baseAddress, Int32(width * 4), nil) }
            guard done != 0 else { return .failure(Failure(description: message())) }
            return .success((width, height, pixels))
        }
    }
}
