import CaptureTestSupport
import Foundation
import Testing

/// Every suite that puts windows on the shared X server, one test at a time (windows of two
/// tests would overlap in the screenshots).
@Suite(.serialized) struct DisplayTests {}

/// A real X server for the window tests: `Xvfb` on a display number it picks itself
/// (`-displayfd`), with a root colour a letterbox cannot be mistaken for, screenshots of the root
/// window through `xwd | convert`, and `DISPLAY` pointing at it while it runs. A missing `Xvfb`
/// is an error, never a skip. One server for the whole test process (`shared()`), stopped at
/// exit.
final class XvfbDisplay: @unchecked Sendable {
    nonisolated(unsafe) private static var sharedServer: Result<XvfbDisplay, TestFailure>?
    private static let sharedLock = NSLock()

    /// The process's server, started on first use.
    static func shared() throws -> XvfbDisplay {
        try sharedLock.withLock {
            if sharedServer == nil {
                do {
                    // In this process SDL draws in software: the OpenGL driver (Mesa and LLVM) would
                    // add ~100 MB resident, which the core suites' memory-growth checks running
                    // beside would take for a leak. `capture preview` (PreviewToolTests) runs the
                    // OpenGL renderer in its own process.
                    setenv("SDL_RENDER_DRIVER", "software", 1)
                    // (and the window's surface without an OpenGL texture behind it)
                    setenv("SDL_FRAMEBUFFER_ACCELERATION", "0", 1)
                    sharedServer = .success(try XvfbDisplay())
                    atexit { XvfbDisplay.stopShared() }
                } catch let e as TestFailure {
                    sharedServer = .failure(e)
                } catch {
                    sharedServer = .failure(TestFailure("Xvfb: \(error)"))
                }
            }
            return try sharedServer!.get()
        }
    }

    private static func stopShared() {
        if case .success(let x)? = sharedServer { x.stop() }
    }

    /// The root window's colour (#336699).
    static let rootColor = (r: 0x33, g: 0x66, b: 0x99)
    let display: String
    private let process: Process
    private let serverPID: Int32
    private let outputPipe: Pipe
    private let savedDisplay: String?

    init(width: Int = 900, height: Int = 900) throws {
        let xvfb = "/usr/bin/Xvfb"
        guard FileManager.default.isExecutableFile(atPath: xvfb) else {
            throw TestFailure("no \(xvfb): install xvfb, x11-apps, x11-xserver-utils and imagemagick (scripts/test does)")
        }
        // Started by a small shell that kills the server once this process is gone, however it
        // ends (atexit handlers do not run after a crash or a kill).
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        let me = getpid()
        p.arguments = [
            "-c",
            """
            \(xvfb) -displayfd 1 -screen 0 \(width)x\(height)x24 -nolisten tcp -noreset 2>/dev/null & x=$!
            echo "pid $x"
            while kill -0 \(me) 2>/dev/null && kill -0 $x 2>/dev/null; do sleep 1; done
            kill -9 $x 2>/dev/null
            """,
        ]
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        try p.run()
        // The server's pid, then the display number once it accepts clients (or nothing, if it
        // exits at once).
        var text = ""
        var pid: Int32?, number: Int?
        while number == nil {
            let chunk = out.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            text += String(decoding: chunk, as: UTF8.self)
            for line in text.split(separator: "\n") {
                if line.hasPrefix("pid ") { pid = Int32(line.dropFirst(4)) } else if let n = Int(line) { number = n }
            }
        }
        // The read end stays open: a server writing to a closed pipe would die of SIGPIPE.
        outputPipe = out
        guard let n = number, let pid else {
            if let pid { kill(pid, SIGKILL) }
            kill(p.processIdentifier, SIGKILL)
            p.waitForExit()
            throw TestFailure("Xvfb did not start (said '\(text)')")
        }
        serverPID = pid
        process = p
        display = ":\(n)"
        savedDisplay = ProcessInfo.processInfo.environment["DISPLAY"]
        setenv("DISPLAY", display, 1)
        // The first clients can be refused for a moment after the server said it is ready.
        var attempt = 0
        while true {
            do {
                try run("/usr/bin/xsetroot", ["-display", display, "-solid", "#336699"])
                break
            } catch {
                attempt += 1
                if attempt >= 50 { stop(); throw error }
                usleep(100_000)
            }
        }
    }

