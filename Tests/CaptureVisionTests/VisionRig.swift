import Capture
import CaptureTestSupport
import CaptureVision
import Foundation
import Testing

/// A picture virtual camera in a running session with a metadata output, and what it found.
final class VisionRig: CaptureMetadataOutputObjectsDelegate, @unchecked Sendable {
    let camera: VirtualCamera
    let session = CaptureSession()
    let output = CaptureMetadataOutput()
    private let lock = NSLock()
    private let queue = DispatchQueue(label: "vision-rig")
    private var found: [[MetadataObject]] = []
    /// Frames before this sequence number may show the picture before the last `show`.
    private var firstNewSequence: UInt64 = 0

    /// A 640x480 NV12 camera (30 fps) showing `picture`, its metadata output looking for `types`.
    init(_ name: String, picture: VirtualCamera.Picture?, types: [MetadataObjectType], extra: [CaptureOutput] = []) throws {
        camera = VirtualCamera(
            name: "Vision \(name) \(UUID().uuidString.prefix(6))",
            formats: [.init(.nv12, width: 640, height: 480, frameRates: [30])])
        camera.picture = picture
        VirtualCamera.install(camera)
        let device = try #require(CaptureDevice.device(withUniqueID: camera.uniqueID))
        session.beginConfiguration()
        session.addInput(try CaptureDeviceInput(device: device))
        for o in extra { session.addOutput(o) }
        session.addOutput(output)
        if case .rejected(let e) = session.commitConfiguration() { throw e }
        try output.setMetadataObjectTypes(types)
        output.setMetadataObjectsDelegate(self, queue: queue)
        try session.start()
    }

    deinit {
        session.stopRunning()
        VirtualCamera.uninstall(camera)
    }

    func metadataOutput(_ output: CaptureMetadataOutput, didOutput objects: [MetadataObject], from connection: CaptureConnection) {
        lock.withLock {
            guard objects.allSatisfy({ $0.sequenceNumber >= firstNewSequence }) else { return }
            found.append(objects)
        }
    }

    /// Shows `picture` and forgets what was found before; frames drawn before it are ignored.
    func show(_ picture: VirtualCamera.Picture) {
        // The picture first: a frame numbered after the count read then is drawn with it (the
        // camera numbers a frame, then draws it). Read the other way round, a frame numbered in
        // between could show the last picture and be taken for the new one.
        camera.picture = picture
        let next = camera.framesProduced + 1
        lock.withLock {
            found.removeAll()
            firstNewSequence = next
        }
    }

    /// Forgets what was found, and ignores what frames captured until now will bring (for a
    /// change of the output's settings: later frames are looked at with the new ones).
    func forgetEarlierFrames() {
        let next = camera.framesProduced + 1
        lock.withLock {
            found.removeAll()
            firstNewSequence = next
        }
    }

    /// Waits until a frame's objects satisfy `test` (frames after `show`), or 30 s.
    func firstFrame(where test: ([MetadataObject]) -> Bool) -> [MetadataObject]? {
        var hit: [MetadataObject]?
        // (The detector runs at nice 10: on a machine busy with other suites it may wait seconds
        // for a core; how long it waits is not what the tests measure.)
        _ = waitUntil(timeout: 90) {
            hit = lock.withLock { found.first(where: test) }
            return hit != nil
        }
        return hit
    }

    /// Waits until the output has looked at `frames` more frames; returns all it found then.
    func objects(overFrames frames: Int) -> [MetadataObject] {
        let start = output.statistics.framesDetected
        lock.withLock { found.removeAll() }
        _ = waitUntil(timeout: 30) { output.statistics.framesDetected >= start + frames }
        // What the delegate queue still has for those frames.
        queue.sync {}
        return lock.withLock { found.flatMap { $0 } }
    }
}

