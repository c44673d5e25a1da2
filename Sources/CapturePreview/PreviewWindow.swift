import Capture
internal import CSDL2
import Foundation

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

    var window: OpaquePointer?
    var renderer: OpaquePointer?
    let windowID: UInt32
    var textures: [ObjectIdentifier: CachedTexture] = [:]
    var videoTextures: [ObjectIdentifier: VideoTexture] = [:]
    let jpegDecoder = ScaledJPEGDecoder()
    private var _title: String
    /// What the last drawn frame showed, and whether the window must be drawn again anyway (shown,
    /// exposed, resized): the event loop draws only when something changed.
    var lastDrawn: [DrawCommand] = []
    var needsDisplay = true
    /// Cb and Cr planes of 128 for grey frames (drawn through a YUV texture).
    var neutralChroma: [UInt8] = []

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

    func syncRootLayer() {
        let s = size
        if rootLayer.frame.size != s { rootLayer.frame = CGRect(origin: rootLayer.frame.origin, size: s) }
    }

    struct WeakWindow { weak var window: PreviewWindow? }
    // Used on the SDL thread only (checked where SDL is entered).
    nonisolated(unsafe) static var open: [WeakWindow] = []
    nonisolated(unsafe) static var loopStopped = false

    /// The size last reported in `.resized` (SDL reports no change it made itself, such as
    /// going full screen without a window manager).
    var reportedSize: CGSize?
    var resizePending = false

    struct CachedTexture {
        var texture: OpaquePointer
        var imageID: UInt64
    }
    struct VideoTexture {
        var texture: OpaquePointer
        var format: UInt32
        var width: Int
        var height: Int
        var fullRange: Bool
    }

    /// Frames drawn so far (tests: the event loop skips unchanged frames).
    var framesRendered = 0
}
