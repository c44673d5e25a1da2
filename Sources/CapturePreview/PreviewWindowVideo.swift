// Camera frames in a window: uploading them into textures and drawing them.
import Capture
internal import CSDL2
import Foundation

extension PreviewWindow {
    func drawVideo(_ video: VideoDrawing, _ c: DrawCommand, _ r: OpaquePointer) {
        if let held = video.source.take() {
            var g = video.geometry
            g.bounds = c.rect
            upload(held.sample, for: c.layer, drawnSize: g.videoRect.size, r)
            video.source.didDraw()
            // `held` ends here: its driver buffer goes back before anything is drawn.
        }
        guard let t = videoTextures[c.layer] else { return }
        var g = video.geometry
        if let f = video.source.format {
            // Scaled JPEG textures are smaller than the frames: the geometry uses the frame's size.
            g.videoSize = CGSize(width: f.dimensions.width, height: f.dimensions.height)
        }
        g.bounds = c.rect
        let drawing = g.textureDrawing
        setClip(c.videoClip, r)
        let alpha = UInt8(max(0, min(255, (c.opacity * 255).rounded())))
        SDL_SetTextureAlphaMod(t.texture, alpha)
        // Camera pictures are opaque: blending (reading back what is under them) only for a
        // translucent layer; with a software OpenGL it is a large part of the cost of a frame.
        SDL_SetTextureBlendMode(t.texture, alpha == 255 ? SDL_BLENDMODE_NONE : SDL_BLENDMODE_BLEND)
        if t.format != SDL_PIXELFORMAT_ARGB8888.rawValue && t.format != SDL_PIXELFORMAT_RGB888.rawValue
            && t.format != SDL_PIXELFORMAT_RGB24.rawValue && t.format != SDL_PIXELFORMAT_BGR24.rawValue
        {
            // YUV textures: the levels of the frame's range, read when the texture is drawn.
            SDL_SetYUVConversionMode(t.fullRange ? SDL_YUV_CONVERSION_JPEG : SDL_YUV_CONVERSION_BT601)
        }
        var d = Self.frect(drawing.rect)
        var flip = SDL_FLIP_NONE.rawValue
        if drawing.flipHorizontal { flip |= SDL_FLIP_HORIZONTAL.rawValue }
        if drawing.flipVertical { flip |= SDL_FLIP_VERTICAL.rawValue }
        SDL_RenderCopyExF(r, t.texture, nil, &d, drawing.angle, nil, SDL_RendererFlip(rawValue: flip))
        setClip(c.clip, r)
    }

    /// The SDL texture format for a camera pixel format (nil: not shown).
    private static func textureFormat(_ f: PixelFormat) -> UInt32? {
        switch f {
        case .yuyv: SDL_PIXELFORMAT_YUY2.rawValue
        case .uyvy: SDL_PIXELFORMAT_UYVY.rawValue
        case .yvyu: SDL_PIXELFORMAT_YVYU.rawValue
        case .nv12, .nv12m: SDL_PIXELFORMAT_NV12.rawValue
        case .nv21, .nv21m: SDL_PIXELFORMAT_NV21.rawValue
        case .yuv420, .yuv420m: SDL_PIXELFORMAT_IYUV.rawValue
        // No SDL format of their own: 4:2:2 chroma is read every other row (4:2:0, no copy),
        // grey gets neutral chroma planes.
        case .yuv422p, .grey: SDL_PIXELFORMAT_IYUV.rawValue
        case .nv16: SDL_PIXELFORMAT_NV12.rawValue
        case .nv61: SDL_PIXELFORMAT_NV21.rawValue
        case .yvu420: SDL_PIXELFORMAT_YV12.rawValue
        // V4L2's AR24/XR24 are B, G, R, A bytes: SDL's ARGB8888/RGB888 words on little-endian.
        case .bgra32: SDL_PIXELFORMAT_ARGB8888.rawValue
        case .xbgr32: SDL_PIXELFORMAT_RGB888.rawValue
        case .rgb24: SDL_PIXELFORMAT_RGB24.rawValue
        case .bgr24: SDL_PIXELFORMAT_BGR24.rawValue
        case .mjpeg, .jpeg: SDL_PIXELFORMAT_ARGB8888.rawValue
        default: nil
        }
    }

    private func videoTexture(
        for layer: ObjectIdentifier, format: UInt32, width: Int, height: Int,
        fullRange: Bool, _ r: OpaquePointer
    ) -> OpaquePointer? {
        if var t = videoTextures[layer] {
            if t.format == format, t.width == width, t.height == height {
                t.fullRange = fullRange
                videoTextures[layer] = t
                return t.texture
            }
            SDL_DestroyTexture(t.texture)
            videoTextures[layer] = nil
        }
        guard let tex = SDL_CreateTexture(r, format, Int32(SDL_TEXTUREACCESS_STREAMING.rawValue), Int32(width), Int32(height)) else {
            return nil
        }
        SDL_SetTextureBlendMode(tex, SDL_BLENDMODE_BLEND)
        videoTextures[layer] = VideoTexture(texture: tex, format: format, width: width, height: height, fullRange: fullRange)
        return tex
    }

