import Capture
@testable import CapturePreview
import CaptureTestSupport
import Foundation
import Testing

extension DisplayTests {
    /// Real windows under a real X server (Xvfb), showing the virtual camera: screenshots of the
    /// screen must show the colour bars where the gravity, the turn and the mirroring put them, and
    /// overlays where `layerPointConverted` says. Serialized: SDL has one event queue per process.
    @Suite(.serialized) struct PreviewWindowTests {
        /// The root layer's colour, which the letterbox shows (no bar has it).
        static let letterbox = Color(red: 128 / 255, green: 64 / 255, blue: 1)
        static let letterboxRGB = (r: 128, g: 64, b: 255)

        /// A camera of its own (unique name) with one mode, a session showing it in a preview layer
        /// that fills a shown window.
        final class Rig {
            let camera: VirtualCamera
            let session = CaptureSession()
            let preview: CaptureVideoPreviewLayer
            let window: PreviewWindow

            init(_ mode: VirtualCamera.Mode, window size: CGSize = CGSize(width: 300, height: 300)) throws {
                camera = VirtualCamera(name: "Preview \(UUID().uuidString.prefix(8))", position: .back, formats: [mode])
                VirtualCamera.install(camera)
                guard let device = CaptureDevice.device(withUniqueID: camera.uniqueID) else {
                    VirtualCamera.uninstall(camera)
                    throw TestFailure("the virtual camera is not discoverable")
                }
                session.addInput(try CaptureDeviceInput(device: device))
                preview = CaptureVideoPreviewLayer(session: session)
                window = try PreviewWindow(title: "preview test", size: size)
                window.rootLayer.backgroundColor = PreviewWindowTests.letterbox
                preview.frame = window.rootLayer.bounds
                window.rootLayer.addSublayer(preview)
                try session.start()
                window.show()
            }

            func close() {
                session.stopRunning()
                window.close()
                VirtualCamera.uninstall(camera)
            }
        }

        static func near(_ p: (r: Int, g: Int, b: Int), _ q: (r: Int, g: Int, b: Int), tolerance: Int = 40) -> Bool {
            abs(p.r - q.r) <= tolerance && abs(p.g - q.g) <= tolerance && abs(p.b - q.b) <= tolerance
        }

        /// Checks a grid of window points against what the preview's geometry says is there: a bar
        /// colour on the picture (away from bar edges and the counter rows at the top), the letterbox
        /// colour off it. Returns what did not match.
        static func pictureMismatches(_ shot: RGBImage, _ rig: Rig, grey: Bool = false) -> [String] {
            let g = rig.preview.geometry, size = rig.window.size
            var bad: [String] = []
            for wy in stride(from: 3, to: Int(size.height) - 3, by: 9) {
                for wx in stride(from: 3, to: Int(size.width) - 3, by: 9) {
                    let d = g.captureDevicePoint(fromLayerPoint: CGPoint(x: Double(wx) + 0.5, y: Double(wy) + 0.5))
                    let p = shot.pixel(x: wx, y: wy)
                    let margin = 0.02
                    if d.x < -margin || d.x > 1 + margin || d.y < -margin || d.y > 1 + margin {
                        if !near(p, letterboxRGB) { bad.append("(\(wx),\(wy)) off the picture is \(p), not the letterbox") }
                    } else if d.x > margin, d.x < 1 - margin, d.y > 0.3, d.y < 1 - margin {
                        let bar = d.x * 8, i = Int(bar)
                        guard bar - Double(i) > 0.2, bar - Double(i) < 0.8 else { continue }
                        let e = ColorBars.expected[i]
                        if grey {
                            // A grey camera's bars: their BT.601 luma, the same on all three channels.
                            let y = Int((0.299 * Double(e.r) + 0.587 * Double(e.g) + 0.114 * Double(e.b)).rounded())
                            if !near(p, (y, y, y), tolerance: 14) { bad.append("(\(wx),\(wy)) is \(p), not the grey \(y) of \(e.name)") }
                        } else if !near(p, (e.r, e.g, e.b)) {
                            bad.append("(\(wx),\(wy)) is \(p), not \(e.name)")
                        }
                    }
                }
            }
            return bad
        }

