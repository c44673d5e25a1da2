// A camera's label on the test pattern (the virtual pair's "FRONT" and "BACK"), so that a switch
// between cameras that share modes can be seen and tested: white 5x7 letters in a black box at
// the right edge, just under the band. That spot keeps clear of the frame counter, the moving
// box and the lower half of the bars, where readers of the pattern look.

/// Where a label sits and how big its letters are, for one frame size.
package struct LabelPlacement: Sendable, Hashable {
    /// The box: left, top, width, height (even, for chroma subsampling).
    package let x: Int, y: Int, width: Int, height: Int
    /// Screen pixels per font pixel.
    package let scale: Int
    /// The first letter's top-left corner.
    package var textX: Int { x + scale }
    package var textY: Int { y + scale }

    /// Nil when the text is empty or the picture has no room for it.
    package init?(text: String, geometry g: PatternGeometry) {
        let n = text.count
        guard n > 0 else { return nil }
        let em = 6 * n + 1  // letters 5 wide with 1 between, and 1 of margin each side
        let bar = g.width - g.barX(7)
        scale = max(1, bar / (em + 2))
        width = (em * scale + 1) & ~1
        height = (9 * scale + 1) & ~1
        let margin = (scale + 1) & ~1
        x = g.width - width - margin
        y = g.barsTop + margin
        guard x >= 0, y + height <= g.height else { return nil }
    }
}

/// 5x7 glyphs: seven rows of five bits, the leftmost pixel the highest bit.
enum LabelFont {
    static func rows(_ c: Character) -> [UInt8] { glyphs[Character(c.uppercased())] ?? glyphs[" "]! }
    static func character(_ rows: [UInt8]) -> Character? { glyphs.first { $0.value == rows }?.key }

    private static let glyphs: [Character: [UInt8]] = [
        " ": [0, 0, 0, 0, 0, 0, 0],
        "-": [0, 0, 0, 0b11111, 0, 0, 0],
        ".": [0, 0, 0, 0, 0, 0b01100, 0b01100],
        "0": [0b01110, 0b10001, 0b10011, 0b10101, 0b11001, 0b10001, 0b01110],
        "1": [0b00100, 0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110],
        "2": [0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0b01000, 0b11111],
        "3": [0b11111, 0b00010, 0b00100, 0b00010, 0b00001, 0b10001, 0b01110],
        "4": [0b00010, 0b00110, 0b01010, 0b10010, 0b11111, 0b00010, 0b00010],
        "5": [0b11111, 0b10000, 0b11110, 0b00001, 0b00001, 0b10001, 0b01110],
        "6": [0b00110, 0b01000, 0b10000, 0b11110, 0b10001, 0b10001, 0b01110],
        "7": [0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b01000, 0b01000],
        "8": [0b01110, 0b10001, 0b10001, 0b01110, 0b10001, 0b10001, 0b01110],
        "9": [0b01110, 0b10001, 0b10001, 0b01111, 0b00001, 0b00010, 0b01100],
        "A": [0b01110, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001],
        "B": [0b11110, 0b10001, 0b10001, 0b11110, 0b10001, 0b10001, 0b11110],
        "C": [0b01110, 0b10001, 0b10000, 0b10000, 0b10000, 0b10001, 0b01110],
        "D": [0b11110, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b11110],
        "E": [0b11111, 0b10000, 0b10000, 0b11110, 0b10000, 0b10000, 0b11111],
        "F": [0b11111, 0b10000, 0b10000, 0b11110, 0b10000, 0b10000, 0b10000],
        "G": [0b01110, 0b10001, 0b10000, 0b10111, 0b10001, 0b10001, 0b01111],
        "H": [0b10001, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001],
        "I": [0b01110, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110],
        "J": [0b00111, 0b00010, 0b00010, 0b00010, 0b00010, 0b10010, 0b01100],
        "K": [0b10001, 0b10010, 0b10100, 0b11000, 0b10100, 0b10010, 0b10001],
        "L": [0b10000, 0b10000, 0b10000, 0b10000, 0b10000, 0b10000, 0b11111],
        "M": [0b10001, 0b11011, 0b10101, 0b10101, 0b10001, 0b10001, 0b10001],
        "N": [0b10001, 0b10001, 0b11001, 0b10101, 0b10011, 0b10001, 0b10001],
        "O": [0b01110, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01110],
        "P": [0b11110, 0b10001, 0b10001, 0b11110, 0b10000, 0b10000, 0b10000],
        "Q": [0b01110, 0b10001, 0b10001, 0b10001, 0b10101, 0b10010, 0b01101],
        "R": [0b11110, 0b10001, 0b10001, 0b11110, 0b10100, 0b10010, 0b10001],
        "S": [0b01111, 0b10000, 0b10000, 0b01110, 0b00001, 0b00001, 0b11110],
        "T": [0b11111, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100],
        "U": [0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01110],
        "V": [0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01010, 0b00100],
        "W": [0b10001, 0b10001, 0b10001, 0b10101, 0b10101, 0b10101, 0b01010],
        "X": [0b10001, 0b10001, 0b01010, 0b00100, 0b01010, 0b10001, 0b10001],
        "Y": [0b10001, 0b10001, 0b01010, 0b00100, 0b00100, 0b00100, 0b00100],
        "Z": [0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b10000, 0b11111],
    ]
}