    /// Stops the server (and its watchdog) and puts `DISPLAY` back.
    func stop() {
        if let savedDisplay { setenv("DISPLAY", savedDisplay, 1) } else { unsetenv("DISPLAY") }
        guard process.isRunning else { return }
        // SIGKILL: a child spawned from a dispatch thread may inherit a mask that blocks SIGTERM.
        kill(serverPID, SIGKILL)
        kill(process.processIdentifier, SIGKILL)
        process.waitForExit()
        let n = display.dropFirst()
        try? FileManager.default.removeItem(atPath: "/tmp/.X\(n)-lock")
        try? FileManager.default.removeItem(atPath: "/tmp/.X11-unix/X\(n)")
    }

    deinit { stop() }

    /// The screen, or the part of it in `rect`, RGB. (Cut by convert, so that the test process
    /// never holds the whole screen: big buffers freed here stay resident in malloc's arenas,
    /// which the core suites' memory-growth checks running beside would count.)
    func screenshot(of rect: CGRect? = nil) throws -> RGBImage {
        let crop = rect.map { " -crop \(Int($0.width))x\(Int($0.height))+\(Int($0.minX))+\(Int($0.minY)) +repage" } ?? ""
        let data = try run("/bin/sh", ["-c", "/usr/bin/xwd -root -display \(display) -silent | /usr/bin/convert xwd:-\(crop) ppm:-"])
        return try Self.parsePPM(data)
    }

    @discardableResult
    private func run(_ tool: String, _ args: [String]) throws -> Data {
        guard FileManager.default.isExecutableFile(atPath: args.first == "-c" ? "/usr/bin/xwd" : tool) else {
            throw TestFailure("no \(tool): install x11-apps, x11-xserver-utils and imagemagick (scripts/test does)")
        }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: tool)
        p.arguments = args
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        let said = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitForExit()
        guard p.terminationStatus == 0 else {
            throw TestFailure("\(tool) \(args.joined(separator: " ")) exited \(p.terminationStatus): \(said.prefix(300))")
        }
        return data
    }

    /// Reads a binary PPM (P6, maxval 255).
    static func parsePPM(_ data: Data) throws -> RGBImage {
        let bytes = [UInt8](data)
        var fields: [Int] = [], i = 0
        var magic = ""
        while fields.count < 3 || magic.isEmpty {
            while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x0A || bytes[i] == 0x0D || bytes[i] == 0x09 { i += 1 }
            if i < bytes.count, bytes[i] == 0x23 { while i < bytes.count, bytes[i] != 0x0A { i += 1 }; continue }
            var word = ""
            while i < bytes.count, !(bytes[i] == 0x20 || bytes[i] == 0x0A || bytes[i] == 0x0D || bytes[i] == 0x09) {
                word.append(Character(UnicodeScalar(bytes[i])))
                i += 1
            }
            guard !word.isEmpty else { throw TestFailure("screenshot: not a PPM") }
            if magic.isEmpty {
                magic = word
            } else if let v = Int(word) {
                fields.append(v)
            } else {
                throw TestFailure("screenshot: bad PPM header")
            }
        }
        i += 1
        let (w, h, maxval) = (fields[0], fields[1], fields[2])
        guard magic == "P6", maxval == 255, bytes.count - i >= w * h * 3 else {
            throw TestFailure("screenshot: \(magic) \(w)x\(h) maxval \(maxval), \(bytes.count - i) bytes")
        }
        return RGBImage(width: w, height: h, pixels: Array(bytes[i..<(i + w * h * 3)]))
    }
}