        /// Draws frames and takes screenshots until `check` finds nothing wrong or time runs out;
        /// returns the last findings (empty: the screen is right).
        static func settle(_ rig: Rig, _ x: XvfbDisplay, timeout: Double = 30, _ check: (RGBImage) -> [String]) throws -> [String] {
            let deadline = Date(timeIntervalSinceNow: timeout)
            var last = ["no screenshot taken"]
            while Date() < deadline {
                for _ in 0..<3 {
                    PreviewWindow.processEvents()
                    rig.window.render()
                    Thread.sleep(forTimeInterval: 0.03)
                }
                // The screen outside the window is the root colour.
                let corner = try x.screenshot(of: CGRect(x: 0, y: 0, width: 2, height: 2))
                if !near(corner.pixel(x: 0, y: 0), XvfbDisplay.rootColor, tolerance: 8) && rig.window.position != .zero {
                    last = ["the screen outside the window is \(corner.pixel(x: 0, y: 0))"]
                    continue
                }
                last = check(try x.screenshot(of: CGRect(origin: rig.window.position, size: rig.window.size)))
                if last.isEmpty { return [] }
            }
            return last
        }

        @Test func gravityLetterboxesCropsAndStretchesThePicture() async throws {
            let problems = try await UIThread.run { () throws -> [String] in
                let x = try XvfbDisplay.shared()
                let rig = try Rig(.init(.yuyv, width: 640, height: 360, frameRates: [30]))
                defer { rig.close() }
                var found: [String] = []
                for gravity in VideoGravity.allCases {
                    rig.preview.videoGravity = gravity
                    found += try Self.settle(rig, x) { Self.pictureMismatches($0, rig) }.prefix(6).map { "\(gravity): \($0)" }
                    // And what each gravity means, independently of the geometry: bands above and
                    // below for aspect, no letterbox for fill, the outer bars at the edges for resize.
                    found += try Self.settle(rig, x) { shot in
                        let top = shot.pixel(x: 150, y: 10), left = shot.pixel(x: 2, y: 250), right = shot.pixel(x: 297, y: 250)
                        switch gravity {
                        case .resizeAspect:
                            return Self.near(top, Self.letterboxRGB) && Self.near(shot.pixel(x: 150, y: 290), Self.letterboxRGB)
                                && Self.near(shot.pixel(x: 2, y: 200), (191, 191, 191))
                                ? [] : ["aspect: no bands, or the white bar is not at the left"]
                        case .resizeAspectFill:
                            // A 16:9 picture cut to a square: the left edge is inside the yellow bar.
                            return !Self.near(top, Self.letterboxRGB) && Self.near(left, (191, 191, 0)) && Self.near(right, (0, 0, 191))
                                ? [] : ["fill: left \(left), right \(right), top \(top)"]
                        case .resize:
                            return Self.near(left, (191, 191, 191)) && Self.near(right, (0, 0, 0)) && !Self.near(top, Self.letterboxRGB)
                                ? [] : ["resize: left \(left), right \(right)"]
                        }
                    }
                }
                if rig.preview.statistics.framesDrawn == 0 { found.append("no frame drawn") }
                return found
            }
            #expect(problems.isEmpty, "\(problems.prefix(8))")
        }

