import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The EXIF facts a still carries: orientation, camera make and model, when it was taken.
///
/// `appendSegment(to:pixelWidth:pixelHeight:)` writes them as an APP1 segment (TIFF
/// little-endian, with every tag EXIF requires of a JPEG: IFD0 with Make, Model, Orientation,
/// resolution, DateTime, YCbCrPositioning and a pointer to the Exif IFD with ExifVersion,
/// DateTimeOriginal, ComponentsConfiguration, FlashpixVersion, ColorSpace and the pixel size);
/// `init(jpeg:)` reads them back from a JPEG. Plain value; any thread.
public struct EXIFInfo: Sendable, Hashable {
    /// How a viewer must turn the pixels (EXIF `Orientation`).
    public var orientation: EXIFOrientation
    /// The camera maker (EXIF `Make`), ASCII; other characters are written as `?`.
    public var make: String?
    /// The camera model (EXIF `Model`), ASCII.
    public var model: String?
    /// When the picture was taken, local time, in EXIF's `YYYY:MM:DD HH:MM:SS` form
    /// (written as both `DateTime` and `DateTimeOriginal`).
    public var dateTime: String?

    public init(orientation: EXIFOrientation = .up, make: String? = nil, model: String? = nil, dateTime: String? = nil) {
        self.orientation = orientation
        self.make = make
        self.model = model
        self.dateTime = dateTime
    }

    /// Takes the date as local time.
    public init(orientation: EXIFOrientation = .up, make: String? = nil, model: String? = nil, date: Date) {
        self.init(orientation: orientation, make: make, model: model, dateTime: Self.dateTimeString(date))
    }

    /// `date` in EXIF's form, in the local time zone.
    public static func dateTimeString(_ date: Date) -> String {
        var t = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        localtime_r(&t, &parts)
        func two(_ v: Int32) -> String { v < 10 ? "0\(v)" : "\(v)" }
        let year = String(parts.tm_year + 1900)
        return "\(year):\(two(parts.tm_mon + 1)):\(two(parts.tm_mday)) \(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))"
    }

    package static let maximumStringBytes = 255

    // MARK: writing

    /// The APP1 payload: `Exif\0\0` and the TIFF structure (what follows the segment length).
    /// `pixelWidth` and `pixelHeight` are the compressed image's size (EXIF `PixelXDimension`
    /// and `PixelYDimension`), which the writer of the JPEG knows; without them the payload
    /// lacks two tags the standard requires.
    public func appendPayload(to out: inout [UInt8], pixelWidth: Int?, pixelHeight: Int?) {
        // Every tag EXIF 2.32 requires of a compressed (JPEG) primary image, in ascending order
        // as TIFF wants: 72 dpi (a camera has no print size), chroma centred as JPEG samples it.
        var ifd0: [Entry] = []
        if let make { ifd0.append(Entry(0x010F, ascii: make)) }
        if let model { ifd0.append(Entry(0x0110, ascii: model)) }
        ifd0.append(Entry(0x0112, short: orientation.rawValue))
        ifd0.append(Entry(0x011A, rational: 72, 1))
        ifd0.append(Entry(0x011B, rational: 72, 1))
        ifd0.append(Entry(0x0128, short: 2))  // inches
        if let dateTime { ifd0.append(Entry(0x0132, ascii: dateTime)) }
        ifd0.append(Entry(0x0213, short: 1))  // centred
        var exif: [Entry] = [Entry(0x9000, undefined: [0x30, 0x32, 0x33, 0x32])]  // "0232"
        if let dateTime { exif.append(Entry(0x9003, ascii: dateTime)) }
        exif.append(Entry(0x9101, undefined: [1, 2, 3, 0]))  // Y, Cb, Cr
        exif.append(Entry(0xA000, undefined: [0x30, 0x31, 0x30, 0x30]))  // "0100"
        exif.append(Entry(0xA001, short: 1))  // sRGB
        if let pixelWidth, let pixelHeight {
            exif.append(Entry(0xA002, long: UInt32(clamping: pixelWidth)))
            exif.append(Entry(0xA003, long: UInt32(clamping: pixelHeight)))
        }
        // IFD0 at 8, its values, then the Exif IFD and its values. Offsets are from the TIFF header.
        let exifIFD = 8 + Self.size(of: ifd0.count + 1, ifd0)
        ifd0.append(Entry(0x8769, long: UInt32(exifIFD)))
        let tiff = out.count + 6
        out.append(contentsOf: [0x45, 0x78, 0x69, 0x66, 0, 0])  // "Exif\0\0"
        out.append(contentsOf: [0x49, 0x49, 0x2A, 0x00, 0x08, 0x00, 0x00, 0x00])  // II, 42, IFD0 at 8
        Self.write(ifd0, into: &out, tiff: tiff)
        precondition(out.count - tiff == exifIFD)
        Self.write(exif, into: &out, tiff: tiff)
    }

