import Capture
import CapturePreview
import CaptureTestSupport
import CaptureVision
import CaptureVisionPreview
import Foundation
import Testing

extension DisplayTests {
    /// `MetadataOutlines` (what `capture preview --metadata` draws) in a real window under Xvfb: a
    /// picture camera shows a QR code at a known place, a metadata output finds it, and the
    /// screenshot must show the green outline around where the code is shown, for each gravity,
    /// mirrored and not, and not where another gravity or mirroring would put it. The window (2:1)
    /// is wider than the frame (4:3), so the three gravities put the code in three places.
    @Suite(.serialized) struct PreviewMetadataOutlineTests {
        static let frameSize = CGSize(width: 640, height: 480)
        static let windowSize = CGSize(width: 480, height: 240)
        static let module = 8

        /// A grey 640x480 picture with a QR code (qrencode, modules of 8 pixels, a white quiet
        /// zone of 2) whose symbol starts at (380, 120); the symbol's rectangle in frame pixels.
        static func picture() throws -> (VirtualCamera.Picture, CGRect) {
            let r = try runProcess("/usr/bin/qrencode", ["-t", "ASCII", "-m", "0", "-o", "-", "visionchecks outline"])
            guard r.status == 0 else { throw TestFailure("qrencode exited \(r.status): \(r.stderr)") }
            let rows = r.text.split(separator: "\n").map(Array.init)
            let n = rows.count, origin = (x: 380, y: 120), quiet = 2 * module
            var grey = [UInt8](repeating: 128, count: Int(frameSize.width * frameSize.height))
            for y in (origin.y - quiet)..<(origin.y + n * module + quiet) {
                for x in (origin.x - quiet)..<(origin.x + n * module + quiet) {
                    let mx = (x - origin.x) / module, my = (y - origin.y) / module
                    let inside = x >= origin.x && y >= origin.y && mx < n && my < n
                    let dark = inside && 2 * mx < rows[my].count && rows[my][2 * mx] == "#"
                    grey[y * Int(frameSize.width) + x] = dark ? 0 : 255
                }
            }
            let symbol = CGRect(x: origin.x, y: origin.y, width: n * module, height: n * module)
            return (try VirtualCamera.Picture(grey: grey, width: Int(frameSize.width), height: Int(frameSize.height)), symbol)
        }

        /// Where a rectangle of the frame (pixels) is shown in the window, worked out here from what
        /// each gravity means (not through the preview's geometry): mirrored left to right first,
        /// then scaled to fit, to fill or to the window, and centred.
        static func shown(_ r: CGRect, _ gravity: VideoGravity, mirrored: Bool) -> CGRect {
            let (fw, fh) = (Double(frameSize.width), Double(frameSize.height))
            let (ww, wh) = (Double(windowSize.width), Double(windowSize.height))
            let x = mirrored ? fw - Double(r.maxX) : Double(r.minX)
            let (sx, sy): (Double, Double)
            switch gravity {
            case .resizeAspect: (sx, sy) = (min(ww / fw, wh / fh), min(ww / fw, wh / fh))
            case .resizeAspectFill: (sx, sy) = (max(ww / fw, wh / fh), max(ww / fw, wh / fh))
            case .resize: (sx, sy) = (ww / fw, wh / fh)
            }
            let ox = (ww - fw * sx) / 2, oy = (wh - fh * sy) / 2
            return CGRect(x: ox + x * sx, y: oy + Double(r.minY) * sy, width: Double(r.width) * sx, height: Double(r.height) * sy)
        }

        /// The midpoints of a box's four edges.
        static func edges(_ r: CGRect) -> [CGPoint] {
            [CGPoint(x: r.minX, y: r.midY), CGPoint(x: r.maxX, y: r.midY), CGPoint(x: r.midX, y: r.minY), CGPoint(x: r.midX, y: r.maxY)]
        }

        /// How far `p` is from the outline of `r`.
        static func distance(_ p: CGPoint, toOutlineOf r: CGRect) -> Double {
            let dx = max(r.minX - p.x, 0, p.x - r.maxX), dy = max(r.minY - p.y, 0, p.y - r.maxY)
            if dx > 0 || dy > 0 { return Double((dx * dx + dy * dy).squareRoot()) }
            return Double(min(p.x - r.minX, r.maxX - p.x, p.y - r.minY, r.maxY - p.y))
        }