        @Test func mirroringTurningAndResizingTheWindow() async throws {
            let problems = try await UIThread.run { () throws -> [String] in
                let x = try XvfbDisplay.shared()
                let rig = try Rig(.init(.yuyv, width: 640, height: 360, frameRates: [30]))
                defer { rig.close() }
                rig.preview.videoGravity = .resize
                guard let connection = rig.preview.connection else { return ["the preview layer has no connection"] }
                connection.isVideoMirrored = true
                var found = try Self.settle(rig, x) { shot in
                    let left = shot.pixel(x: 2, y: 250)
                    return Self.pictureMismatches(shot, rig)
                        + (Self.near(left, (0, 0, 0)) ? [] : ["mirrored: the left edge is \(left), not black"])
                }.prefix(6).map { "mirrored: \($0)" }

                connection.isVideoMirrored = false
                connection.videoOrientation = .portrait
                rig.preview.videoGravity = .resizeAspect
                found += try Self.settle(rig, x) { shot in
                    // Turned clockwise, the white bar runs along the top; the sides are letterbox.
                    Self.pictureMismatches(shot, rig)
                        + (Self.near(shot.pixel(x: 150, y: 4), (191, 191, 191)) && Self.near(shot.pixel(x: 4, y: 150), Self.letterboxRGB)
                            ? [] : ["top \(shot.pixel(x: 150, y: 4)), left \(shot.pixel(x: 4, y: 150))"])
                }.prefix(6).map { "portrait: \($0)" }

                connection.videoOrientation = .landscapeRight
                var resized: CGSize?
                rig.window.eventHandler = { if case .resized(let s) = $0 { resized = s } }
                rig.window.size = CGSize(width: 240, height: 420)
                if rig.window.rootLayer.frame.size != CGSize(width: 240, height: 420) {
                    found.append("the root layer did not follow the window")
                }
                rig.preview.frame = rig.window.rootLayer.bounds
                found += try Self.settle(rig, x) { shot in
                    // A tall window: bands above and below, the picture across the whole width.
                    Self.pictureMismatches(shot, rig)
                        + (Self.near(shot.pixel(x: 120, y: 20), Self.letterboxRGB) && Self.near(shot.pixel(x: 3, y: 250), (191, 191, 191))
                            ? [] : ["top \(shot.pixel(x: 120, y: 20)), left \(shot.pixel(x: 3, y: 250))"])
                }.prefix(6).map { "tall window: \($0)" }
                if resized != CGSize(width: 240, height: 420) {
                    found.append("the window reported no resize (\(String(describing: resized)))")
                }
                return found
            }
            #expect(problems.isEmpty, "\(problems.prefix(8))")
        }

        @Test func overlaysLandWhereLayerPointConvertedSaysInZOrder() async throws {
            let problems = try await UIThread.run { () throws -> [String] in
                let x = try XvfbDisplay.shared()
                let rig = try Rig(.init(.yuyv, width: 640, height: 360, frameRates: [30]))
                defer { rig.close() }
                rig.preview.videoGravity = .resizeAspectFill
                // Seed 000's face layer: a sublayer of the preview, zPosition 1, placed through the
                // preview's conversion (the green bar, low in the picture).
                let centre = rig.preview.layerPointConverted(fromCaptureDevicePoint: CGPoint(x: 3.5 / 8, y: 0.8))
                let face = Layer()
                face.frame = CGRect(x: centre.x - 15, y: centre.y - 15, width: 30, height: 30)
                face.backgroundColor = Color(red: 1, green: 0.5, blue: 0)
                face.zPosition = 1
                // A layer above it (higher zPosition although added first) covering its right half.
                let above = Layer()
                above.frame = CGRect(x: centre.x, y: centre.y - 15, width: 30, height: 30)
                above.contents = LayerImage(color: Color(red: 1, green: 1, blue: 1), width: 4, height: 4)
                above.zPosition = 2
                rig.preview.addSublayer(above)
                rig.preview.addSublayer(face)
                let cx = Int(centre.x), cy = Int(centre.y)
                var found = try Self.settle(rig, x) { shot in
                    var bad: [String] = []
                    if !Self.near(shot.pixel(x: cx - 8, y: cy), (255, 128, 0), tolerance: 12) {
                        bad.append("face at \(cx - 8),\(cy): \(shot.pixel(x: cx - 8, y: cy))")
                    }
                    if !Self.near(shot.pixel(x: cx + 8, y: cy), (255, 255, 255), tolerance: 12) {
                        bad.append("upper layer: \(shot.pixel(x: cx + 8, y: cy))")
                    }
                    if !Self.near(shot.pixel(x: cx - 25, y: cy), (0, 191, 0)) {
                        bad.append("beside the face: \(shot.pixel(x: cx - 25, y: cy)), not green")
                    }
                    return bad
                }
                if rig.window.rootLayer.hitTest(CGPoint(x: cx - 8, y: cy)) !== face { found.append("hitTest missed the face layer") }
                if rig.window.rootLayer.hitTest(CGPoint(x: cx + 8, y: cy)) !== above { found.append("hitTest missed the upper layer") }
                return found
            }
            #expect(problems.isEmpty, "\(problems.prefix(8))")
        }

