import Capture
internal import CSDL2
import Foundation

/// Something that happened to a window: a key, the pointer, a resize, a close request.
/// Plain value; any thread.
public enum PreviewEvent: Sendable, Hashable {
    /// A key went down (auto-repeats included, `isRepeat` true).
    case keyDown(Key, isRepeat: Bool)
    /// A key came up.
    case keyUp(Key)
    /// A pointer button went down at a point in window (root layer) coordinates; 1 is the left
    /// button.
    case pointerDown(CGPoint, button: Int)
    /// A pointer button came up.
    case pointerUp(CGPoint, button: Int)
    /// The pointer moved.
    case pointerMoved(CGPoint)
    /// The window's size changed (the root layer already has the new frame).
    case resized(CGSize)
    /// The user asked to close the window (its close button, Ctrl-C or SIGTERM); the window
    /// stays open until `close()`.
    case closeRequested
}

/// A keyboard key: SDL's key code (for printable keys, the lower-case character's code point).
/// Plain value; any thread.
public struct Key: Sendable, Hashable, CustomStringConvertible {
    public var code: Int32
    public init(code: Int32) { self.code = code }
    /// The key that types `character` (lower-case letters, digits, punctuation).
    public init(_ character: Character) { code = Int32(character.unicodeScalars.first.map { $0.value } ?? 0) }

    public static let escape = Key(code: 27)
    public static let space = Key(code: 32)
    public static let enter = Key(code: 13)

    public var description: String {
        switch code {
        case 27: "Esc"
        case 32: "Space"
        case 13: "Enter"
        case 33..<127: String(UnicodeScalar(UInt8(code)))
        default: "key \(code)"
        }
    }
}

/// A top-level window showing a tree of layers (`rootLayer`, the seeds' `self.view.layer`),
/// drawn with SDL2.
///
/// Thread-bound: SDL wants one thread, so every window, `processEvents()` and the event loop
/// belong to the thread that opened the first window (the main thread in an app; a
/// precondition checks it) until the last window closes. The layers themselves may be changed
/// from any thread. Event handlers run on that thread, inside `processEvents()`/`runEventLoop()`.
public final class PreviewWindow {
    /// The layer filling the window; its frame follows the window's size.
    public let rootLayer = Layer()
    /// Called for every event of this window.
    public var eventHandler: ((PreviewEvent) -> Void)?

    private var window: OpaquePointer?
    private var renderer: OpaquePointer?
    private let windowID: UInt32
    private var textures: [ObjectIdentifier: CachedTexture] = [:]
    private var videoTextures: [ObjectIdentifier: VideoTexture] = [:]
    private let jpegDecoder = ScaledJPEGDecoder()
    private var _title: String
    /// What the last drawn frame showed, and whether the window must be drawn again anyway (shown,
    /// exposed, resized): the event loop draws only when something changed.
    private var lastDrawn: [DrawCommand] = []
    private var needsDisplay = true
    /// Cb and Cr planes of 128 for grey frames (drawn through a YUV texture).
    private var neutralChroma: [UInt8] = []

    /// Opens a hidden window of `size` points (call `show()`). Throws `.noDisplay` when there is
    /// no display to open it on, `.windowFailed` when SDL cannot make it.
    public init(title: String, size: CGSize) throws(PreviewError) {
        try Self.checkDisplay(ProcessInfo.processInfo.environment)
        try SDLVideo.retain()
        let w = Int32(max(1, size.width.rounded())), h = Int32(max(1, size.height.rounded()))
        // SDL_WINDOWPOS_UNDEFINED is a macro Swift cannot import; its value.
        let undefined: Int32 = 0x1FFF_0000
        guard
            let win = SDL_CreateWindow(
                title, undefined, undefined, w, h,
                SDL_WINDOW_HIDDEN.rawValue | SDL_WINDOW_RESIZABLE.rawValue)
        else {
            let why = SDLVideo.lastError
            SDLVideo.release()
            throw PreviewError(
                .noDisplay, "cannot open a window (\(why)): check DISPLAY, or run 'capture serve' for a preview in a browser")
        }
        guard let ren = SDL_CreateRenderer(win, -1, 0) else {
            let why = SDLVideo.lastError
            SDL_DestroyWindow(win)
            SDLVideo.release()
            throw PreviewError(.windowFailed, "cannot make a renderer for the window (\(why)): check the display's OpenGL support")
        }
        window = win
        renderer = ren
        windowID = SDL_GetWindowID(win)
        _title = title
        SDL_SetRenderDrawBlendMode(ren, SDL_BLENDMODE_BLEND)
        rootLayer.frame = CGRect(origin: .zero, size: CGSize(width: Int(w), height: Int(h)))
        reportedSize = rootLayer.frame.size
        rootLayer.backgroundColor = .black
        Self.open.append(WeakWindow(window: self))
    }