    /// `appendPayload(to:pixelWidth:pixelHeight:)` without the image's size.
    public func appendPayload(to out: inout [UInt8]) {
        appendPayload(to: &out, pixelWidth: nil, pixelHeight: nil)
    }

    /// The whole APP1 segment, without the image's size (see `appendPayload(to:pixelWidth:pixelHeight:)`).
    public func appendSegment(to out: inout [UInt8]) {
        appendSegment(to: &out, pixelWidth: nil, pixelHeight: nil)
    }

    /// The whole APP1 segment: marker, length and payload.
    public func appendSegment(to out: inout [UInt8], pixelWidth: Int?, pixelHeight: Int?) {
        let start = out.count
        out.append(contentsOf: [0xFF, 0xE1, 0, 0])
        appendPayload(to: &out, pixelWidth: pixelWidth, pixelHeight: pixelHeight)
        let length = out.count - start - 2
        out[start + 2] = UInt8(truncatingIfNeeded: length >> 8)
        out[start + 3] = UInt8(truncatingIfNeeded: length)
    }

    /// One IFD entry: tag, TIFF type, count and the value's little-endian bytes.
    private struct Entry {
        var tag: UInt16
        var type: UInt16
        var count: Int
        var value: [UInt8]

        init(_ tag: UInt16, ascii: String) {
            let bytes = EXIFInfo.asciiBytes(ascii)
            self.init(tag: tag, type: 2, count: bytes.count, value: bytes)
        }
        init(_ tag: UInt16, short: UInt16) {
            self.init(tag: tag, type: 3, count: 1, value: [UInt8(short & 0xFF), UInt8(short >> 8)])
        }
        init(_ tag: UInt16, long: UInt32) {
            var bytes: [UInt8] = []
            EXIFInfo.u32(&bytes, long)
            self.init(tag: tag, type: 4, count: 1, value: bytes)
        }
        init(_ tag: UInt16, rational numerator: UInt32, _ denominator: UInt32) {
            var bytes: [UInt8] = []
            EXIFInfo.u32(&bytes, numerator)
            EXIFInfo.u32(&bytes, denominator)
            self.init(tag: tag, type: 5, count: 1, value: bytes)
        }
        init(_ tag: UInt16, undefined: [UInt8]) {
            self.init(tag: tag, type: 7, count: undefined.count, value: undefined)
        }
        init(tag: UInt16, type: UInt16, count: Int, value: [UInt8]) {
            self.tag = tag
            self.type = type
            self.count = count
            self.value = value
        }
        /// Bytes after the IFD (values longer than 4 bytes, at even offsets).
        var outOfLine: Int { value.count > 4 ? (value.count + 1) & ~1 : 0 }
    }

    /// Bytes of an IFD of `count` entries with `entries`' long values after it.
    private static func size(of count: Int, _ entries: [Entry]) -> Int {
        2 + 12 * count + 4 + entries.reduce(0) { $0 + $1.outOfLine }
    }

    /// Writes an IFD (no next IFD) and then its long values.
    private static func write(_ entries: [Entry], into out: inout [UInt8], tiff: Int) {
        var data = out.count - tiff + 2 + 12 * entries.count + 4
        u16(&out, UInt16(entries.count))
        for e in entries {
            u16(&out, e.tag); u16(&out, e.type); u32(&out, UInt32(e.count))
            if e.value.count <= 4 {
                out.append(contentsOf: e.value)
                out.append(contentsOf: repeatElement(0, count: 4 - e.value.count))
            } else {
                u32(&out, UInt32(data))
                data += e.outOfLine
            }
        }
        u32(&out, 0)
        for e in entries where e.value.count > 4 {
            out.append(contentsOf: e.value)
            if e.value.count & 1 == 1 { out.append(0) }
        }
    }