/// The test pictures made by make-pictures.py (python-barcode, scikit-image), once a process.
enum VisionPictures {
    struct Label: Decodable {
        var width: Int
        var height: Int
        var text: String?
        var box: [Int]?
        var faces: [[Int]]?
    }

    static let folder: URL = {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("vision-pictures-\(getpid())")
        try? FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("make-pictures.py")
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["python3", script.path, dir.path]
        try? p.run()
        p.waitForExit()
        return dir
    }()

    static let labels: [String: Label] = {
        guard let data = FileManager.default.contents(atPath: folder.appendingPathComponent("labels.json").path) else { return [:] }
        return (try? JSONDecoder().decode([String: Label].self, from: data)) ?? [:]
    }()

    static func picture(_ name: String) throws -> VirtualCamera.Picture {
        try VirtualCamera.Picture(contentsOfFile: folder.appendingPathComponent("\(name).jpg").path)
    }

    /// A labelled box (picture pixels) in the normalized coordinates of a 640x480 frame showing
    /// the picture letterboxed.
    static func normalized(_ box: [Int], in label: Label) -> CGRect {
        let p = VirtualCamera.PictureFit.letterbox.placement(
            pictureWidth: label.width, pictureHeight: label.height, frameWidth: 640, frameHeight: 480)
        let s = p.width / Double(label.width)
        return CGRect(
            x: (p.x + Double(box[0]) * s) / 640, y: (p.y + Double(box[1]) * s) / 480, width: Double(box[2]) * s / 640,
            height: Double(box[3]) * s / 480)
    }
}

/// A QR code made by `qrencode`, drawn on a 640x480 picture: `size` pixels wide (without its
/// quiet zone), centred at `centre`, turned `degrees` clockwise; with its corners as printed
/// (top left, top right, bottom right, bottom left) in normalized frame coordinates.
func qrPicture(_ text: String, size: Double, centre: CGPoint, degrees: Double) throws -> (VirtualCamera.Picture, [CGPoint]) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/usr/bin/qrencode")
    p.arguments = ["-t", "ASCII", "-m", "0", "-o", "-", text]
    let pipe = Pipe()
    p.standardOutput = pipe
    try p.run()
    let ascii = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    p.waitForExit()
    // Each module is two characters, '#' dark.
    let rows = ascii.split(separator: "\n").map { line in stride(from: 0, to: line.count, by: 2).map { Array(line)[$0] == "#" } }
    let n = rows.count
    try #require(n >= 21 && rows.allSatisfy { $0.count == n }, "qrencode gave no code for '\(text)'")
    let module = size / Double(n)
    let a = degrees * .pi / 180, c = cos(a), s = sin(a)
    var rgb = [UInt8](repeating: 128, count: 640 * 480 * 3)
    for y in 0..<480 {
        for x in 0..<640 {
            // Back into the code's own (unturned) module coordinates.
            let dx = Double(x) + 0.5 - centre.x, dy = Double(y) + 0.5 - centre.y
            let u = (c * dx + s * dy) / module + Double(n) / 2, v = (-s * dx + c * dy) / module + Double(n) / 2
            guard u >= -4, v >= -4, u < Double(n + 4), v < Double(n + 4) else { continue }
            let dark = u >= 0 && v >= 0 && u < Double(n) && v < Double(n) && rows[Int(v)][Int(u)]
            let i = (y * 640 + x) * 3
            rgb[i] = dark ? 0 : 255
            rgb[i + 1] = rgb[i]
            rgb[i + 2] = rgb[i]
        }
    }
    let corners = [(0.0, 0.0), (1.0, 0.0), (1.0, 1.0), (0.0, 1.0)].map { (u, v) -> CGPoint in
        let ux = (u - 0.5) * size, vy = (v - 0.5) * size
        return CGPoint(x: (centre.x + c * ux - s * vy) / 640, y: (centre.y + s * ux + c * vy) / 480)
    }
    return (try VirtualCamera.Picture(rgb: rgb, width: 640, height: 480), corners)
}
