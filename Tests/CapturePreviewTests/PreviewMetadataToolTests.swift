import CapturePreview
import CaptureTestSupport
import Foundation
import Testing

extension DisplayTests {
    /// `capture preview --metadata qr` on a picture camera: the green outline drawn where the
    /// code is shown, in each gravity (a screenshot under Xvfb).
    @Suite(.serialized) struct PreviewMetadataToolTests {
        /// A 640x480 grey picture with a QR code (qrencode: 21 modules of 6 pixels, quiet zone 24)
        /// pasted at (400, 200) by ImageMagick: the code itself spans (424, 224) to (550, 350).
        static func picture(in folder: URL) throws -> URL {
            let qr = folder.appendingPathComponent("qr.png"), out = folder.appendingPathComponent("picture.png")
            for (tool, args) in [
                ("/usr/bin/qrencode", ["-s", "6", "-m", "4", "-o", qr.path, "preview box"]),
                ("/usr/bin/convert", ["-size", "640x480", "xc:gray50", qr.path, "-geometry", "+400+200", "-composite", out.path]),
            ] {
                let r = try runProcess(tool, args)
                guard r.status == 0 else { throw TestFailure("\(tool) exited \(r.status): \(r.stderr)") }
            }
            return out
        }

        @Test(arguments: VideoGravity.allCases) func theCodeIsOutlinedWhereItIsShown(_ gravity: VideoGravity) throws {
            let x = try XvfbDisplay.shared()
            let home = try PreviewToolTests.temporaryHome()
            defer { try? FileManager.default.removeItem(at: home) }
            let picture = try Self.picture(in: home)
            let (w, h) = (480, 270)
            let run = try RunningProcess(
                [
                    "preview", "--device", "file:\(picture.path)", "--size", "640x480", "--window", "\(w)x\(h)",
                    "--gravity", gravity.rawValue, "--metadata", "qr",
                ], environment: PreviewToolTests.environment(display: x.display, home: home))
            defer { if run.process.isRunning { kill(run.process.processIdentifier, SIGKILL) } }
            // Where the code lands in the window, by the preview's own geometry.
            let geometry = PreviewGeometry(
                bounds: CGRect(x: 0, y: 0, width: w, height: h), videoSize: CGSize(width: 640, height: 480), gravity: gravity)
            let code = geometry.layerRect(
                fromMetadataOutputRect: CGRect(x: 424.0 / 640, y: 224.0 / 480, width: 126.0 / 640, height: 126.0 / 480))
            let origin = CGPoint(x: (900 - w) / 2, y: (900 - h) / 2)
            // The midpoints of the outline's four edges, each looked for within 4 pixels.
            let edges = [
                CGPoint(x: code.minX, y: code.midY), CGPoint(x: code.maxX, y: code.midY),
                CGPoint(x: code.midX, y: code.minY), CGPoint(x: code.midX, y: code.maxY),
            ]
            var missing = edges
            for _ in 0..<300 where !missing.isEmpty {
                let shot = try x.screenshot(of: CGRect(x: origin.x, y: origin.y, width: CGFloat(w), height: CGFloat(h)))
                missing = edges.filter { e in
                    var green = false
                    for dy in -4...4 {
                        for dx in -4...4 {
                            let px = Int(e.x) + dx, py = Int(e.y) + dy
                            guard px >= 0, py >= 0, px < w, py < h else { continue }
                            let p = shot.pixel(x: px, y: py)
                            if p.g > 200 && p.r < 90 && p.b < 90 { green = true }
                        }
                    }
                    return !green
                }
                if !missing.isEmpty { usleep(100_000) }
            }
            #expect(missing.isEmpty, "\(gravity): no green outline at \(missing) (code at \(code)); stderr: \(run.stderr)")
        }
    }
}
