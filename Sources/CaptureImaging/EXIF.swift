import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The EXIF facts a still carries: orientation, camera make and model, when it was taken.
///
/// `appendSegment(to:)` writes them as an APP1 segment (TIFF little-endian: IFD0 with Make,
/// Model, Orientation, DateTime and a pointer to the Exif IFD with ExifVersion and
/// DateTimeOriginal); `init(jpeg:)` reads them back from a JPEG. Plain value; any thread.
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
    public func appendPayload(to out: inout [UInt8]) {
        let tagCount0 = (make == nil ? 0 : 1) + (model == nil ? 0 : 1) + 1 + (dateTime == nil ? 0 : 1) + 1
        let tagCountExif = dateTime == nil ? 1 : 2
        let tiff = out.count + 6
        out.append(contentsOf: [0x45, 0x78, 0x69, 0x66, 0, 0])  // "Exif\0\0"
        out.append(contentsOf: [0x49, 0x49, 0x2A, 0x00, 0x08, 0x00, 0x00, 0x00])  // II, 42, IFD0 at 8

        // Offsets are from the TIFF header. Values longer than 4 bytes go after the IFD, at even offsets.
        var data = 8 + 2 + 12 * tagCount0 + 4
        func place(_ byteCount: Int) -> Int {
            let at = data
            data += (byteCount + 1) & ~1
            return at
        }
        let makeBytes = make.map { Self.asciiBytes($0) }
        let modelBytes = model.map { Self.asciiBytes($0) }
        let dateBytes = dateTime.map { Self.asciiBytes($0) }
        let makeAt = makeBytes.map { $0.count > 4 ? place($0.count) : 0 } ?? 0
        let modelAt = modelBytes.map { $0.count > 4 ? place($0.count) : 0 } ?? 0
        let dateAt = dateBytes.map { $0.count > 4 ? place($0.count) : 0 } ?? 0
        let exifIFD = data
        data += 2 + 12 * tagCountExif + 4
        let originalAt = dateBytes.map { $0.count > 4 ? place($0.count) : 0 } ?? 0

        Self.u16(&out, UInt16(tagCount0))
        if let makeBytes { Self.entry(&out, tag: 0x010F, type: 2, count: makeBytes.count, inline: makeBytes, offset: makeAt) }
        if let modelBytes { Self.entry(&out, tag: 0x0110, type: 2, count: modelBytes.count, inline: modelBytes, offset: modelAt) }
        Self.u16(&out, 0x0112); Self.u16(&out, 3); Self.u32(&out, 1)
        Self.u16(&out, orientation.rawValue); Self.u16(&out, 0)
        if let dateBytes { Self.entry(&out, tag: 0x0132, type: 2, count: dateBytes.count, inline: dateBytes, offset: dateAt) }
        Self.u16(&out, 0x8769); Self.u16(&out, 4); Self.u32(&out, 1); Self.u32(&out, UInt32(exifIFD))
        Self.u32(&out, 0)  // no IFD1

        func fill(_ bytes: [UInt8]?, at offset: Int) {
            guard let bytes, bytes.count > 4 else { return }
            precondition(out.count - tiff == offset)
            out.append(contentsOf: bytes)
            if bytes.count & 1 == 1 { out.append(0) }
        }
        fill(makeBytes, at: makeAt)
        fill(modelBytes, at: modelAt)
        fill(dateBytes, at: dateAt)

        precondition(out.count - tiff == exifIFD)
        Self.u16(&out, UInt16(tagCountExif))
        Self.u16(&out, 0x9000); Self.u16(&out, 7); Self.u32(&out, 4)
        out.append(contentsOf: [0x30, 0x32, 0x33, 0x32])  // "0232"
        if let dateBytes { Self.entry(&out, tag: 0x9003, type: 2, count: dateBytes.count, inline: dateBytes, offset: originalAt) }
        Self.u32(&out, 0)
        fill(dateBytes, at: originalAt)
    }

    /// The whole APP1 segment: marker, length and payload.
    public func appendSegment(to out: inout [UInt8]) {
        let start = out.count
        out.append(contentsOf: [0xFF, 0xE1, 0, 0])
        appendPayload(to: &out)
        let length = out.count - start - 2
        out[start + 2] = UInt8(truncatingIfNeeded: length >> 8)
        out[start + 3] = UInt8(truncatingIfNeeded: length)
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

    private static func entry(_ out: inout [UInt8], tag: UInt16, type: UInt16, count: Int, inline: [UInt8], offset: Int) {
        u16(&out, tag); u16(&out, type); u32(&out, UInt32(count))
        if count <= 4 {
            out.append(contentsOf: inline)
            out.append(contentsOf: repeatElement(0, count: 4 - inline.count))
        } else {
            u32(&out, UInt32(offset))
        }
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