    /// Throws `.noDisplay` when neither `DISPLAY` nor `WAYLAND_DISPLAY` is set (and no
    /// `SDL_VIDEODRIVER` says otherwise). Pure; any thread.
    public static func checkDisplay(_ environment: [String: String]) throws(PreviewError) {
        func set(_ k: String) -> Bool { !(environment[k] ?? "").isEmpty }
        guard set("DISPLAY") || set("WAYLAND_DISPLAY") || set("SDL_VIDEODRIVER") else {
            throw PreviewError(
                .noDisplay, "no display: DISPLAY and WAYLAND_DISPLAY are unset; run 'capture serve' for a preview in a browser")
        }
    }

    deinit {
        destroy()
    }

    /// Whether the window was closed.
    public var isClosed: Bool { window == nil }

    /// The title bar's text.
    public var title: String {
        get { _title }
        set {
            _title = newValue
            if let window { SDL_SetWindowTitle(window, newValue) }
        }
    }

    /// The window's size in points; setting it resizes the window (the root layer follows).
    public var size: CGSize {
        get {
            guard let window else { return .zero }
            var w: Int32 = 0, h: Int32 = 0
            SDL_GetWindowSize(window, &w, &h)
            return CGSize(width: Int(w), height: Int(h))
        }
        set {
            guard let window else { return }
            SDL_SetWindowSize(window, Int32(max(1, newValue.width.rounded())), Int32(max(1, newValue.height.rounded())))
            syncRootLayer()
        }
    }

    /// Where the window's top-left corner is on the screen; setting it moves the window.
    public var position: CGPoint {
        get {
            guard let window else { return .zero }
            var x: Int32 = 0, y: Int32 = 0
            SDL_GetWindowPosition(window, &x, &y)
            return CGPoint(x: Int(x), y: Int(y))
        }
        set {
            guard let window else { return }
            SDL_SetWindowPosition(window, Int32(newValue.x.rounded()), Int32(newValue.y.rounded()))
        }
    }

    /// Full screen on the window's display (desktop resolution), or windowed. Without a window
    /// manager (an X server alone, such as Xvfb) nobody acts on SDL's full-screen request, so the
    /// window is also made borderless and placed over the display itself, and put back when
    /// leaving full screen.
    public var isFullscreen: Bool {
        get {
            window.map { SDL_GetWindowFlags($0) & SDL_WINDOW_FULLSCREEN_DESKTOP.rawValue == SDL_WINDOW_FULLSCREEN_DESKTOP.rawValue }
                ?? false
        }
        set {
            guard let window, newValue != isFullscreen else { return }
            if newValue {
                var bounds = SDL_Rect()
                let display = SDL_GetWindowDisplayIndex(window)
                if display >= 0, SDL_GetDisplayBounds(display, &bounds) == 0 {
                    windowedFrame = CGRect(origin: position, size: size)
                    SDL_SetWindowBordered(window, SDL_FALSE)
                    SDL_SetWindowPosition(window, bounds.x, bounds.y)
                    SDL_SetWindowSize(window, bounds.w, bounds.h)
                }
                SDL_SetWindowFullscreen(window, SDL_WINDOW_FULLSCREEN_DESKTOP.rawValue)
                SDL_RaiseWindow(window)
            } else {
                SDL_SetWindowFullscreen(window, 0)
                if let f = windowedFrame {
                    SDL_SetWindowBordered(window, SDL_TRUE)
                    SDL_SetWindowSize(window, Int32(f.width), Int32(f.height))
                    SDL_SetWindowPosition(window, Int32(f.minX), Int32(f.minY))
                    windowedFrame = nil
                }
            }
            syncRootLayer()
            needsDisplay = true
            // Reported at the next processEvents, if SDL does not report it.
            resizePending = true
        }
    }
    /// Where the window was before it went full screen.
    private var windowedFrame: CGRect?

