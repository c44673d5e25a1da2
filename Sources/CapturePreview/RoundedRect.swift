import Foundation

/// A rounded rectangle (and its border ring) as the rectangles that cover it, row by row in the
/// corners: SDL fills rectangles only. Pure; any thread.
enum RoundedRect {
    /// How far row `y` (0 = the top row of a corner) is inset by a corner of `radius`.
    static func inset(row y: Int, radius r: Double) -> Double {
        let dy = r - (Double(y) + 0.5)
        guard dy > 0 else { return 0 }
        return r - (max(0, r * r - dy * dy)).squareRoot()
    }

    /// Rectangles covering `rect` with its corners rounded by `radius` (at most half a side).
    static func fill(_ rect: CGRect, radius: Double) -> [CGRect] {
        let r = min(radius, rect.width / 2, rect.height / 2)
        guard r > 0 else { return [rect] }
        let k = min(Int(r.rounded(.up)), Int(rect.height / 2))
        var out: [CGRect] = []
        for y in 0..<k {
            let i = inset(row: y, radius: r)
            out.append(CGRect(x: rect.minX + i, y: rect.minY + Double(y), width: rect.width - 2 * i, height: 1))
            out.append(CGRect(x: rect.minX + i, y: rect.maxY - Double(y) - 1, width: rect.width - 2 * i, height: 1))
        }
        let middle = rect.height - 2 * Double(k)
        if middle > 0 { out.append(CGRect(x: rect.minX, y: rect.minY + Double(k), width: rect.width, height: middle)) }
        return out
    }

    /// Rectangles covering a border of `width` inside `rect`, its outer corners rounded by
    /// `radius` and its inner ones by `radius - width`, as `CALayer` draws them.
    static func ring(_ rect: CGRect, radius: Double, width: Double) -> [CGRect] {
        let w = min(width, rect.width / 2, rect.height / 2)
        guard w > 0 else { return [] }
        let r = min(radius, rect.width / 2, rect.height / 2), ri = max(0, r - w)
        let k = min(Int(max(r, w).rounded(.up)), Int(rect.height / 2))
        var out: [CGRect] = []
        func row(_ y: Int, at top: Double) {
            let o = inset(row: y, radius: r)
            if Double(y) < w {
                out.append(CGRect(x: rect.minX + o, y: top, width: rect.width - 2 * o, height: 1))
            } else {
                let yi = y - Int(w.rounded(.up))
                let i = ri > 0 && yi >= 0 ? inset(row: yi, radius: ri) : 0
                let left = w + i - o
                if left > 0 {
                    out.append(CGRect(x: rect.minX + o, y: top, width: left, height: 1))
                    out.append(CGRect(x: rect.maxX - w - i, y: top, width: left, height: 1))
                }
            }
        }
        for y in 0..<k {
            row(y, at: rect.minY + Double(y))
            row(y, at: rect.maxY - Double(y) - 1)
        }
        let middle = rect.height - 2 * Double(k)
        if middle > 0 {
            out.append(CGRect(x: rect.minX, y: rect.minY + Double(k), width: w, height: middle))
            out.append(CGRect(x: rect.maxX - w, y: rect.minY + Double(k), width: w, height: middle))
        }
        return out
    }
}
