import Capture
@testable import CaptureRecording
import CaptureTestSupport
import Foundation
import Testing

/// Movie outputs with the same H.264 settings share the session's one encode of each frame;
/// other settings get an encoder of their own.
@Suite struct SharedEncodeRecordingTests {
    @Test func twoRecordingsWithTheSameSettingsEncodeEachFrameOnce() throws {
        let rig = try RecordingRig("shared", .init(.yuyv, width: 640, height: 480, frameRates: [30]))
        defer { rig.stop() }
        let folder = try TempFolder("shared")
        defer { folder.remove() }
        let settings = MovieOutputSettings(codec: .h264, rateControl: .quality(28))
        let movies = (0..<2).map { _ in CaptureMovieFileOutput() }
        for m in movies {
            rig.session.addOutput(m)
            m.setOutputSettings(settings, for: nil)
            m.maxRecordedDuration = .seconds(2)
        }
        try rig.session.start()
        let urls = [folder.file("a.mp4"), folder.file("b.mkv")]
        let events = movies.indices.map { _ in RecordingEvents() }
        let producedBefore = rig.camera.framesProduced
        for (i, m) in movies.enumerated() { m.startRecording(to: urls[i], recordingDelegate: events[i]) }
        for e in events { #expect(e.waitForFinish(timeout: 60), "a recording never finished") }
        // (Encodes first: every frame encoded by then was made by the camera by the second reading.)
        let encodes = rig.session.stageEncodes
        let produced = Int(rig.camera.framesProduced - producedBefore)
        let summaries = try movies.map { try #require($0.lastRecording) }
        for (s, url) in zip(summaries, urls) {
            #expect(s.error?.code == .maximumDurationReached && s.encoder == "libx264", "\(s)")
            let probe = try Probe(url)
            #expect(probe.codec == "h264" && probe.width == 640 && probe.height == 480, "\(probe)")
            #expect(probe.frames == s.framesWritten && s.framesWritten > 30, "ffprobe \(probe.frames), written \(s.framesWritten)")
        }
        // At most one encode per frame the camera made while the recordings ran (and the few in
        // its buffers at their start): an encoder per recording would have made one per frame of
        // each, about twice as many. (The frames of the files alone are no bound: on a loaded
        // machine the shared stage runs ahead of recorders still writing their backlog, and
        // encodes frames past the limit before they end.)
        let ranges = try summaries.map { try #require($0.sequenceRange) }
        #expect(encodes <= produced + 4, "\(encodes) encodes while the camera made \(produced) frames (files: \(ranges))")
        #expect(encodes >= summaries.map(\.framesWritten).max()!, "\(encodes) encodes")
    }

    @Test func anotherQualityIsAnotherEncode() throws {
        let rig = try RecordingRig("unshared", .init(.nv12, width: 320, height: 240, frameRates: [30]))
        defer { rig.stop() }
        let folder = try TempFolder("unshared")
        defer { folder.remove() }
        let movies = [28, 40].map { q in
            let m = CaptureMovieFileOutput()
            rig.session.addOutput(m)
            m.setOutputSettings(.init(codec: .h264, rateControl: .quality(q)), for: nil)
            m.maxRecordedDuration = .seconds(1)
            return m
        }
        try rig.session.start()
        let events = movies.map { _ in RecordingEvents() }
        for (i, m) in movies.enumerated() { m.startRecording(to: folder.file("q\(i).mp4"), recordingDelegate: events[i]) }
        for e in events { #expect(e.waitForFinish(timeout: 60)) }
        let encodes = rig.session.stageEncodes
        let written = movies.compactMap { $0.lastRecording?.framesWritten }
        #expect(written.count == 2 && written.allSatisfy { $0 > 10 }, "\(written)")
        // Each recording's frames encoded by its own encoder.
        #expect(encodes >= written.reduce(0, +), "\(encodes) encodes for \(written) frames")
        // Each file's first key frame, as ffprobe reads it: the same picture, so quality 40's is
        // the smaller. (Not the files' sizes: under load the two keep different numbers of
        // frames, and each frame after the first of a still picture is a few dozen bytes.)
        let keyFrames = try (0..<2).map { i in
            let r = try runProcess(
                "/usr/bin/ffprobe",
                [
                    "-v", "error", "-select_streams", "v:0", "-show_entries", "packet=size,flags", "-of", "csv=p=0",
                    folder.file("q\(i).mp4").path,
                ])
            let key = r.text.split(separator: "\n").first { $0.hasSuffix(",K__") || $0.contains(",K") }
            return try #require(key.flatMap { Int($0.split(separator: ",")[0]) }, "no key frame in q\(i).mp4: \(r.text) \(r.stderr)")
        }
        print("another quality: first key frames of quality 28 and 40: \(keyFrames) bytes; \(written) frames written")
        #expect(keyFrames[1] < keyFrames[0], "quality 40's first key frame is smaller than 28's: \(keyFrames) bytes")
    }
}