    /// Shows the window and draws it.
    public func show() {
        guard let window else { return }
        SDL_ShowWindow(window)
        render()
    }

    /// Hides the window (it stays open).
    public func hide() {
        guard let window else { return }
        SDL_HideWindow(window)
    }

    /// Closes the window, frees its textures and drops `eventHandler` (a handler that captures
    /// the window would otherwise keep it alive); closing twice does nothing. The event loop
    /// ends when the last window closes. Close a window on its thread: SDL's calls in a `deinit`
    /// on another thread stop the process.
    public func close() {
        destroy()
        eventHandler = nil
    }

    private func destroy() {
        guard let window else { return }
        SDLVideo.checkThread()
        for t in textures.values { SDL_DestroyTexture(t.texture) }
        for t in videoTextures.values { SDL_DestroyTexture(t.texture) }
        textures = [:]
        videoTextures = [:]
        lastDrawn = []
        if let renderer { SDL_DestroyRenderer(renderer) }
        SDL_DestroyWindow(window)
        self.window = nil
        renderer = nil
        Self.open.removeAll { $0.window == nil || $0.window === self }
        SDLVideo.release()
    }

    private func syncRootLayer() {
        let s = size
        if rootLayer.frame.size != s { rootLayer.frame = CGRect(origin: rootLayer.frame.origin, size: s) }
    }

    // MARK: Events

    private struct WeakWindow { weak var window: PreviewWindow? }
    // Used on the SDL thread only (checked where SDL is entered).
    nonisolated(unsafe) private static var open: [WeakWindow] = []
    nonisolated(unsafe) private static var loopStopped = false

    /// The open windows.
    public static var windows: [PreviewWindow] { open.compactMap(\.window) }

    /// Handles the events waiting for every window (calling their handlers) without waiting for
    /// more.
    public static func processEvents() {
        guard SDLVideo.users > 0 else { return }
        SDLVideo.checkThread()
        var e = SDL_Event()
        while SDL_PollEvent(&e) != 0 {
            let type = e.type
            if type == SDL_QUIT.rawValue {
                for w in windows { w.eventHandler?(.closeRequested) }
                continue
            }
            let id: UInt32
            switch type {
            case SDL_WINDOWEVENT.rawValue: id = e.window.windowID
            case SDL_KEYDOWN.rawValue, SDL_KEYUP.rawValue: id = e.key.windowID
            case SDL_MOUSEBUTTONDOWN.rawValue, SDL_MOUSEBUTTONUP.rawValue: id = e.button.windowID
            case SDL_MOUSEMOTION.rawValue: id = e.motion.windowID
            default: continue
            }
            guard let w = windows.first(where: { $0.windowID == id }) else { continue }
            w.handle(e)
        }
        for w in windows where w.resizePending { w.reportResize() }
    }

    /// The size last reported in `.resized` (SDL reports no change it made itself, such as
    /// going full screen without a window manager).
    private var reportedSize: CGSize?
    private var resizePending = false

    private func reportResize() {
        resizePending = false
        syncRootLayer()
        let s = size
        guard s != reportedSize else { return }
        reportedSize = s
        eventHandler?(.resized(s))
    }

    private func handle(_ e: SDL_Event) {
        switch e.type {
        case SDL_WINDOWEVENT.rawValue:
            let kind = UInt32(e.window.event)
            // Shown, exposed, resized, moved between screens: the picture must be drawn again.
            needsDisplay = true
            if kind == SDL_WINDOWEVENT_SIZE_CHANGED.rawValue {
                reportResize()
            } else if kind == SDL_WINDOWEVENT_CLOSE.rawValue {
                eventHandler?(.closeRequested)
            }
        case SDL_KEYDOWN.rawValue:
            eventHandler?(.keyDown(Key(code: e.key.keysym.sym), isRepeat: e.key.repeat != 0))
        case SDL_KEYUP.rawValue:
            eventHandler?(.keyUp(Key(code: e.key.keysym.sym)))
        case SDL_MOUSEBUTTONDOWN.rawValue:
            eventHandler?(.pointerDown(CGPoint(x: Int(e.button.x), y: Int(e.button.y)), button: Int(e.button.button)))
        case SDL_MOUSEBUTTONUP.rawValue:
            eventHandler?(.pointerUp(CGPoint(x: Int(e.button.x), y: Int(e.button.y)), button: Int(e.button.button)))
        case SDL_MOUSEMOTION.rawValue:
            eventHandler?(.pointerMoved(CGPoint(x: Int(e.motion.x), y: Int(e.motion.y))))
        default:
            break
        }
    }