    /// The size of the texture a layer's picture is drawn from (tests: MJPEG is decoded scaled).
    func videoTextureSize(of layer: Layer) -> (width: Int, height: Int)? {
        videoTextures[ObjectIdentifier(layer)].map { ($0.width, $0.height) }
    }

    /// Copies a frame into the layer's texture (raw YUV and RGB as they are; JPEG decoded once).
    private func upload(_ sample: SampleBuffer, for layer: ObjectIdentifier, drawnSize: CGSize, _ r: OpaquePointer) {
        guard let pf = sample.pixelFormat, let dims = sample.dimensions, let format = Self.textureFormat(pf) else { return }
        let w = dims.width, h = dims.height
        if pf.isCompressed {
            // Decoded at the size drawn (not below it), at most the frame's own.
            let target = (width: Int(drawnSize.width.rounded(.up)), height: Int(drawnSize.height.rounded(.up)))
            guard let size = sample.withUnsafeBytes({ jpegDecoder.decode($0, target: target) }),
                let tex = videoTexture(for: layer, format: format, width: size.width, height: size.height, fullRange: true, r)
            else { return }
            jpegDecoder.pixels.withUnsafeBytes { _ = SDL_UpdateTexture(tex, nil, $0.baseAddress, Int32(size.width * 4)) }
            return
        }
        let full = sample.colorRange == .full
        guard let tex = videoTexture(for: layer, format: format, width: w, height: h, fullRange: full, r) else { return }
        // The software renderer converts YUV on upload, the OpenGL one when drawing: both see the
        // frame's levels.
        SDL_SetYUVConversionMode(full ? SDL_YUV_CONVERSION_JPEG : SDL_YUV_CONVERSION_BT601)
        let pitch = sample.bytesPerRow(plane: 0)
        switch pf {
        case .nv16, .nv61:
            // The 4:2:2 chroma plane (full height) read every other row, as 4:2:0.
            twoPlanes(sample, tex, pitch: pitch, rowStep: 2)
        case .yuv422p:
            // Its chroma planes (full height) read every other row, as 4:2:0.
            threePlanes(sample, tex, pitch: pitch, rowStep: 2)
        case .grey:
            let cPitch = (w + 1) / 2, ch = (h + 1) / 2
            if neutralChroma.count < cPitch * ch { neutralChroma = [UInt8](repeating: 128, count: cPitch * ch) }
            sample.withUnsafeBytes(plane: 0) { y in
                guard let yBase = y.baseAddress, y.count >= pitch * (h - 1) + w else { return }
                neutralChroma.withUnsafeBufferPointer { c in
                    _ = SDL_UpdateYUVTexture(
                        tex, nil, yBase.assumingMemoryBound(to: UInt8.self), Int32(pitch),
                        c.baseAddress, Int32(cPitch), c.baseAddress, Int32(cPitch))
                }
            }
        case .nv12, .nv21, .nv12m, .nv21m:
            twoPlanes(sample, tex, pitch: pitch, rowStep: 1)
        case .yuv420, .yvu420, .yuv420m:
            // (The sample's planes are Y, Cb, Cr whatever the memory order, as SDL's take them.)
            threePlanes(sample, tex, pitch: pitch, rowStep: 1)
        default:
            sample.withUnsafeBytes(plane: 0) { bytes in
                guard let base = bytes.baseAddress, bytes.count >= pitch * (h - 1) + pitch else { return }
                _ = SDL_UpdateTexture(tex, nil, base, Int32(pitch))
            }
        }
    }

    /// Uploads a frame's Y plane and interleaved chroma plane, the chroma read every `rowStep`th row.
    private func twoPlanes(_ sample: SampleBuffer, _ tex: OpaquePointer, pitch: Int, rowStep: Int) {
        let uvPitch = sample.bytesPerRow(plane: 1)
        sample.withUnsafeBytes(plane: 0) { y in
            sample.withUnsafeBytes(plane: 1) { uv in
                guard let yBase = y.baseAddress, let uvBase = uv.baseAddress else { return }
                _ = SDL_UpdateNVTexture(
                    tex, nil, yBase.assumingMemoryBound(to: UInt8.self), Int32(pitch),
                    uvBase.assumingMemoryBound(to: UInt8.self), Int32(rowStep * uvPitch))
            }
        }
    }

    /// Uploads a frame's Y, Cb and Cr planes, the chroma planes read every `rowStep`th row.
    private func threePlanes(_ sample: SampleBuffer, _ tex: OpaquePointer, pitch: Int, rowStep: Int) {
        let cPitch = sample.bytesPerRow(plane: 1), crPitch = sample.bytesPerRow(plane: 2)
        sample.withUnsafeBytes(plane: 0) { y in
            sample.withUnsafeBytes(plane: 1) { u in
                sample.withUnsafeBytes(plane: 2) { v in
                    guard let yb = y.baseAddress, let ub = u.baseAddress, let vb = v.baseAddress else { return }
                    _ = SDL_UpdateYUVTexture(
                        tex, nil, yb.assumingMemoryBound(to: UInt8.self), Int32(pitch),
                        ub.assumingMemoryBound(to: UInt8.self), Int32(rowStep * cPitch),
                        vb.assumingMemoryBound(to: UInt8.self), Int32(rowStep * crPitch))
                }
            }
        }
    }
}
