/// What a metadata output looks for and what an object is, as `AVMetadataObject.ObjectType`
/// (the same raw strings, so stored or logged values read the same).
///
/// A value; any thread.
public struct MetadataObjectType: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// QR code (`AVMetadataObject.ObjectType.qr`).
    public static let qr = MetadataObjectType(rawValue: "org.iso.QRCode")
    /// EAN-8.
    public static let ean8 = MetadataObjectType(rawValue: "org.gs1.EAN-8")
    /// EAN-13; a UPC-A code is reported as EAN-13 with a leading 0, as AVFoundation does.
    public static let ean13 = MetadataObjectType(rawValue: "org.gs1.EAN-13")
    /// UPC-E.
    public static let upce = MetadataObjectType(rawValue: "org.gs1.UPC-E")
    /// Code 39.
    public static let code39 = MetadataObjectType(rawValue: "org.iso.Code39")
    /// Code 93.
    public static let code93 = MetadataObjectType(rawValue: "com.intermec.Code93")
    /// Code 128.
    public static let code128 = MetadataObjectType(rawValue: "org.iso.Code128")
    /// Interleaved 2 of 5 (ITF).
    public static let interleaved2of5 = MetadataObjectType(rawValue: "org.ansi.Interleaved2of5")
    /// PDF417.
    public static let pdf417 = MetadataObjectType(rawValue: "org.iso.PDF417")
    /// Data Matrix.
    public static let dataMatrix = MetadataObjectType(rawValue: "org.iso.DataMatrix")
    /// Aztec.
    public static let aztec = MetadataObjectType(rawValue: "org.iso.Aztec")
    /// Codabar.
    public static let codabar = MetadataObjectType(rawValue: "Codabar")
    /// A human face (`AVMetadataObject.ObjectType.face`).
    public static let face = MetadataObjectType(rawValue: "face")

    /// The machine-readable code types, in the order `availableMetadataObjectTypes` lists them.
    public static let machineReadableCodes: [MetadataObjectType] = [
        .qr, .ean8, .ean13, .upce, .code39, .code93, .code128, .interleaved2of5, .pdf417, .dataMatrix, .aztec, .codabar,
    ]

    /// A short name for the command line and logs ("qr", "ean13", "face").
    public var name: String {
        switch self {
        case .qr: "qr"
        case .ean8: "ean8"
        case .ean13: "ean13"
        case .upce: "upce"
        case .code39: "code39"
        case .code93: "code93"
        case .code128: "code128"
        case .interleaved2of5: "itf"
        case .pdf417: "pdf417"
        case .dataMatrix: "datamatrix"
        case .aztec: "aztec"
        case .codabar: "codabar"
        case .face: "face"
        default: rawValue
        }
    }

    /// The type a short name (`name`) or raw value stands for, or nil.
    public init?(name: String) {
        let all = Self.machineReadableCodes + [.face]
        guard let t = all.first(where: { $0.name == name.lowercased() || $0.rawValue == name }) else { return nil }
        self = t
    }

    public var description: String { name }

    /// zxing-cpp's `BarcodeFormat` bits for the type (UPC-A goes with EAN-13); 0 for faces.
    package var zxingFormats: UInt32 {
        switch self {
        case .aztec: 1 << 0
        case .codabar: 1 << 1
        case .code39: 1 << 2
        case .code93: 1 << 3
        case .code128: 1 << 4
        case .dataMatrix: 1 << 7
        case .ean8: 1 << 8
        case .ean13: 1 << 9 | 1 << 14
        case .interleaved2of5: 1 << 10
        case .pdf417: 1 << 12
        case .qr: 1 << 13
        case .upce: 1 << 15
        default: 0
        }
    }

    /// The type of a code zxing-cpp reported with format bit `format`; `isUPCA` when it was UPC-A.
    static func fromZXing(_ format: UInt32) -> (type: MetadataObjectType, isUPCA: Bool)? {
        if format == 1 << 14 { return (.ean13, true) }
        guard let t = machineReadableCodes.first(where: { $0.zxingFormats & format != 0 }) else { return nil }
        return (t, false)
    }
}
