// `capture snap`: photos from the camera, into the album, a file or a folder.
import Capture
import Foundation

extension Command {
    package static let snap = Command(
        name: "snap", summary: "take photos (JPEG) into the album, a file or a folder",
        usage: """
            usage: capture snap [-d|--device PATH|ID|virtual|file:MEDIA] [--preset NAME | -s|--size WxH] [-f|--format FOURCC]
                                [-q|--quality 1-100] [-n|--count N] [-o|--output FILE|DIR/] [--time-code] [--json]
                   (without --output, photos go to the album, ~/Pictures or XDG_PICTURES_DIR; FILE's folder must exist,
                   its name ends in .jpg or .jpeg (or has no extension); only a regular file at FILE is replaced,
                   never a FIFO, device node or symbolic link;
                   --time-code: the virtual camera shows the capture time in the photo, for measuring latency;
                   --json: when all are written, an object with device, format ("jpeg"), quality and photos, each
                   with path, width, height, bytes and sequence)
            """,
        options: Options(
            valued: ["device", "preset", "size", "format", "quality", "count", "output"], boolean: ["time-code", "json"],
            exclusive: [presetOrSize]),
        run: snapCommand)
}

// The JSON keys `capture` prints are snake_case; the names are the keys.
struct SnapJSON: Encodable {
    var device: String, format: String, quality: Int, photos: [PhotoJSON]
}
struct PhotoJSON: Encodable { var path: String, width: Int, height: Int, bytes: Int64, sequence: UInt64 }

func snapCommand(_ args: Arguments) throws {
    let count = try args.int("count", default: 1, range: 1...100_000)
    let quality = try args.int("quality", default: 90, range: 1...100)
    let destination = try SnapDestination(args.values["output"])
    let device = try chooseCamera(args.values["device"])
    let still = CaptureStillImageOutput()
    still.outputSettings = .init(quality: quality)
    let session = try makeSession(device, args, outputs: [still])
    defer { session.stopRunning() }
    guard let connection = still.connection(with: .video) else { throw ToolError(message: "no video connection to the still output") }
    let json = args.flags.contains("json")
    var photos: [PhotoJSON] = []
    for i in 1...count {
        let sample = try runBlocking { () async throws(CaptureError) -> SampleBuffer in try await still.captureStillImage(from: connection)
        }
        guard let jpeg = CaptureStillImageOutput.jpegStillImageDataRepresentation(sample) else {
            throw ToolError(message: "the still has no JPEG data")
        }
        // The camera's maker and name as EXIF Make and Model (written where the still has no EXIF).
        let url = try destination.save(
            jpeg, metadata: PhotoMetadata(make: device.manufacturer, model: device.localizedName),
            index: i, count: count)
        // The file's size, EXIF included: what is on the disk, not what the camera gave.
        let size = OutputPath.size(url.path)
        if json {
            let d = sample.dimensions
            photos.append(
                PhotoJSON(path: url.path, width: d?.width ?? 0, height: d?.height ?? 0, bytes: size ?? 0, sequence: sample.sequenceNumber))
        } else {
            print(
                "\(url.path)\t\(sample.dimensions.map(\.description) ?? "?")\t\(size.map(String.init) ?? "?") bytes\tsequence \(sample.sequenceNumber)"
            )
        }
    }
    if json { print(try jsonString(SnapJSON(device: device.path, format: "jpeg", quality: quality, photos: photos))) }
}