    /// Runs the windows from a command-line `main.swift` (top-level code, not from inside a task
    /// or a main-queue block): handles events, up to `framesPerSecond` times a second draws every
    /// shown window that has something new to show (a layer changed, a camera frame came, the
    /// window was exposed or resized), and between frames runs the main run loop, so `DispatchQueue.main` work
    /// and main-actor tasks run beside it. Returns when the last window closes or
    /// `stopEventLoop()` is called.
    public static func runEventLoop(framesPerSecond: Double = 60) {
        loopStopped = false
        let period = 1 / max(1, min(240, framesPerSecond))
        while !loopStopped && !windows.isEmpty {
            let deadline = Date(timeIntervalSinceNow: period)
            processEvents()
            for w in windows where w.isShown { w.renderIfChanged() }
            // Main-queue blocks and timers, until the next frame is due.
            while !loopStopped, Date() < deadline {
                if !RunLoop.main.run(mode: .default, before: deadline) {
                    Thread.sleep(until: deadline)
                }
            }
        }
    }

    /// Makes `runEventLoop()` return after the current step.
    public static func stopEventLoop() { loopStopped = true }

    private var isShown: Bool {
        guard let window else { return false }
        return SDL_GetWindowFlags(window) & SDL_WINDOW_SHOWN.rawValue != 0
    }

    // MARK: Drawing

    private struct CachedTexture {
        var texture: OpaquePointer
        var imageID: UInt64
    }
    private struct VideoTexture {
        var texture: OpaquePointer
        var format: UInt32
        var width: Int
        var height: Int
        var fullRange: Bool
    }

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

    /// Frames drawn so far (tests: the event loop skips unchanged frames).
    private(set) var framesRendered = 0

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

    private func setClip(_ clip: CGRect?, _ r: OpaquePointer) {
        if let clip {
            let c = clip.integral
            var rect = SDL_Rect(x: Int32(c.minX), y: Int32(c.minY), w: Int32(max(0, c.width)), h: Int32(max(0, c.height)))
            SDL_RenderSetClipRect(r, &rect)
        } else {
            SDL_RenderSetClipRect(r, nil)
        }
    }

