@testable import CapturePreview
import Foundation
import Testing

/// The rectangles that draw rounded backgrounds and borders, checked point by point against the
/// shape they should cover.
@Suite struct RoundedRectTests {
    static func covered(_ rects: [CGRect], _ x: Double, _ y: Double) -> Int {
        rects.filter { $0.contains(CGPoint(x: x, y: y)) }.count
    }

    /// Inside a rectangle with corners of radius r (distance from the corner circle's centre).
    static func inside(_ rect: CGRect, _ r: Double, _ x: Double, _ y: Double) -> Bool {
        guard rect.contains(CGPoint(x: x, y: y)) else { return false }
        let cx = min(max(x, rect.minX + r), rect.maxX - r), cy = min(max(y, rect.minY + r), rect.maxY - r)
        return (x - cx) * (x - cx) + (y - cy) * (y - cy) <= r * r
    }

    @Test(arguments: [(0.0, 0.0), (10.0, 0.0), (10.0, 3.0), (30.0, 8.0), (100.0, 5.0), (7.5, 20.0)])
    func fillsAndRingsCoverTheirShapeOnce(radius: Double, border: Double) {
        let rect = CGRect(x: 5, y: 7, width: 80, height: 50)
        let r = min(radius, 25)
        let fill = RoundedRect.fill(rect, radius: radius)
        let ring = RoundedRect.ring(rect, radius: radius, width: border)
        var wrong: [String] = []
        // Pixel centres, away from the curve itself (where a pixel is either).
        for y in stride(from: rect.minY + 0.5, to: rect.maxY, by: 1) {
            for x in stride(from: rect.minX + 0.5, to: rect.maxX, by: 1) {
                let inOuter = Self.inside(rect, r, x, y)
                let nearEdge =
                    Self.inside(rect.insetBy(dx: -1, dy: -1), r + 1, x, y) != Self.inside(rect.insetBy(dx: 1, dy: 1), max(0, r - 1), x, y)
                if !nearEdge {
                    let n = Self.covered(fill, x, y)
                    if n != (inOuter ? 1 : 0) { wrong.append("fill at (\(x),\(y)): \(n)") }
                }
                guard border > 0 else { continue }
                let inner = rect.insetBy(dx: border, dy: border), ri = max(0, r - border)
                let inRing = inOuter && !Self.inside(inner, ri, x, y)
                let nearInner =
                    Self.inside(inner.insetBy(dx: -1, dy: -1), ri + 1, x, y)
                    != Self.inside(inner.insetBy(dx: 1, dy: 1), max(0, ri - 1), x, y)
                if !nearEdge && !nearInner {
                    let n = Self.covered(ring, x, y)
                    if n != (inRing ? 1 : 0) { wrong.append("ring at (\(x),\(y)): \(n)") }
                }
            }
        }
        #expect(wrong.isEmpty, "radius \(radius), border \(border): \(wrong.count) wrong, e.g. \(wrong.prefix(5))")
        if border == 0 { #expect(ring.isEmpty) }
    }
}