        @Test(arguments: [PixelFormat.nv12, .nv21, .yuv420, .yvu420, .uyvy, .mjpeg, .yuv422p, .nv16, .nv61, .grey])
        func everyUploadPathShowsTheBars(format: PixelFormat) async throws {
            let problems = try await UIThread.run { () throws -> [String] in
                let x = try XvfbDisplay.shared()
                let rig = try Rig(.init(format, width: 640, height: 360, frameRates: [30]))
                defer { rig.close() }
                rig.preview.videoGravity = .resizeAspect
                var found = try Self.settle(rig, x) { Self.pictureMismatches($0, rig, grey: format == .grey) }
                if rig.preview.videoFormat?.pixelFormat != format {
                    found.append("frames came as \(String(describing: rig.preview.videoFormat))")
                }
                // MJPEG is decoded at the scaling factor nearest the drawn size (300x169 here): 1/2.
                if format == .mjpeg, let t = rig.window.videoTextureSize(of: rig.preview), t != (320, 180) {
                    found.append("the 640x360 MJPEG frame was decoded at \(t), not 320x180")
                }
                return found
            }
            #expect(problems.isEmpty, "\(format): \(problems.prefix(8))")
        }

        @Test func fullscreenCoversTheScreenAndGoesBack() async throws {
            let problems = try await UIThread.run { () throws -> [String] in
                let x = try XvfbDisplay.shared()
                let rig = try Rig(.init(.yuyv, width: 640, height: 360, frameRates: [30]))
                defer { rig.close() }
                rig.preview.videoGravity = .resizeAspect
                var found: [String] = []
                var resized: CGSize?
                rig.window.eventHandler = { if case .resized(let s) = $0 { resized = s; rig.preview.frame = rig.window.rootLayer.bounds } }
                rig.window.isFullscreen = true
                if !rig.window.isFullscreen { found.append("isFullscreen is false after setting it") }
                let screen = CGSize(width: 900, height: 900)
                let deadline = Date(timeIntervalSinceNow: 20)
                // (Events, a resize too, reach the handler inside processEvents.)
                while resized != screen, Date() < deadline {
                    PreviewWindow.processEvents()
                    Thread.sleep(forTimeInterval: 0.03)
                }
                if rig.window.size != screen { found.append("fullscreen window is \(rig.window.size), not the 900x900 screen") }
                if rig.window.rootLayer.frame.size != screen { found.append("the root layer is \(rig.window.rootLayer.frame.size)") }
                if resized != screen { found.append("no resize to the screen's size reported (\(String(describing: resized)))") }
                rig.preview.frame = rig.window.rootLayer.bounds
                // The whole screen is the window: its corners are the letterbox (not the root
                // window's colour), the 16:9 picture spans the width in the middle.
                // (Strips of the screen, not all of it: see XvfbDisplay.screenshot.)
                func fullscreenFindings() -> [String] {
                    guard let top = try? x.screenshot(of: CGRect(x: 0, y: 0, width: 900, height: 4)),
                        let bottom = try? x.screenshot(of: CGRect(x: 0, y: 896, width: 900, height: 4)),
                        let middle = try? x.screenshot(of: CGRect(x: 0, y: 548, width: 900, height: 4))
                    else { return ["no screenshot"] }
                    var bad: [String] = []
                    for (name, strip) in [("top", top), ("bottom", bottom)] {
                        for cx in [1, 450, 898] where !Self.near(strip.pixel(x: cx, y: 2), Self.letterboxRGB) {
                            bad.append("screen \(name) at x \(cx) is \(strip.pixel(x: cx, y: 2)), not the window's letterbox")
                        }
                    }
                    // Bar by bar across the whole width.
                    for (i, e) in ColorBars.expected.enumerated() {
                        let p = middle.pixel(x: i * 900 / 8 + 56, y: 2)
                        if !Self.near(p, (e.r, e.g, e.b)) { bad.append("\(e.name) bar at x \(i * 900 / 8 + 56) is \(p)") }
                    }
                    if !Self.near(middle.pixel(x: 2, y: 2), (191, 191, 191)) {
                        bad.append("left edge \(middle.pixel(x: 2, y: 2)), not the white bar")
                    }
                    if !Self.near(middle.pixel(x: 897, y: 2), (0, 0, 0)) {
                        bad.append("right edge \(middle.pixel(x: 897, y: 2)), not the black bar")
                    }
                    return bad
                }
                var last = ["not drawn"]
                let shown = Date(timeIntervalSinceNow: 30)
                while !last.isEmpty, Date() < shown {
                    PreviewWindow.processEvents()
                    rig.window.render()
                    Thread.sleep(forTimeInterval: 0.05)
                    last = fullscreenFindings()
                }
                found += last.prefix(6).map { "fullscreen: \($0)" }

                rig.window.isFullscreen = false
                let back = Date(timeIntervalSinceNow: 20)
                while resized != CGSize(width: 300, height: 300), Date() < back {
                    PreviewWindow.processEvents()
                    Thread.sleep(forTimeInterval: 0.03)
                }
                if rig.window.isFullscreen || rig.window.size != CGSize(width: 300, height: 300)
                    || resized != CGSize(width: 300, height: 300)
                {
                    found.append(
                        "after leaving fullscreen: \(rig.window.isFullscreen), \(rig.window.size), reported \(String(describing: resized))")
                }
                // And the screen around the window is the root window's colour again.
                var outside = (r: 0, g: 0, b: 0)
                let uncovered = Date(timeIntervalSinceNow: 20)
                repeat {
                    PreviewWindow.processEvents()
                    rig.window.render()
                    outside = try x.screenshot(of: CGRect(x: 0, y: 0, width: 2, height: 2)).pixel(x: 0, y: 0)
                } while !Self.near(outside, XvfbDisplay.rootColor, tolerance: 8) && Date() < uncovered
                if !Self.near(outside, XvfbDisplay.rootColor, tolerance: 8) {
                    found.append("after leaving fullscreen the screen corner is \(outside)")
                }
                return found
            }
            #expect(problems.isEmpty, "\(problems.prefix(8))")
        }