/// Reads a label of `length` characters back from a luma reader (the centre of each font
/// pixel); nil when a cell is not a glyph or a pixel is neither black nor white.
package func readPatternLabel(length: Int, geometry: PatternGeometry, luma: (Int, Int) -> UInt8?) -> String? {
    guard let p = LabelPlacement(text: String(repeating: " ", count: length), geometry: geometry) else { return nil }
    var text = ""
    for i in 0..<length {
        var rows = [UInt8](repeating: 0, count: 7)
        for row in 0..<7 {
            for col in 0..<5 {
                let x = p.textX + (6 * i + col) * p.scale + p.scale / 2, y = p.textY + row * p.scale + p.scale / 2
                guard let l = luma(x, y) else { return nil }
                if l >= 170 { rows[row] |= 0b10000 >> UInt8(col) } else if l > 85 { return nil }
            }
        }
        guard let c = LabelFont.character(rows) else { return nil }
        text.append(c)
    }
    return text
}

extension PatternRenderer {
    /// Draws `label` (letters, digits, space, '-' and '.'; others as spaces): the black box with
    /// full chroma, then the letters' light only (white and black share their chroma, so odd
    /// letter edges need no chroma of their own).
    func drawLabel(_ canvas: PatternCanvas, _ label: String) {
        guard let p = LabelPlacement(text: label, geometry: geometry) else { return }
        canvas.fill(x: p.x, y: p.y, w: p.width, h: p.height, black)
        for (i, c) in label.enumerated() {
            for (row, bits) in LabelFont.rows(c).enumerated() {
                for col in 0..<5 where bits & (0b10000 >> UInt8(col)) != 0 {
                    canvas.fillLight(
                        x: p.textX + (6 * i + col) * p.scale, y: p.textY + row * p.scale, size: p.scale, white)
                }
            }
        }
    }
}

extension PatternCanvas {
    /// Sets the light of a `size`-pixel square to `c`'s, leaving chroma as it is (any position).
    func fillLight(x: Int, y: Int, size: Int, _ c: PatternColor) {
        for row in y..<min(y + size, height) {
            for col in x..<min(x + size, width) {
                switch layout {
                case .packed422(let y0, _, let y1, _):
                    base.storeBytes(of: c.y, toByteOffset: row * width * 2 + (col / 2) * 4 + (col % 2 == 0 ? y0 : y1), as: UInt8.self)
                case .semiPlanar, .planar, .grey:
                    base.storeBytes(of: c.y, toByteOffset: row * width + col, as: UInt8.self)
                case .rgb(let ri, let gi, let bi):
                    let p = row * width * 3 + col * 3
                    base.storeBytes(of: c.r, toByteOffset: p + ri, as: UInt8.self)
                    base.storeBytes(of: c.g, toByteOffset: p + gi, as: UInt8.self)
                    base.storeBytes(of: c.b, toByteOffset: p + bi, as: UInt8.self)
                }
            }
        }
    }
}
