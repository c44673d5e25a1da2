import CaptureTestSupport
import Foundation
import Testing

extension DisplayTests {
    /// `capture preview` as a user runs it: a real window under Xvfb, keys pressed with xdotool, the
    /// album in a temporary HOME; and with no display, a one-line error.
    @Suite(.serialized) struct PreviewToolTests {
        static func xdotool(_ display: String, _ args: [String]) throws {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/xdotool")
            guard FileManager.default.isExecutableFile(atPath: p.executableURL!.path) else {
                throw TestFailure("no /usr/bin/xdotool: install xdotool (scripts/test does)")
            }
            p.arguments = args
            p.environment = ["DISPLAY": display]
            p.standardOutput = FileHandle.nullDevice
            p.standardError = FileHandle.nullDevice
            try p.run()
            p.waitForExit()
            guard p.terminationStatus == 0 else {
                throw TestFailure("xdotool \(args.joined(separator: " ")) exited \(p.terminationStatus)")
            }
        }

        static func environment(display: String?, home: URL) -> [String: String] {
            var env = ProcessInfo.processInfo.environment
            env["DISPLAY"] = display
            env["WAYLAND_DISPLAY"] = nil
            env["HOME"] = home.path
            env["XDG_PICTURES_DIR"] = nil
            // The tool draws as a user's would, with SDL's choice (OpenGL), not the test process's.
            env["SDL_RENDER_DRIVER"] = nil
            env["SDL_FRAMEBUFFER_ACCELERATION"] = nil
            return env
        }

