import Capture
import CaptureRecording
import CaptureServer
import CaptureServerMP4
import CaptureTestSupport
import CaptureWebRTC
import Foundation
import Testing

/// Tells when a recording finished.
final class Finished: CaptureFileOutputRecordingDelegate, @unchecked Sendable {
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
        /// A movie output at the publisher's H.264 settings (so that it may share their encode),
        /// 2 s long, added to the rig's session; the file it is to write (the caller removes it)
        /// and its delegate.
        static func recordingAtTheViewersSettings(of publisher: WebRTCPublisher, in rig: WebRTCRig, _ name: String) -> (
            CaptureMovieFileOutput, URL, Finished
        ) {
            let c = publisher.configuration
            let movie = CaptureMovieFileOutput()
            movie.setOutputSettings(
                MovieOutputSettings(
                    codec: .h264, rateControl: .bitrate(c.bitrate), keyframeInterval: c.keyFrameInterval, preset: c.preset,
                    recordsAudio: false),
                for: nil)
            movie.maxRecordedDuration = .seconds(2)
            rig.session.addOutput(movie)
            return (movie, FileManager.default.temporaryDirectory.appendingPathComponent("\(name)-\(UUID().uuidString).mp4"), Finished())
        }

        /// A recording at the viewers' H.264 settings while a browser watches: one encode per
        /// camera frame for both (two encoders would make about two per frame of the recording).
        @Test func aRecordingAtTheViewersSettingsSharesTheirEncode() async throws {
            let rig = try WebRTCRig("share", audio: false)
            defer { rig.stop() }
            let publisher = try WebRTCPublisher(session: rig.session, configuration: .loopback)
            defer { publisher.stop() }
            let peer = try BrowserPeer(viewers: 1, window: 1, audio: false)
            let offers = try await peer.offers()
            let (_, answer) = try await publisher.answer(offer: offers[0])
            try peer.send(answers: [answer], measure: false)
            let watching = await eventually(timeout: 10) { (publisher.viewers.first?.framesSent ?? 0) >= 15 }
            #expect(watching, "the viewer was sent \(publisher.viewers.first?.framesSent ?? 0) frames")

            let (movie, file, finished) = Self.recordingAtTheViewersSettings(of: publisher, in: rig, "webrtc-share")
            defer { try? FileManager.default.removeItem(at: file) }
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

        /// Everything that takes H.264 at once, at the same settings: a WebRTC viewer in
        /// Chromium, a `/stream.mp4` client and a recording share one encode per camera frame.
        @Test func webRTCTheMP4StreamAndARecordingShareOneEncode() async throws {
            let rig = try WebRTCRig("share three", audio: false)
            defer { rig.stop() }
            let server = try CaptureStreamServer(session: rig.session, configuration: .init(port: 0))
            let publisher = try WebRTCPublisher(session: rig.session)
            defer { publisher.stop() }
            try server.serveWebRTC(publisher)
            try server.addFragmentedMP4Stream(settings: publisher.h264Settings, audio: false)
            try server.start()
            defer { server.stop() }
            let peer = try BrowserPeer(viewers: 1, window: 1, audio: false)
            let offers = try await peer.offers()
            let (_, answer) = try await publisher.answer(offer: offers[0])
            try peer.send(answers: [answer], measure: false)
            let mp4 = FileManager.default.temporaryDirectory.appendingPathComponent("share-three-\(UUID().uuidString).mp4")
            defer { try? FileManager.default.removeItem(at: mp4) }
            let client = Process()
            client.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
            client.arguments = ["-sS", "-N", "-o", mp4.path, "http://127.0.0.1:\(server.port)/stream.mp4"]
            try client.run()
            defer { client.terminate() }
            @Sendable func mp4Bytes() -> Int { ((try? FileManager.default.attributesOfItem(atPath: mp4.path))?[.size] as? Int) ?? 0 }
            let watching = await eventually(timeout: 20) { (publisher.viewers.first?.framesSent ?? 0) >= 15 && mp4Bytes() > 20_000 }
            #expect(watching, "the viewer was sent \(publisher.viewers.first?.framesSent ?? 0) frames, the MP4 client \(mp4Bytes()) bytes")

            let (movie, file, finished) = Self.recordingAtTheViewersSettings(of: publisher, in: rig, "webrtc-share-three")
            defer { try? FileManager.default.removeItem(at: file) }
            let (encodes0, frames0, sent0, bytes0) = (
                rig.session.stageEncodes, rig.camera.camera.framesProduced, publisher.viewers.first?.framesSent ?? 0, mp4Bytes()
            )
            movie.startRecording(to: file, recordingDelegate: finished)
            let done = await eventually(timeout: 60) { finished.isSet }
            #expect(done, "the recording never finished")
            let (encodes1, frames1, sent1, bytes1) = (
                rig.session.stageEncodes, rig.camera.camera.framesProduced, publisher.viewers.first?.framesSent ?? 0, mp4Bytes()
            )
            let summary = try #require(movie.lastRecording)
            let encodes = encodes1 - encodes0, frames = Int(frames1 - frames0)
            print("webrtc + mp4 + recording: \(encodes) encodes for \(frames) camera frames, \(summary.framesWritten) written")
            #expect(summary.error?.code == .maximumDurationReached, "\(summary)")
            #expect(summary.framesWritten > 30)
            // All three were fed in the window, from one encode per camera frame (a few of slack
            // for the frames under way at either end).
            #expect(sent1 - sent0 > 30 && bytes1 > bytes0, "viewer \(sent1 - sent0) frames, MP4 client \(bytes1 - bytes0) bytes")
            #expect(encodes <= frames + 3, "\(encodes) encodes for \(frames) frames: a consumer encoded on its own")
            #expect(encodes >= summary.framesWritten, "\(encodes) encodes, \(summary.framesWritten) frames written")
            #expect(publisher.viewers.first?.state == .connected)
        }
    }
}