    private static func frect(_ r: CGRect) -> SDL_FRect {
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

    private func drawVideo(_ video: VideoDrawing, _ c: DrawCommand, _ r: OpaquePointer) {
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
            // The 4:2:2 chroma plane (full height) read with twice its pitch: every other row.
            sample.withUnsafeBytes(plane: 0) { all in
                guard let yBase = all.baseAddress, all.count >= 2 * pitch * h else { return }
                _ = SDL_UpdateNVTexture(
                    tex, nil, yBase.assumingMemoryBound(to: UInt8.self), Int32(pitch),
                    (yBase + pitch * h).assumingMemoryBound(to: UInt8.self), Int32(2 * pitch))
            }
        case .yuv422p:
            let cPitch = pitch / 2
            sample.withUnsafeBytes(plane: 0) { all in
                guard let base = all.baseAddress, h >= 1, all.count >= pitch * h + 2 * cPitch * h else { return }
                let u = base + pitch * h, v = u + cPitch * h
                _ = SDL_UpdateYUVTexture(
                    tex, nil, base.assumingMemoryBound(to: UInt8.self), Int32(pitch),
                    u.assumingMemoryBound(to: UInt8.self), Int32(2 * cPitch),
                    v.assumingMemoryBound(to: UInt8.self), Int32(2 * cPitch))
            }
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
            let uvPitch = sample.planeCount > 1 ? sample.bytesPerRow(plane: 1) : pitch
            sample.withUnsafeBytes(plane: 0) { y in
                guard let yBase = y.baseAddress else { return }
                if sample.planeCount > 1 {
                    sample.withUnsafeBytes(plane: 1) { uv in
                        guard let uvBase = uv.baseAddress, y.count >= pitch * h, uv.count >= uvPitch * ((h + 1) / 2) else { return }
                        _ = SDL_UpdateNVTexture(
                            tex, nil, yBase.assumingMemoryBound(to: UInt8.self), Int32(pitch),
                            uvBase.assumingMemoryBound(to: UInt8.self), Int32(uvPitch))
                    }
                } else {
                    guard y.count >= pitch * h + pitch * ((h + 1) / 2) else { return }
                    _ = SDL_UpdateNVTexture(
                        tex, nil, yBase.assumingMemoryBound(to: UInt8.self), Int32(pitch),
                        (yBase + pitch * h).assumingMemoryBound(to: UInt8.self), Int32(pitch))
                }
            }
        case .yuv420, .yvu420, .yuv420m:
            let cPitch = sample.planeCount > 1 ? sample.bytesPerRow(plane: 1) : pitch / 2
            let ch = (h + 1) / 2
            if sample.planeCount > 2 {
                sample.withUnsafeBytes(plane: 0) { y in
                    sample.withUnsafeBytes(plane: 1) { u in
                        sample.withUnsafeBytes(plane: 2) { v in
                            guard let yb = y.baseAddress, let ub = u.baseAddress, let vb = v.baseAddress,
                                y.count >= pitch * h, u.count >= cPitch * ch, v.count >= cPitch * ch
                            else { return }
                            _ = SDL_UpdateYUVTexture(
                                tex, nil, yb.assumingMemoryBound(to: UInt8.self), Int32(pitch),
                                ub.assumingMemoryBound(to: UInt8.self), Int32(cPitch),
                                vb.assumingMemoryBound(to: UInt8.self), Int32(cPitch))
                        }
                    }
                }
            } else {
                sample.withUnsafeBytes(plane: 0) { all in
                    guard let base = all.baseAddress, all.count >= pitch * h + 2 * cPitch * ch else { return }
                    let first = base + pitch * h, second = first + cPitch * ch
                    // SDL's YV12 texture takes Y, then V, then U, as the frame holds them: the plane
                    // pointers go in the order U, V.
                    let (u, v) = pf == .yvu420 ? (second, first) : (first, second)
                    _ = SDL_UpdateYUVTexture(
                        tex, nil, base.assumingMemoryBound(to: UInt8.self), Int32(pitch),
                        u.assumingMemoryBound(to: UInt8.self), Int32(cPitch),
                        v.assumingMemoryBound(to: UInt8.self), Int32(cPitch))
                }
            }
        default:
            sample.withUnsafeBytes(plane: 0) { bytes in
                guard let base = bytes.baseAddress, bytes.count >= pitch * (h - 1) + pitch else { return }
                _ = SDL_UpdateTexture(tex, nil, base, Int32(pitch))
            }
        }
    }
}

/// SDL's video subsystem, started for the first window and stopped after the last (so that
/// closing every window closes the display connection too). Used on one thread, `owner`.
enum SDLVideo {
    nonisolated(unsafe) static var users = 0
    nonisolated(unsafe) static var owner: pthread_t?

    /// Stops a call from a thread other than the one SDL runs on.
    static func checkThread() {
        if let owner {
            precondition(
                pthread_equal(owner, pthread_self()) != 0,
                "PreviewWindow used from a thread other than the one that opened the first window (SDL wants one thread)")
        }
    }

    static var lastError: String { String(cString: SDL_GetError()) }

    static func retain() throws(PreviewError) {
        checkThread()
        if users == 0 {
            owner = pthread_self()
            // Only the display the environment names: left to itself SDL falls back to drivers
            // such as KMS/DRM or offscreen, where a window nobody sees opens without an error.
            let env = ProcessInfo.processInfo.environment
            if (env["SDL_VIDEODRIVER"] ?? "").isEmpty {
                let drivers = [("DISPLAY", "x11"), ("WAYLAND_DISPLAY", "wayland")].filter { !(env[$0.0] ?? "").isEmpty }.map(\.1)
                SDL_SetHint("SDL_VIDEODRIVER", drivers.joined(separator: ","))
            }
            guard SDL_InitSubSystem(UInt32(SDL_INIT_VIDEO)) == 0 else {
                let why = lastError
                SDL_Quit()
                owner = nil
                throw PreviewError(
                    .noDisplay, "cannot use the display (\(why)): check DISPLAY, or run 'capture serve' for a preview in a browser")
            }
        }
        users += 1
    }

    static func release() {
        users -= 1
        if users == 0 {
            SDL_QuitSubSystem(UInt32(SDL_INIT_VIDEO))
            SDL_Quit()
            owner = nil
        }
    }
}
