// `capture devices`: the cameras and microphones, and whether this user may use them.
import Capture
import Foundation

extension Command {
    static let devices = Command(
        name: "devices", summary: "list the cameras and microphones, and whether this user may use them",
        usage: """
            usage: capture devices [--json] [--request-access]
                   (cameras and microphones: path, media type, position, name, unique ID; then
                   whether this user may use each: "video authorization: STATUS[: ADVICE]", "audio ...";
                   --json: an array of devices, each with its media type's "authorization" and, unless
                   authorized, "authorizationAdvice"; --request-access: first asks for access as an app
                   does, which inside a sandbox asks the camera portal and may show the desktop's prompt)
            """,
        options: Options(valued: [], boolean: ["json", "request-access"]),
        run: devicesCommand)
}

struct DeviceJSON: Encodable {
    var path: String, name: String, uniqueID: String, position: String, mediaType: String, driver: String, busInfo: String
    var formats: [String]
    /// The device's media type's authorization status, and what to do about it (absent when
    /// authorized): the text output's "video authorization: STATUS: ADVICE" lines. Flat
    /// strings in each entry, so the output stays an array that line-based readers (the shell
    /// completions) parse unchanged.
    var authorization: String, authorizationAdvice: String?
}

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
                all.map {
                    DeviceJSON(
                        path: $0.path, name: $0.localizedName, uniqueID: $0.uniqueID, position: $0.position.rawValue,
                        mediaType: $0.mediaType.rawValue, driver: $0.modelID, busInfo: $0.busInfo,
                        formats: $0.mediaType == .video ? $0.formats.map(\.description) : [],
                        authorization: (status[$0.mediaType] ?? .notDetermined).rawValue, authorizationAdvice: advice[$0.mediaType] ?? nil)
                }))
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
