/// A tiny built-in bitmap font (5x7 cells, upper-case letters, digits and some punctuation), so
/// that an overlay can show text without a font library.
enum BitmapFont {
    static let glyphWidth = 5
    static let glyphHeight = 7

    /// Each glyph: 7 rows of 5 cells, `#` set.
    private static let rows: [Character: [String]] = [
        "A": [" ### ", "#   #", "#   #", "#####", "#   #", "#   #", "#   #"],
        "B": ["#### ", "#   #", "#   #", "#### ", "#   #", "#   #", "#### "],
        "C": [" ### ", "#   #", "#    ", "#    ", "#    ", "#   #", " ### "],
        "D": ["#### ", "#   #", "#   #", "#   #", "#   #", "#   #", "#### "],
        "E": ["#####", "#    ", "#    ", "#### ", "#    ", "#    ", "#####"],
        "F": ["#####", "#    ", "#    ", "#### ", "#    ", "#    ", "#    "],
        "G": [" ### ", "#   #", "#    ", "# ###", "#   #", "#   #", " ####"],
        "H": ["#   #", "#   #", "#   #", "#####", "#   #", "#   #", "#   #"],
        "I": [" ### ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "],
        "J": ["  ###", "   # ", "   # ", "   # ", "   # ", "#  # ", " ##  "],
        "K": ["#   #", "#  # ", "# #  ", "##   ", "# #  ", "#  # ", "#   #"],
        "L": ["#    ", "#    ", "#    ", "#    ", "#    ", "#    ", "#####"],
        "M": ["#   #", "## ##", "# # #", "# # #", "#   #", "#   #", "#   #"],
        "N": ["#   #", "##  #", "# # #", "#  ##", "#   #", "#   #", "#   #"],
        "O": [" ### ", "#   #", "#   #", "#   #", "#   #", "#   #", " ### "],
        "P": ["#### ", "#   #", "#   #", "#### ", "#    ", "#    ", "#    "],
        "Q": [" ### ", "#   #", "#   #", "#   #", "# # #", "#  # ", " ## #"],
        "R": ["#### ", "#   #", "#   #", "#### ", "# #  ", "#  # ", "#   #"],
        "S": [" ####", "#    ", "#    ", " ### ", "    #", "    #", "#### "],
        "T": ["#####", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  "],
        "U": ["#   #", "#   #", "#   #", "#   #", "#   #", "#   #", " ### "],
        "V": ["#   #", "#   #", "#   #", "#   #", "#   #", " # # ", "  #  "],
        "W": ["#   #", "#   #", "#   #", "# # #", "# # #", "# # #", " # # "],
        "X": ["#   #", "#   #", " # # ", "  #  ", " # # ", "#   #", "#   #"],
        "Y": ["#   #", "#   #", " # # ", "  #  ", "  #  ", "  #  ", "  #  "],
        "Z": ["#####", "    #", "   # ", "  #  ", " #   ", "#    ", "#####"],
        "0": [" ### ", "#   #", "#  ##", "# # #", "##  #", "#   #", " ### "],
        "1": ["  #  ", " ##  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "],
        "2": [" ### ", "#   #", "    #", "   # ", "  #  ", " #   ", "#####"],
        "3": ["#####", "   # ", "  #  ", "   # ", "    #", "#   #", " ### "],
        "4": ["   # ", "  ## ", " # # ", "#  # ", "#####", "   # ", "   # "],
        "5": ["#####", "#    ", "#### ", "    #", "    #", "#   #", " ### "],
        "6": ["  ## ", " #   ", "#    ", "#### ", "#   #", "#   #", " ### "],
        "7": ["#####", "    #", "   # ", "  #  ", " #   ", " #   ", " #   "],
        "8": [" ### ", "#   #", "#   #", " ### ", "#   #", "#   #", " ### "],
        "9": [" ### ", "#   #", "#   #", " ####", "    #", "   # ", " ##  "],
        ".": ["     ", "     ", "     ", "     ", "     ", " ##  ", " ##  "],
        ",": ["     ", "     ", "     ", "     ", " ##  ", "  #  ", " #   "],
        ":": ["     ", " ##  ", " ##  ", "     ", " ##  ", " ##  ", "     "],
        "-": ["     ", "     ", "     ", "#####", "     ", "     ", "     "],
        "+": ["     ", "  #  ", "  #  ", "#####", "  #  ", "  #  ", "     "],
        "/": ["     ", "    #", "   # ", "  #  ", " #   ", "#    ", "     "],
        "%": ["##   ", "##  #", "   # ", "  #  ", " #   ", "#  ##", "   ##"],
        "(": ["   # ", "  #  ", " #   ", " #   ", " #   ", "  #  ", "   # "],
        ")": [" #   ", "  #  ", "   # ", "   # ", "   # ", "  #  ", " #   "],
        "=": ["     ", "     ", "#####", "     ", "#####", "     ", "     "],
        "?": [" ### ", "#   #", "    #", "   # ", "  #  ", "     ", "  #  "],
        " ": ["     ", "     ", "     ", "     ", "     ", "     ", "     "],
    ]

    /// The glyph's cells, row-major, 35 of them; lower-case letters use the upper-case glyph and
    /// characters without a glyph show as `?`.
    static let glyphs: [Character: [Bool]] = rows.mapValues { $0.flatMap { $0.map { $0 == "#" } } }

    static func glyph(_ c: Character) -> [Bool] {
        glyphs[c] ?? glyphs[Character(c.uppercased())] ?? glyphs["?"]!
    }
}

extension LayerImage {
    /// Text drawn with the built-in 5x7 bitmap font (letters in upper case), one line per `\n`,
    /// each cell `scale` pixels square, with `padding` cells around it, on `backgroundColor`.
    /// For overlays such as `capture preview`'s info panel; no font library needed.
    public init(
        text: String, color: Color = .white, backgroundColor: Color = Color(red: 0, green: 0, blue: 0, alpha: 0.7),
        scale: Int = 2, padding: Int = 2
    ) {
        let scale = max(1, scale), padding = max(0, padding)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(Array.init)
        let columns = lines.map(\.count).max() ?? 0
        // A glyph and one blank column; a line and one blank row.
        let cellsWide = max(1, columns * (BitmapFont.glyphWidth + 1) - 1 + 2 * padding)
        let cellsHigh = max(1, lines.count * (BitmapFont.glyphHeight + 1) - 1 + 2 * padding)
        let width = cellsWide * scale, height = cellsHigh * scale
        func byte(_ v: Double) -> UInt8 { UInt8(max(0, min(255, (v * 255).rounded()))) }
        let bg = [byte(backgroundColor.red), byte(backgroundColor.green), byte(backgroundColor.blue), byte(backgroundColor.alpha)]
        let fg = [byte(color.red), byte(color.green), byte(color.blue), byte(color.alpha)]
        var pixels = [UInt8](repeating: 0, count: width * height * 4)
        for i in 0..<(width * height) { pixels.replaceSubrange((i * 4)..<(i * 4 + 4), with: bg) }
        for (row, line) in lines.enumerated() {
            for (column, character) in line.enumerated() {
                let cells = BitmapFont.glyph(character)
                let x0 = padding + column * (BitmapFont.glyphWidth + 1), y0 = padding + row * (BitmapFont.glyphHeight + 1)
                for gy in 0..<BitmapFont.glyphHeight {
                    for gx in 0..<BitmapFont.glyphWidth where cells[gy * BitmapFont.glyphWidth + gx] {
                        for py in 0..<scale {
                            let y = (y0 + gy) * scale + py
                            for px in 0..<scale {
                                let o = (y * width + (x0 + gx) * scale + px) * 4
                                pixels.replaceSubrange(o..<(o + 4), with: fg)
                            }
                        }
                    }
                }
            }
        }
        // Sides and byte count agree by construction.
        self = try! LayerImage(rgbaPixels: pixels, width: width, height: height)
    }
}
