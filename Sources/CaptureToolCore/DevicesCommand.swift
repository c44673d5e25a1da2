// `capture devices`: the cameras and microphones, and whether this user may use them.
import Capture
import Foundation

extension Command {
    package static let devices = Command(
        name: "devices", summary: "list the cameras and microphones, and whether this user may use them",
        usage: """
            usage: capture devices [--json] [--request-access]
                   (cameras and microphones: path, media type, position, name, unique ID; then
                   whether this user may use each: "video authorization: STATUS[: ADVICE]", "audio ...";
                   --json: an array of devices, each with path, name, unique_id, position, media_type, driver,
                   bus_info, formats (a camera's: fourcc, width, height, description, compressed, emulated,
                   max_frame_rate, frame_rates as min and max frames per second), its media type's authorization
                   and, unless authorized, authorization_advice; --request-access: first asks for access as an app
                   does, which inside a sandbox asks the camera portal and may show the desktop's prompt)
            """,
        options: Options(valued: [], boolean: ["json", "request-access"]),
        run: devicesCommand)
}

// The JSON keys `capture` prints are snake_case; the names are the keys.
// swift-format-ignore: AlwaysUseLowerCamelCase
struct DeviceJSON: Encodable {
    var path: String, name: String, unique_id: String, position: String, media_type: String, driver: String, bus_info: String
    var formats: [FormatJSON]
    /// The device's media type's authorization status, and what to do about it (absent when
    /// authorized): the text output's "video authorization: STATUS: ADVICE" lines, in each entry.
    var authorization: String, authorization_advice: String?

    init(_ d: CaptureDevice, authorization: CaptureDevice.AuthorizationStatus, advice: String?) {
        path = d.path
        name = d.localizedName
        unique_id = d.uniqueID
        position = d.position.rawValue
        media_type = d.mediaType.rawValue
        driver = d.modelID
        bus_info = d.busInfo
        formats = d.mediaType == .video ? d.formats.map(FormatJSON.init) : []
        self.authorization = authorization.rawValue
        authorization_advice = advice
    }
}

/// One way a camera captures: numbers, not prose (`formats[].description` is the driver's name).
// swift-format-ignore: AlwaysUseLowerCamelCase
struct FormatJSON: Encodable {
    var fourcc: String, width: Int, height: Int, description: String, compressed: Bool, emulated: Bool
    /// The highest rate of `frame_rates`, 0 when the driver gives none.
    var max_frame_rate: Double
    /// Highest first; a discrete rate has `min` equal to `max`, a range its two ends.
    var frame_rates: [FrameRatesJSON]

    init(_ f: CaptureDevice.Format) {
        fourcc = f.pixelFormat.description
        width = f.dimensions.width
        height = f.dimensions.height
        description = f.formatDescription
        compressed = f.isCompressed
        emulated = f.isEmulated
        max_frame_rate = Self.rounded(f.maxFrameRate)
        frame_rates = f.videoSupportedFrameRateRanges.map {
            FrameRatesJSON(min: Self.rounded($0.minFrameRate), max: Self.rounded($0.maxFrameRate))
        }
    }

    /// Three decimals: 30000/1001 is 29.97, not 29.970029970029973.
    static func rounded(_ fps: Double) -> Double { (fps * 1000).rounded() / 1000 }
}

struct FrameRatesJSON: Encodable { var min: Double, max: Double }

func devicesCommand(_ args: Arguments) throws {
    if args.flags.contains("request-access") {
        for type in MediaType.allCases {
            let done = DispatchSemaphore(value: 0)
            CaptureDevice.requestAccess(for: type) { _ in done.signal() }
            done.wait()
        }
    }
    // Read before the virtual pair below is installed: a virtual camera is authorized by
    // itself, and what the user needs to know is whether this machine's devices are theirs.
    // Once per media type: each check looks at the device nodes and groups.
    let status = Dictionary(uniqueKeysWithValues: MediaType.allCases.map { ($0, CaptureDevice.authorizationStatus(for: $0)) })
    let advice = Dictionary(uniqueKeysWithValues: MediaType.allCases.map { ($0, CaptureDevice.authorizationAdvice(for: $0)) })
    var all = CaptureDevice.devices(for: .video) + CaptureDevice.devices(for: .audio)
    if all.filter({ $0.mediaType == .video }).isEmpty {
        // Cameras this user may not open are not listed: say so rather than "no camera".
        let why = (advice[.video] ?? nil).map { " this user may open (\($0))" } ?? " on this machine"
        FileHandle.standardError.write(Data("capture: no camera\(why); listing the virtual camera\n".utf8))
        _ = VirtualCamera.installDefaultPair()
        all = CaptureDevice.devices(for: .video) + CaptureDevice.devices(for: .audio)
    }
    if args.flags.contains("json") {
        print(
            try jsonString(
                all.map { DeviceJSON($0, authorization: status[$0.mediaType] ?? .notDetermined, advice: advice[$0.mediaType] ?? nil) }))
    } else {
        for d in all {
            print("\(d.path)\t\(d.mediaType.rawValue)\t\(d.position.rawValue)\t\(d.localizedName)\t\(d.uniqueID)")
        }
        for type in [MediaType.video, .audio] {
            let words = (advice[type] ?? nil).map { ": " + $0 } ?? ""
            print("\(type.rawValue) authorization: \((status[type] ?? .notDetermined).rawValue)\(words)")
        }
    }
}
