import Capture
import CaptureRecording
import CaptureTestSupport
import CaptureWebRTC
import Foundation
import Testing

/// Tells when a recording finished.
private final class Finished: CaptureFileOutputRecordingDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var done = false
    var isSet: Bool { lock.withLock { done } }
    func fileOutput(
        _ output: CaptureMovieFileOutput, didFinishRecordingTo outputFileURL: URL, from connections: [CaptureConnection],
        error: RecordingError?
    ) { lock.withLock { done = true } }
}

extension WebRTCSuites {
    @Suite struct WebRTCRecordingShareTests {
        /// A recording at the viewers' H.264 settings while a browser watches: one encode per
        /// camera frame for both (two encoders would make about two per frame of the recording).
        @Test func aRecordingAtTheViewersSettingsSharesTheirEncode() async throws {
            let rig = try WebRTCRig("share", audio: false)
            defer { rig.stop() }
            let publisher = try WebRTCPublisher(session: rig.session)
            defer { publisher.stop() }
            let peer = try BrowserPeer(viewers: 1, window: 1, audio: false)
            let offers = try await peer.offers()
            let (_, answer) = try await publisher.answer(offer: offers[0])
            try peer.send(answers: [answer], measure: false)
            let watching = await eventually(timeout: 10) { (publisher.viewers.first?.framesSent ?? 0) >= 15 }
            #expect(watching, "the viewer was sent \(publisher.viewers.first?.framesSent ?? 0) frames")

            let c = publisher.configuration
            let movie = CaptureMovieFileOutput()
            movie.setOutputSettings(
                MovieOutputSettings(
                    codec: .h264, rateControl: .bitrate(c.bitrate), keyframeInterval: c.keyFrameInterval, preset: c.preset,
                    recordsAudio: false),
                for: nil)
            movie.maxRecordedDuration = .seconds(2)
            rig.session.addOutput(movie)
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("webrtc-share-\(UUID().uuidString).mp4")
            defer { try? FileManager.default.removeItem(at: file) }
            let finished = Finished()
            let (encodes0, frames0) = (rig.session.stageEncodes, rig.camera.camera.framesProduced)
            movie.startRecording(to: file, recordingDelegate: finished)
            let done = await eventually(timeout: 60) { finished.isSet }
            #expect(done, "the recording never finished")
            let (encodes1, frames1) = (rig.session.stageEncodes, rig.camera.camera.framesProduced)
            let summary = try #require(movie.lastRecording)
            let encodes = encodes1 - encodes0, frames = Int(frames1 - frames0)
            print("webrtc + recording: \(encodes) encodes for \(frames) camera frames, \(summary.framesWritten) written")
            #expect(summary.error?.code == .maximumDurationReached, "\(summary)")
            #expect(summary.framesWritten > 30)
            // Every frame the camera made in the window encoded once at most (a few of slack for
            // the frames under way at either end), and the viewer still watching.
            #expect(encodes <= frames + 3, "\(encodes) encodes for \(frames) frames: the recording encoded on its own")
            #expect(encodes >= summary.framesWritten, "\(encodes) encodes, \(summary.framesWritten) frames written")
            #expect(publisher.viewers.first?.state == .connected)
        }
    }
}
