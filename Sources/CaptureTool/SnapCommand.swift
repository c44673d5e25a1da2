// `capture snap`: photos from the camera, into the album, a file or a folder.
import Capture
import Foundation

extension Command {
    static let snap = Command(
        name: "snap", summary: "take photos (JPEG) into the album, a file or a folder",
        usage: """
            usage: capture snap [--device PATH|ID|virtual|file:MEDIA] [--preset NAME | --size WxH] [--format FOURCC]
                                [--quality 1-100] [--count N] [--output FILE|DIR/] [--time-code]
                   (without --output, photos go to the album, ~/Pictures or XDG_PICTURES_DIR; FILE's folder must exist,
                   its name ends in .jpg or .jpeg (or has no extension); only a regular file at FILE is replaced,
                   never a FIFO, device node or symbolic link;
                   --time-code: the virtual camera shows the capture time in the photo, for measuring latency)
            """,
        options: Options(
            valued: ["device", "preset", "size", "format", "quality", "count", "output"], boolean: ["time-code"],
            exclusive: [presetOrSize]),
        run: snapCommand)
}

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
        let d = sample.dimensions.map(\.description) ?? "?"
        // The file's size, EXIF included: what is on the disk, not what the camera gave.
        let bytes = OutputPath.size(url.path).map(String.init) ?? "?"
        print("\(url.path)\t\(d)\t\(bytes) bytes\tsequence \(sample.sequenceNumber)")
    }
}
