// SDL's video subsystem, shared by the windows.
internal import CSDL2
import Foundation

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