        static func isGreen(_ p: (r: Int, g: Int, b: Int)) -> Bool { p.g > 200 && p.r < 90 && p.b < 90 }

        /// Whether the outline's green is within `reach` pixels of `p`.
        static func green(near p: CGPoint, in shot: RGBImage, reach: Int) -> Bool {
            for dy in -reach...reach {
                for dx in -reach...reach {
                    let x = Int(p.x) + dx, y = Int(p.y) + dy
                    if x >= 0, y >= 0, x < shot.width, y < shot.height, isGreen(shot.pixel(x: x, y: y)) { return true }
                }
            }
            return false
        }

        @Test func theOutlineIsWhereTheCodeIsShownInEachGravityAndMirrored() async throws {
            let (picture, symbol) = try Self.picture()
            let problems = try await UIThread.run { () throws -> [String] in
                let x = try XvfbDisplay.shared()
                let rig = try PreviewWindowTests.Rig(.init(.nv12, width: 640, height: 480, frameRates: [30]), window: Self.windowSize)
                rig.camera.picture = picture
                let output = CaptureMetadataOutput()
                rig.session.addOutput(output)
                let outlines = MetadataOutlines(preview: rig.preview)
                rig.window.rootLayer.addSublayer(outlines.layer)
                output.setMetadataObjectsDelegate(outlines, queue: DispatchQueue(label: "outline-test"))
                defer {
                    output.setMetadataObjectsDelegate(nil, queue: nil)
                    rig.session.removeOutput(output)
                    rig.close()
                }
                try output.setMetadataObjectTypes([.qr])
                guard let connection = rig.preview.connection else { return ["the preview layer has no connection"] }
                // The centre of the code's top-left finder pattern (dark), in frame pixels.
                let finder = CGRect(
                    x: symbol.minX + 3 * CGFloat(Self.module), y: symbol.minY + 3 * CGFloat(Self.module), width: 8, height: 8)
                var found: [String] = []
                for mirrored in [false, true] {
                    for gravity in VideoGravity.allCases {
                        rig.preview.videoGravity = gravity
                        connection.isVideoMirrored = mirrored
                        let box = Self.shown(symbol, gravity, mirrored: mirrored)
                        let dark = Self.shown(finder, gravity, mirrored: mirrored)
                        // Where the other gravities, and the other side, would put the outline: the
                        // edge midpoints of theirs that lie away from this one's outline.
                        var elsewhere: [CGPoint] = []
                        for g in VideoGravity.allCases {
                            for m in [false, true] where g != gravity || m != mirrored {
                                let away = Self.edges(Self.shown(symbol, g, mirrored: m)).filter {
                                    Self.distance($0, toOutlineOf: box) > 10
                                }
                                if away.isEmpty { found.append("\(g) mirrored \(m) cannot be told from \(gravity) mirrored \(mirrored)") }
                                elsewhere += away.filter {
                                    $0.x >= 3 && $0.y >= 3 && $0.x < Self.windowSize.width - 3 && $0.y < Self.windowSize.height - 3
                                }
                            }
                        }
                        let name = "\(gravity)\(mirrored ? ", mirrored" : "")"
                        found += try PreviewWindowTests.settle(rig, x) { shot in
                            var bad: [String] = []
                            let d = shot.pixel(x: Int(dark.midX), y: Int(dark.midY))
                            if d.r > 70 || d.g > 70 || d.b > 70 { bad.append("the code is not shown at \(dark.mid) (\(d))") }
                            let missing = Self.edges(box).filter { !Self.green(near: $0, in: shot, reach: 4) }
                            if !missing.isEmpty { bad.append("no outline at \(missing) (box \(box))") }
                            let stray = elsewhere.filter { Self.green(near: $0, in: shot, reach: 2) }
                            if !stray.isEmpty { bad.append("outline where another gravity or side would put it: \(stray)") }
                            return bad
                        }.map { "\(name): \($0)" }
                    }
                }
                if output.statistics.framesDetected == 0 { found.append("the metadata output looked at no frame") }
                return found
            }
            #expect(problems.isEmpty, "\(problems.prefix(8))")
        }
    }
}

extension CGRect {
    fileprivate var mid: CGPoint { CGPoint(x: midX, y: midY) }
}
