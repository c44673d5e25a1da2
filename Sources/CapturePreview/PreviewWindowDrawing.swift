// Drawing a window: the layer tree's snapshot, fills, borders, images.
import Capture
internal import CSDL2
import Foundation

extension PreviewWindow {
    /// Draws the layer tree now (`runEventLoop` does this for every frame). Preview layers take
    /// their newest frame, upload it and let go of it; without a new frame they show the last.
    public func render() {
        guard renderer != nil else { return }
        SDLVideo.checkThread()
        draw(snapshot())
    }

    /// Draws the layer tree if it would look different from the last drawn frame.
    func renderIfChanged() {
        guard renderer != nil else { return }
        SDLVideo.checkThread()
        let commands = snapshot()
        let changed =
            needsDisplay || commands.count != lastDrawn.count || zip(commands, lastDrawn).contains { !$0.drawsTheSame(as: $1) }
            || commands.contains { $0.video?.source.hasNewFrame ?? false }
        if changed { draw(commands) }
    }

    private func snapshot() -> [DrawCommand] {
        var commands: [DrawCommand] = []
        Layer.locked {
            // The root layer's frame is the window; its superlayer space is the window.
            rootLayer.snapshotLocked(into: &commands, origin: .zero, opacity: 1, clip: nil)
        }
        return commands
    }

    private func draw(_ commands: [DrawCommand]) {
        guard let renderer else { return }
        framesRendered += 1
        needsDisplay = false
        lastDrawn = commands
        // An opaque root background covering the window is the clear colour instead of a fill
        // (with a software OpenGL every full-window pass costs).
        var commands = commands
        var clear = Color.black
        if var root = commands.first, root.layer == ObjectIdentifier(rootLayer), root.clip == nil, root.cornerRadius == 0,
            let bg = root.background,
            bg.alpha * root.opacity >= 1, root.rect.contains(CGRect(origin: .zero, size: size))
        {
            clear = bg
            root.background = nil
            commands[0] = root
        }
        func byte(_ v: Double) -> UInt8 { UInt8(max(0, min(255, (v * 255).rounded()))) }
        SDL_SetRenderDrawColor(renderer, byte(clear.red), byte(clear.green), byte(clear.blue), 255)
        SDL_RenderSetClipRect(renderer, nil)
        SDL_RenderClear(renderer)
        var seen = Set<ObjectIdentifier>()
        for c in commands {
            seen.insert(c.layer)
            draw(c, renderer)
        }
        for (id, t) in textures where !seen.contains(id) {
            SDL_DestroyTexture(t.texture)
            textures[id] = nil
        }
        for (id, t) in videoTextures where !seen.contains(id) {
            SDL_DestroyTexture(t.texture)
            videoTextures[id] = nil
        }
        SDL_RenderSetClipRect(renderer, nil)
        SDL_RenderPresent(renderer)
    }

    func setClip(_ clip: CGRect?, _ r: OpaquePointer) {
        if let clip {
            let c = clip.integral
            var rect = SDL_Rect(x: Int32(c.minX), y: Int32(c.minY), w: Int32(max(0, c.width)), h: Int32(max(0, c.height)))
            SDL_RenderSetClipRect(r, &rect)
        } else {
            SDL_RenderSetClipRect(r, nil)
        }
    }

    static func frect(_ r: CGRect) -> SDL_FRect {
        SDL_FRect(x: Float(r.minX), y: Float(r.minY), w: Float(r.width), h: Float(r.height))
    }

