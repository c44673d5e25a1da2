import Capture
import CaptureRTSP
import CaptureServer
import CaptureServerMP4
import CaptureTestSupport
import Foundation
import Testing

/// RTSP shares the H.264 encode with the HTTP server's `/stream.mp4` at the same settings (as
/// `capture serve --rtsp` sets them up).
@Suite struct RTSPShareTests {
    @Test func anRTSPClientAndAnMP4ClientShareOneEncode() async throws {
        let rig = try RTSPRig("share mp4")
        defer { rig.stop() }
        let http = try CaptureStreamServer(session: rig.session, configuration: .init(port: 0))
        try http.addFragmentedMP4Stream(settings: rig.server.h264Settings, audio: false)
        try http.start()
        defer { http.stop() }
        let mp4 = FileManager.default.temporaryDirectory.appendingPathComponent("rtsp-share-\(UUID().uuidString).mp4")
        defer { try? FileManager.default.removeItem(at: mp4) }
        let curl = try RunningProcess(
            URL(fileURLWithPath: "/usr/bin/curl"), ["-sS", "-N", "-o", mp4.path, "http://127.0.0.1:\(http.port)/stream.mp4"])
        @Sendable func mp4Bytes() -> Int { ((try? FileManager.default.attributesOfItem(atPath: mp4.path))?[.size] as? Int) ?? 0 }
        let reading = await eventually(timeout: 30) { mp4Bytes() > 5_000 }
        #expect(reading, "the MP4 client has \(mp4Bytes()) bytes")
        // Counted over the RTSP client's whole life (the MP4 client's stage encodes every frame
        // already): its 120 frames are made after this, so the window holds at least them.
        let (encodes0, frames0, bytes0) = (rig.session.stageEncodes, rig.camera.camera.framesProduced, mp4Bytes())
        let rtsp = try RunningProcess(URL(fileURLWithPath: "/usr/bin/ffmpeg"), decodeArguments(rig.url, transport: "tcp", frames: 120))
        // (Its 120 frames decoded say it was served; whether a poll saw it connected is no
        // measure: on a loaded machine it can come and go between two polls.)
        _ = rtsp.exitStatus(timeout: 120)
        #expect(rig.server.unitsSent > 0, "the RTSP server sent nothing")
        let (encodes1, frames1, bytes1) = (rig.session.stageEncodes, rig.camera.camera.framesProduced, mp4Bytes())
        _ = curl.terminate()
        let encodes = encodes1 - encodes0, frames = Int(frames1 - frames0)
        print("rtsp + mp4: \(encodes) encodes for \(frames) camera frames, \(bytes1 - bytes0) MP4 bytes meanwhile")
        #expect(rtsp.output.status == 0 && decodedFrames(rtsp.output.stderr) == 120, "\(rtsp.output.stderr)")
        #expect(bytes1 > bytes0, "the MP4 client got nothing while the RTSP client read")
        #expect(frames > 30, "the camera made \(frames) frames")
        #expect(encodes <= frames + 3, "\(encodes) encodes for \(frames) camera frames: RTSP or MP4 encoded on its own")
    }
}
