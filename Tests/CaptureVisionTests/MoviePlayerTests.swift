import Capture
import CaptureCodecs
import CaptureTestSupport
import CaptureVision
import Foundation
import Testing

/// A video file played on a virtual camera (`VirtualMoviePlayer`), read by the metadata output.
@Suite(.serialized) struct MoviePlayerTests {
    /// A clip (ffmpeg, libx264) of one second of a QR code saying "MOVIE A", then one of "MOVIE B".
    static func clip(in folder: URL) throws -> URL {
        let a = folder.appendingPathComponent("a.png"), b = folder.appendingPathComponent("b.png")
        let out = folder.appendingPathComponent("clip.mp4")
        let steps: [(String, [String])] = [
            ("/usr/bin/qrencode", ["-s", "8", "-o", a.path, "MOVIE A"]),
            ("/usr/bin/qrencode", ["-s", "8", "-o", b.path, "MOVIE B"]),
            (
                "/usr/bin/ffmpeg",
                [
                    "-v", "error", "-y", "-loop", "1", "-t", "1", "-framerate", "10", "-i", a.path, "-loop", "1", "-t", "1",
                    "-framerate", "10", "-i", b.path, "-filter_complex",
                    "[0:v]scale=320:320,format=yuv420p[a];[1:v]scale=320:320,format=yuv420p[b];[a][b]concat=n=2:v=1[v]",
                    "-map", "[v]", "-c:v", "libx264", out.path,
                ]
            ),
        ]
        for (tool, args) in steps {
            let r = try runProcess(tool, args)
            guard r.status == 0 else { throw TestFailure("\(tool) exited \(r.status): \(r.stderr)") }
        }
        return out
    }

    @Test func bothCodesOfAPlayingClipAreRead() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("movie-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let rig = try VisionRig("movie", picture: nil, types: [.qr])
        let player = try VirtualMoviePlayer(path: try Self.clip(in: folder).path, camera: rig.camera)
        defer { player.stop() }
        #expect(player.width == 320 && player.height == 320 && abs(player.frameRate - 10) < 0.01)
        let texts = { (objects: [MetadataObject]) in objects.compactMap { ($0 as? MetadataMachineReadableCodeObject)?.stringValue } }
        #expect(rig.firstFrame { texts($0).contains("MOVIE A") } != nil)
        #expect(rig.firstFrame { texts($0).contains("MOVIE B") } != nil)
        // It loops: A again after B.
        #expect(rig.firstFrame { texts($0).contains("MOVIE A") } != nil)
    }

    @Test func aFileThatIsNoVideoIsRefusedWithItsName() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("not-a-movie-\(getpid()).txt").path
        try Data("not a movie".utf8).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let camera = VirtualCamera(name: "Movie Refused")
        do {
            _ = try VirtualMoviePlayer(path: path, camera: camera)
            Issue.record("a text file was played")
        } catch {
            #expect(error.code == .invalidArgument && error.description.contains(path))
        }
        #expect(camera.picture == nil)
    }
}