    private func fill(_ rect: CGRect, _ color: Color, opacity: Double, _ r: OpaquePointer, rounded parts: [CGRect]? = nil) {
        func byte(_ v: Double) -> UInt8 { UInt8(max(0, min(255, (v * 255).rounded()))) }
        let a = color.alpha * opacity
        guard a > 0, rect.width > 0, rect.height > 0 else { return }
        SDL_SetRenderDrawColor(r, byte(color.red), byte(color.green), byte(color.blue), byte(a))
        // Opaque fills replace what is under them: no blending (a read-back per pixel).
        SDL_SetRenderDrawBlendMode(r, byte(a) == 255 ? SDL_BLENDMODE_NONE : SDL_BLENDMODE_BLEND)
        if let parts {
            let rects = parts.map(Self.frect)
            _ = rects.withUnsafeBufferPointer { SDL_RenderFillRectsF(r, $0.baseAddress, Int32($0.count)) }
            return
        }
        var f = Self.frect(rect)
        SDL_RenderFillRectF(r, &f)
    }

    private func draw(_ c: DrawCommand, _ r: OpaquePointer) {
        setClip(c.clip, r)
        if c.isBorder, c.cornerRadius > 0 {
            fill(
                c.rect, c.borderColor, opacity: c.opacity, r,
                rounded: RoundedRect.ring(c.rect, radius: c.cornerRadius, width: c.borderWidth))
            return
        }
        if c.isBorder {
            let w = min(c.borderWidth, c.rect.width / 2, c.rect.height / 2), b = c.rect
            for part in [
                CGRect(x: b.minX, y: b.minY, width: b.width, height: w),
                CGRect(x: b.minX, y: b.maxY - w, width: b.width, height: w),
                CGRect(x: b.minX, y: b.minY + w, width: w, height: b.height - 2 * w),
                CGRect(x: b.maxX - w, y: b.minY + w, width: w, height: b.height - 2 * w),
            ] {
                fill(part, c.borderColor, opacity: c.opacity, r)
            }
            return
        }
        if let bg = c.background {
            fill(c.rect, bg, opacity: c.opacity, r, rounded: c.cornerRadius > 0 ? RoundedRect.fill(c.rect, radius: c.cornerRadius) : nil)
        }
        if let image = c.contents { drawImage(image, c, r) }
        if let video = c.video { drawVideo(video, c, r) }
    }

    private func drawImage(_ image: LayerImage, _ c: DrawCommand, _ r: OpaquePointer) {
        var cached = textures[c.layer]
        if cached?.imageID != image.id {
            if let old = cached { SDL_DestroyTexture(old.texture) }
            cached = nil
            guard
                let t = SDL_CreateTexture(
                    r, SDL_PIXELFORMAT_RGBA32.rawValue, Int32(SDL_TEXTUREACCESS_STATIC.rawValue),
                    Int32(image.width), Int32(image.height))
            else { return }
            image.pixels.withUnsafeBytes { _ = SDL_UpdateTexture(t, nil, $0.baseAddress, Int32(image.width * 4)) }
            SDL_SetTextureBlendMode(t, SDL_BLENDMODE_BLEND)
            cached = CachedTexture(texture: t, imageID: image.id)
            textures[c.layer] = cached
        }
        guard let t = cached?.texture else { return }
        let dst = Self.place(CGSize(width: image.width, height: image.height), in: c.rect, c.contentsGravity)
        if c.contentsGravity == .resizeAspectFill || c.contentsGravity == .center {
            setClip(c.clip.map { $0.intersection(c.rect) } ?? c.rect, r)
        }
        SDL_SetTextureAlphaMod(t, UInt8(max(0, min(255, (c.opacity * 255).rounded()))))
        var d = Self.frect(dst)
        SDL_RenderCopyF(r, t, nil, &d)
        setClip(c.clip, r)
    }

    static func place(_ size: CGSize, in rect: CGRect, _ gravity: ContentsGravity) -> CGRect {
        switch gravity {
        case .resize: return rect
        case .center:
            return CGRect(x: rect.midX - size.width / 2, y: rect.midY - size.height / 2, width: size.width, height: size.height)
        case .resizeAspect, .resizeAspectFill:
            let g = PreviewGeometry(bounds: rect, videoSize: size, gravity: gravity == .resizeAspect ? .resizeAspect : .resizeAspectFill)
            return g.videoRect
        }
    }
}