        static func temporaryHome() throws -> URL {
            let url = FileManager.default.temporaryDirectory.appendingPathComponent("preview-home-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
            return url
        }

        @Test func withoutADisplayItSaysSoInOneLineAndExitsNonZero() throws {
            let home = try Self.temporaryHome()
            defer { try? FileManager.default.removeItem(at: home) }
            let run = try RunningProcess(["preview", "--device", "virtual"], environment: Self.environment(display: nil, home: home))
            let status = run.exitStatus()
            #expect(status == 1, "exit status \(String(describing: status)), stderr: \(run.stderr)")
            let lines = run.stderr.split(separator: "\n").filter { !$0.contains("using the virtual camera") }
            #expect(lines.count == 1 && lines[0].contains("no display") && lines[0].contains("capture serve"), "stderr: \(run.stderr)")
        }

        @Test func aDisplayThatCannotBeOpenedIsTheSameOneLineError() throws {
            let home = try Self.temporaryHome()
            defer { try? FileManager.default.removeItem(at: home) }
            // No X server listens there (and SDL must not fall back to another video driver).
            let run = try RunningProcess(["preview", "--device", "virtual"], environment: Self.environment(display: ":4242", home: home))
            let status = run.exitStatus()
            #expect(status == 1, "exit status \(String(describing: status)), stderr: \(run.stderr)")
            let lines = run.stderr.split(separator: "\n").filter { $0.hasPrefix("capture:") && !$0.contains("using the virtual camera") }
            #expect(lines.count == 1 && lines[0].contains("display") && lines[0].contains("capture serve"), "stderr: \(run.stderr)")
        }

        @Test func shutterToggleInfoAndEscape() throws {
            let x = try XvfbDisplay.shared()
            let home = try Self.temporaryHome()
            defer { try? FileManager.default.removeItem(at: home) }
            let run = try RunningProcess(
                ["preview", "--device", "virtual", "--window", "320x180"], environment: Self.environment(display: x.display, home: home))
            defer { if run.process.isRunning { kill(run.process.processIdentifier, SIGKILL) } }
            // The window shows up (xdotool finds it by title), then keys go to it under the pointer.
            var found = false
            for _ in 0..<300 where !found {
                found = (try? Self.xdotool(x.display, ["search", "--name", "capture preview"])) != nil
                if !found { usleep(100_000) }
            }
            #expect(found, "no window appeared; stderr: \(run.stderr)")
            // Focus once the window is mapped (search can find it a moment before).
            var focused = false
            for _ in 0..<300 where !focused {
                focused = (try? Self.xdotool(x.display, ["search", "--name", "capture preview", "windowfocus", "--sync"])) != nil
                if !focused { usleep(100_000) }
            }
            #expect(focused, "the window could not be focused")

            // The live picture, drawn by the OpenGL renderer: the eight bars across the window,
            // which SDL centres on the 900x900 screen (no window manager).
            var bars: [String] = ["no screenshot"]
            for _ in 0..<300 where !bars.isEmpty {
                let (w, h) = (320, 180)
                let shot = try x.screenshot(of: CGRect(x: (900 - w) / 2, y: (900 - h) / 2, width: w, height: h))
                bars = ColorBars.expected.enumerated().compactMap { i, bar in
                    let p = shot.pixel(x: (2 * i + 1) * w / 16, y: h * 4 / 5)
                    return abs(p.r - bar.r) <= 40 && abs(p.g - bar.g) <= 40 && abs(p.b - bar.b) <= 40 ? nil : "\(bar.name): \(p)"
                }
                if !bars.isEmpty { usleep(100_000) }
            }
            #expect(bars.isEmpty, "the tool's window does not show the bars: \(bars)")

            try Self.xdotool(x.display, ["key", "space"])
            #expect(run.waitFor { $0.contains(".jpg") }, "no still path printed; stdout: \(run.stdout), stderr: \(run.stderr)")
            if let line = run.stdout.split(separator: "\n").first(where: { $0.contains(".jpg") }),
                let path = line.split(separator: "\t").first
            {
                let jpeg = try Data(contentsOf: URL(fileURLWithPath: String(path)))
                #expect(path.hasPrefix(home.path), "saved outside the temporary HOME: \(path)")
                #expect(jpeg.suffix(2) == Data([0xFF, 0xD9]) && TestJPEG.decode(jpeg) != nil, "\(path) is not a complete JPEG")
            }

            try Self.xdotool(x.display, ["key", "t"])
            #expect(run.waitFor { $0.contains("camera: Virtual Back Camera") }, "toggle: \(run.stdout) \(run.stderr)")
            try Self.xdotool(x.display, ["key", "t"])
            #expect(run.waitFor { $0.contains("camera: Virtual Front Camera") }, "toggle back: \(run.stdout) \(run.stderr)")

            // `i`: the info overlay in the window's bottom-left corner, over the white, yellow and
            // cyan bars (no pixel there is dark, none pure white); `i` again takes it away.
            let area = CGRect(x: (900 - 320) / 2 + 12, y: (900 - 180) / 2 + 128, width: 96, height: 40)
            func overlayShown() throws -> (dark: Int, bright: Int, all: Int) {
                let shot = try x.screenshot(of: area)
                var dark = 0, bright = 0
                for yy in 0..<shot.height {
                    for xx in 0..<shot.width {
                        let p = shot.pixel(x: xx, y: yy)
                        if p.r < 90 && p.g < 90 && p.b < 90 { dark += 1 }
                        if p.r > 240 && p.g > 240 && p.b > 240 { bright += 1 }
                    }
                }
                return (dark, bright, shot.width * shot.height)
            }
            func waitForOverlay(_ shown: Bool) throws -> (dark: Int, bright: Int, all: Int) {
                var last = try overlayShown()
                for _ in 0..<200 {
                    let on = last.dark > last.all / 2 && last.bright > 20
                    let off = last.dark == 0 && last.bright == 0
                    if shown ? on : off { break }
                    usleep(100_000)
                    last = try overlayShown()
                }
                return last
            }
            let before = try waitForOverlay(false)
            #expect(before.dark == 0 && before.bright == 0, "before i: the overlay's area is not the bars: \(before)")
            try Self.xdotool(x.display, ["key", "i"])
            let shown = try waitForOverlay(true)
            #expect(shown.dark > shown.all / 2 && shown.bright > 20, "after i: no overlay (dark, white text) in \(area): \(shown)")
            try Self.xdotool(x.display, ["key", "i"])
            let hidden = try waitForOverlay(false)
            #expect(hidden.dark == 0 && hidden.bright == 0, "after i again: the overlay stayed: \(hidden)")

            try Self.xdotool(x.display, ["key", "Escape"])
            let status = run.exitStatus()
            #expect(status == 0, "Esc: exit status \(String(describing: status)), stderr: \(run.stderr)")
        }

        /// still-camera --preview: the seeds' buttons are layers, and clicks reach them through
        /// pointer events and `hitTest`.
        @Test func stillCameraButtonsAnswerClicks() throws {
            let x = try XvfbDisplay.shared()
            let home = try Self.temporaryHome()
            defer { try? FileManager.default.removeItem(at: home) }
            let album = home.appendingPathComponent("album")
            let run = try RunningProcess(
                tool: "still-camera", ["--device", "virtual", "--album", album.path, "--preview"],
                environment: Self.environment(display: x.display, home: home))
            defer { if run.process.isRunning { kill(run.process.processIdentifier, SIGKILL) } }
            var found = false
            for _ in 0..<300 where !found {
                found = (try? Self.xdotool(x.display, ["search", "--name", "still-camera"])) != nil
                if !found { usleep(100_000) }
            }
            #expect(found, "no window appeared; stderr: \(run.stderr)")
            usleep(500_000)
            // A 640x360 window centred on the 900x900 screen; buttons 60 points above its bottom:
            // shutter in the middle, toggle 60 from the right, close 60 from the left.
            let (x0, y0) = (130, 270)
            // (The example prints with print, which a pipe buffers: its lines are read after it exits.)
            func albumFiles() -> [String] { (try? FileManager.default.contentsOfDirectory(atPath: album.path)) ?? [] }
            try Self.xdotool(x.display, ["mousemove", "\(x0 + 320)", "\(y0 + 300)", "click", "1"])
            var waited = 0
            while albumFiles().isEmpty, waited < 300 { usleep(100_000); waited += 1 }
            #expect(!albumFiles().isEmpty, "shutter: no photo saved; stderr: \(run.stderr)")
            try Self.xdotool(x.display, ["mousemove", "\(x0 + 580)", "\(y0 + 300)", "click", "1"])
            usleep(1_000_000)
            try Self.xdotool(x.display, ["mousemove", "\(x0 + 60)", "\(y0 + 300)", "click", "1"])
            let status = run.exitStatus()
            #expect(status == 0, "close: exit status \(String(describing: status)), stderr: \(run.stderr)")
            #expect(run.stdout.contains("saved photo:") && run.stdout.contains("toggled to"), "stdout: \(run.stdout)")
            let saved = (try? FileManager.default.contentsOfDirectory(atPath: album.path)) ?? []
            #expect(saved.count == 1 && saved[0].hasSuffix(".jpg"), "album: \(saved)")
        }

        @Test func fullscreenCoversTheScreenAndSigtermClosesCleanly() throws {
            let x = try XvfbDisplay.shared()
            let home = try Self.temporaryHome()
            defer { try? FileManager.default.removeItem(at: home) }
            let run = try RunningProcess(
                ["preview", "--device", "virtual", "--window", "160x90", "--gravity", "resizeAspectFill", "--mirror", "--fullscreen"],
                environment: Self.environment(display: x.display, home: home))
            defer { if run.process.isRunning { kill(run.process.processIdentifier, SIGKILL) } }
            var found = false
            for _ in 0..<300 where !found {
                found = (try? Self.xdotool(x.display, ["search", "--name", "capture preview"])) != nil
                if !found { usleep(100_000) }
            }
            #expect(found, "no window appeared; stderr: \(run.stderr)")
            // The picture fills the 900x900 screen (aspect fill cuts the 16:9 picture's sides;
            // mirrored, the left edge is inside the blue bar, the right inside the yellow one): no
            // corner shows the root window's colour.
            var uncovered: [String] = ["no screenshot"]
            for _ in 0..<300 where !uncovered.isEmpty {
                uncovered = []
                for (cx, cy) in [(0, 0), (898, 0), (0, 898), (898, 898)] {
                    let p = try x.screenshot(of: CGRect(x: cx, y: cy, width: 2, height: 2)).pixel(x: 0, y: 0)
                    if abs(p.r - XvfbDisplay.rootColor.r) <= 8 && abs(p.g - XvfbDisplay.rootColor.g) <= 8
                        && abs(p.b - XvfbDisplay.rootColor.b) <= 8
                    {
                        uncovered.append("(\(cx),\(cy))")
                    }
                }
                let row = try x.screenshot(of: CGRect(x: 0, y: 700, width: 900, height: 1))
                let left = row.pixel(x: 4, y: 0), right = row.pixel(x: 895, y: 0)
                if !(left.r < 40 && left.g < 40 && abs(left.b - 191) < 40) { uncovered.append("left edge \(left), not blue") }
                if !(abs(right.r - 191) < 40 && abs(right.g - 191) < 40 && right.b < 40) {
                    uncovered.append("right edge \(right), not yellow")
                }
                if !uncovered.isEmpty { usleep(100_000) }
            }
            #expect(uncovered.isEmpty, "--fullscreen does not cover the screen: \(uncovered); stderr: \(run.stderr)")
            kill(run.process.processIdentifier, SIGTERM)
            let status = run.exitStatus()
            #expect(status == 0, "SIGTERM: exit status \(String(describing: status)), stderr: \(run.stderr)")
        }
    }
}
