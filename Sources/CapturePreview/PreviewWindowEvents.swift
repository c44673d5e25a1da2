// The windows' SDL events, handed to their handlers, and the event loop.
import Capture
internal import CSDL2
import Foundation

extension PreviewWindow {
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
}