        /// PNG bytes made by ImageMagick (RGB, RGBA, palette, grey).
        static func png(_ spec: [String]) throws -> Data {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/convert")
            p.arguments = spec
            let out = Pipe()
            p.standardOutput = out
            p.standardError = FileHandle.nullDevice
            try p.run()
            let data = out.fileHandleForReading.readDataToEndOfFile()
            p.waitForExit()
            guard p.terminationStatus == 0, !data.isEmpty else { throw TestFailure("convert \(spec) failed") }
            return data
        }

        @Test func pngContentsAreDrawnWithTheirAlpha() async throws {
            let opaque = try Self.png(["-size", "40x30", "xc:#ff8000", "PNG24:-"])
            let translucent = try Self.png(["-size", "40x30", "xc:rgba(255,255,255,0.5)", "PNG32:-"])
            let palette = try Self.png(["-size", "40x30", "xc:#00ff00", "PNG8:-"])
            let problems = try await UIThread.run { () throws -> [String] in
                let x = try XvfbDisplay.shared()
                let window = try PreviewWindow(title: "png test", size: CGSize(width: 200, height: 120))
                defer { window.close() }
                window.rootLayer.backgroundColor = Color(red: 0, green: 0, blue: 1)
                var found: [String] = []
                for (i, data) in [opaque, translucent, palette].enumerated() {
                    let l = Layer()
                    l.frame = CGRect(x: 10 + 60 * i, y: 20, width: 50, height: 50)
                    let image = try LayerImage(data: data)
                    if image.width != 40 || image.height != 30 { found.append("image \(i) is \(image.width)x\(image.height)") }
                    l.contents = image
                    window.rootLayer.addSublayer(l)
                }
                window.show()
                let expected = [(255, 128, 0), (128, 128, 255), (0, 255, 0)]
                var last = ["no screenshot"]
                let deadline = Date(timeIntervalSinceNow: 20)
                while !last.isEmpty, Date() < deadline {
                    PreviewWindow.processEvents()
                    window.render()
                    Thread.sleep(forTimeInterval: 0.05)
                    let shot = try x.screenshot(of: CGRect(origin: window.position, size: window.size))
                    last = expected.enumerated().compactMap { i, e in
                        let p = shot.pixel(x: 35 + 60 * i, y: 45)
                        return Self.near(p, e, tolerance: 8) ? nil : "PNG \(i) shows \(p), not \(e)"
                    }
                    if !Self.near(shot.pixel(x: 35, y: 100), (0, 0, 255), tolerance: 8) {
                        last.append("below the images: \(shot.pixel(x: 35, y: 100))")
                    }
                }
                return found + last
            }
            #expect(problems.isEmpty, "\(problems)")
        }

