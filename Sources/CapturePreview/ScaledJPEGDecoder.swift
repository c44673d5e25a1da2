internal import CTurboJPEG

/// Decodes MJPEG frames for the screen with TurboJPEG at the scaling factor (1/8 ... 2) that
/// gives the smallest picture still at least as large as it is drawn, so a 1080p frame in a small
/// window costs a fraction of a full decode. Treats the bytes as hostile as `JPEGDecoder` does
/// (pixel cap before allocating, stop on warnings, limited scans). One thread at a time.
/// Package access: capture-bench measures it against TurboJPEG called directly.
package final class ScaledJPEGDecoder {
    private var handle: tjhandle?
    package private(set) var pixels: [UInt8] = []
    private static let flags = Int32(TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS)
    private static let maximumPixelCount = 8192 * 8192
    /// TurboJPEG's factors, largest first.
    private static let factors: [(num: Int, denom: Int)] = {
        var n: Int32 = 0
        guard let list = tjGetScalingFactors(&n) else { return [(1, 1)] }
        return (0..<Int(n)).map { (Int(list[$0].num), Int(list[$0].denom)) }
            .sorted { $0.num * $1.denom > $1.num * $0.denom }
    }()

    package init() {}

    deinit { if let handle { tjDestroy(handle) } }

    /// The scaled size for a frame of `width`x`height` drawn at `target` pixels: the smallest
    /// factor not below the target in either direction, at most 1 (full size).
    package static func scaledSize(width: Int, height: Int, target: (width: Int, height: Int)) -> (width: Int, height: Int) {
        var best = (width, height)
        for f in factors where f.num <= f.denom {
            let w = (width * f.num + f.denom - 1) / f.denom, h = (height * f.num + f.denom - 1) / f.denom
            if w >= target.width && h >= target.height { best = (w, h) }
        }
        return best
    }

    /// Decodes into `pixels` as B, G, R, A bytes (SDL's ARGB8888); nil for damaged or oversized
    /// frames.
    package func decode(_ jpeg: UnsafeRawBufferPointer, target: (width: Int, height: Int)) -> (width: Int, height: Int)? {
        guard let base = jpeg.baseAddress?.assumingMemoryBound(to: UInt8.self), jpeg.count >= 4 else { return nil }
        if handle == nil { handle = tjInitDecompress() }
        guard let h = handle else { return nil }
        var width: Int32 = 0, height: Int32 = 0, sub: Int32 = 0, colorspace: Int32 = 0
        guard tjDecompressHeader3(h, base, UInt(jpeg.count), &width, &height, &sub, &colorspace) == 0,
            width > 0, height > 0, Int(width) * Int(height) <= Self.maximumPixelCount
        else { return nil }
        let size = Self.scaledSize(width: Int(width), height: Int(height), target: target)
        let need = size.width * size.height * 4
        if pixels.count < need { pixels = [UInt8](repeating: 0, count: need) }
        let ok = pixels.withUnsafeMutableBufferPointer { out in
            tjDecompress2(
                h, base, UInt(jpeg.count), out.baseAddress, Int32(size.width), Int32(size.width * 4),
                Int32(size.height), Int32(TJPF_BGRA.rawValue), Self.flags) == 0
        }
        return ok ? size : nil
    }
}