    /// ASCII with a terminating NUL, at most `maximumStringBytes` characters.
    private static func asciiBytes(_ s: String) -> [UInt8] {
        var bytes: [UInt8] = []
        for scalar in s.unicodeScalars.prefix(maximumStringBytes) {
            bytes.append(scalar.value >= 0x20 && scalar.value < 0x7F ? UInt8(scalar.value) : 0x3F)
        }
        bytes.append(0)
        return bytes
    }

    private static func u16(_ out: inout [UInt8], _ v: UInt16) {
        out.append(UInt8(v & 0xFF)); out.append(UInt8(v >> 8))
    }

    private static func u32(_ out: inout [UInt8], _ v: UInt32) {
        for shift in stride(from: 0, to: 32, by: 8) { out.append(UInt8((v >> UInt32(shift)) & 0xFF)) }
    }

    // MARK: reading

    /// Reads the Exif APP1 segment of a JPEG; nil when there is none or it does not parse.
    public init?(jpeg: UnsafeRawBufferPointer) {
        guard let markers = try? JPEGMarkers(parsing: jpeg), let segment = markers.exifSegment else { return nil }
        self.init(app1Payload: UnsafeRawBufferPointer(rebasing: jpeg[(segment.lowerBound + 4)..<segment.upperBound]))
    }

    /// Reads an APP1 payload (`Exif\0\0` and TIFF, either byte order). Nil when it does not parse.
    /// Every offset is checked; unknown tags are skipped.
    public init?(app1Payload p: UnsafeRawBufferPointer) {
        guard p.count >= 14, p[0] == 0x45, p[1] == 0x78, p[2] == 0x69, p[3] == 0x66, p[4] == 0, p[5] == 0 else { return nil }
        let tiff = UnsafeRawBufferPointer(rebasing: p[6...])
        let little: Bool
        switch (tiff[0], tiff[1]) {
        case (0x49, 0x49): little = true
        case (0x4D, 0x4D): little = false
        default: return nil
        }
        func u16(_ at: Int) -> Int? {
            guard at >= 0, at <= tiff.count - 2 else { return nil }
            return little ? Int(tiff[at]) | Int(tiff[at + 1]) << 8 : Int(tiff[at]) << 8 | Int(tiff[at + 1])
        }
        func u32(_ at: Int) -> Int? {
            guard let a = u16(at), let b = u16(at + 2) else { return nil }
            return little ? a | b << 16 : a << 16 | b
        }
        guard u16(2) == 42, let ifd0 = u32(4) else { return nil }

        var result = EXIFInfo()
        func string(entry: Int) -> String? {
            guard u16(entry + 2) == 2, let count = u32(entry + 4), count > 0, count <= 65535 else { return nil }
            let start = count <= 4 ? entry + 8 : (u32(entry + 8) ?? -1)
            guard start >= 0, start <= tiff.count - count else { return nil }
            var bytes = Array(tiff[start..<(start + count)])
            while bytes.last == 0 { bytes.removeLast() }
            return String(decoding: bytes, as: UTF8.self)
        }
        // Walks one IFD; returns false when it is malformed.
        func walk(_ ifd: Int, _ visit: (_ tag: Int, _ entry: Int) -> Void) -> Bool {
            guard let n = u16(ifd), n <= 512, ifd + 2 + 12 * n <= tiff.count else { return false }
            for k in 0..<n {
                let entry = ifd + 2 + 12 * k
                guard let tag = u16(entry) else { return false }
                visit(tag, entry)
            }
            return true
        }
        var exifIFD: Int?
        let ok = walk(ifd0) { tag, entry in
            switch tag {
            case 0x010F: result.make = string(entry: entry)
            case 0x0110: result.model = string(entry: entry)
            case 0x0132: result.dateTime = string(entry: entry)
            case 0x0112:
                if u16(entry + 2) == 3, let v = u16(entry + 8), let o = EXIFOrientation(rawValue: UInt16(truncatingIfNeeded: v)) {
                    result.orientation = o
                }
            case 0x8769: exifIFD = u32(entry + 8)
            default: break
            }
        }
        guard ok else { return nil }
        if let exifIFD, exifIFD != ifd0 {
            _ = walk(exifIFD) { tag, entry in
                if tag == 0x9003, result.dateTime == nil { result.dateTime = string(entry: entry) }
            }
        }
        self = result
    }
}