        @Test func theEventLoopDrawsOnlyWhatChanged() async throws {
            let problems = try await UIThread.run { () throws -> [String] in
                let x = try XvfbDisplay.shared()
                let window = try PreviewWindow(title: "changes", size: CGSize(width: 120, height: 90))
                defer { window.close() }
                let l = Layer()
                l.frame = CGRect(x: 10, y: 10, width: 50, height: 50)
                l.backgroundColor = Color(red: 1, green: 0, blue: 0)
                window.rootLayer.addSublayer(l)
                window.show()
                var found: [String] = []
                // Whatever the show and its first events asked for, then nothing new.
                for _ in 0..<5 {
                    PreviewWindow.processEvents()
                    window.renderIfChanged()
                    Thread.sleep(forTimeInterval: 0.05)
                }
                let n = window.framesRendered
                window.renderIfChanged()
                window.renderIfChanged()
                if window.framesRendered != n { found.append("unchanged tree drawn again (\(n) -> \(window.framesRendered))") }
                // A change from any thread shows at the next frame.
                DispatchQueue.global().sync { l.backgroundColor = Color(red: 0, green: 1, blue: 0) }
                window.renderIfChanged()
                if window.framesRendered != n + 1 { found.append("a changed colour was not drawn (\(window.framesRendered))") }
                var shown = (r: 0, g: 0, b: 0)
                let deadline = Date(timeIntervalSinceNow: 20)
                repeat {
                    PreviewWindow.processEvents()
                    window.renderIfChanged()
                    shown = try x.screenshot(of: CGRect(origin: window.position, size: window.size)).pixel(x: 35, y: 35)
                } while !Self.near(shown, (0, 255, 0), tolerance: 8) && Date() < deadline
                if !Self.near(shown, (0, 255, 0), tolerance: 8) { found.append("the window shows \(shown), not the new green") }
                let m = window.framesRendered
                l.removeFromSuperlayer()
                window.renderIfChanged()
                if window.framesRendered != m + 1 { found.append("a removed layer was not drawn away") }
                return found
            }
            #expect(problems.isEmpty, "\(problems)")
        }

        @Test func cornerRadiusRoundsTheBackgroundAndTheBorder() async throws {
            let problems = try await UIThread.run { () throws -> [String] in
                let x = try XvfbDisplay.shared()
                let window = try PreviewWindow(title: "corners", size: CGSize(width: 200, height: 100))
                defer { window.close() }
                window.rootLayer.backgroundColor = Color(red: 0, green: 0, blue: 1)
                let filled = Layer()
                filled.frame = CGRect(x: 10, y: 10, width: 80, height: 60)
                filled.backgroundColor = Color(red: 1, green: 0, blue: 0)
                filled.cornerRadius = 20
                let ringed = Layer()
                ringed.frame = CGRect(x: 110, y: 10, width: 80, height: 60)
                ringed.borderColor = .white
                ringed.borderWidth = 4
                ringed.cornerRadius = 16
                window.rootLayer.addSublayer(filled)
                window.rootLayer.addSublayer(ringed)
                window.show()
                let blue = (0, 0, 255), red = (255, 0, 0), white = (255, 255, 255)
                // The corner pixel is outside the curve; the middle of each side and the centre are
                // inside. The ring: white on the straight sides and across the curve (on the
                // diagonal from the corner circle's centre (126, 26), 14 points out, between the
                // inner radius 12 and the outer 16), blue at the corner and in the middle.
                let d = 14 / 2.0.squareRoot()
                let checks: [(String, Int, Int, (Int, Int, Int))] = [
                    ("filled corner", 11, 11, blue), ("filled centre", 50, 40, red), ("filled left side", 11, 40, red),
                    ("filled top side", 50, 11, red), ("filled just inside the curve", 18, 18, red),
                    ("ring corner", 111, 11, blue), ("ring left side", 111, 40, white), ("ring top side", 150, 11, white),
                    ("ring on the curve", Int(126 - d), Int(26 - d), white), ("ring middle", 150, 40, blue),
                ]
                var last = ["no screenshot"]
                let deadline = Date(timeIntervalSinceNow: 20)
                while !last.isEmpty, Date() < deadline {
                    PreviewWindow.processEvents()
                    window.render()
                    Thread.sleep(forTimeInterval: 0.05)
                    let shot = try x.screenshot(of: CGRect(origin: window.position, size: window.size))
                    last = checks.compactMap { name, px, py, want in
                        let p = shot.pixel(x: px, y: py)
                        return Self.near(p, want, tolerance: 8) ? nil : "\(name) (\(px),\(py)) is \(p), not \(want)"
                    }
                }
                return last
            }
            #expect(problems.isEmpty, "\(problems)")
        }

        @Test func twentyWindowsLeaveDescriptorsAndThreadsAtBaseline() async throws {
            let (rounds, windows) = try await UIThread.run { () throws -> ([(descriptors: Int, threads: Int)], Int) in
                _ = try XvfbDisplay.shared()
                func cycle() throws {
                    let w = try PreviewWindow(title: "leak", size: CGSize(width: 120, height: 90))
                    let l = Layer()
                    l.frame = CGRect(x: 10, y: 10, width: 50, height: 50)
                    l.contents = LayerImage(color: .white, width: 8, height: 8)
                    w.rootLayer.addSublayer(l)
                    w.show()
                    PreviewWindow.processEvents()
                    w.render()
                    w.close()
                }
                func threads() -> Int { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? -1 }
                // The first window loads the GL driver (libraries that keep their own threads and
                // descriptors): the baseline is after it.
                try cycle()
                // Three rounds of 20 windows, each measured from its own start.
                var rounds: [(descriptors: Int, threads: Int)] = []
                for _ in 0..<3 {
                    let fds = ProcessResources.openDescriptors, tasks = threads()
                    for _ in 0..<20 { try cycle() }
                    rounds.append((ProcessResources.openDescriptors - fds, threads() - tasks))
                }
                return (rounds, PreviewWindow.windows.count)
            }
            #expect(windows == 0)
            // The counts are the process's, and other suites run in it meanwhile, their threads
            // and descriptors coming and going: one round can end a few up (or down) for them. A
            // leak of one per window is 20 more in every round; others' comings and goings are
            // not in all three, so the least growth of the three is the windows'.
            let growth = rounds.map { "+\($0.descriptors) descriptors, +\($0.threads) threads" }
            #expect(rounds.map(\.descriptors).min()! <= 3, "after each round of 20 windows: \(growth)")
            #expect(rounds.map(\.threads).min()! <= 3, "after each round of 20 windows: \(growth)")
        }
    }
}
