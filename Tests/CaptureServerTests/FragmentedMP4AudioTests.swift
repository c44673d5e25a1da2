import Capture
import CaptureCodecs
import CaptureRecording
import CaptureServer
@testable import CaptureServerMP4
import CaptureTestSupport
import Foundation
import Testing

/// `/stream.mp4` from a session with a virtual microphone (a 1 kHz tone): a second track of AAC
/// from the shared audio stage, read by ffprobe and ffmpeg, whose sound is the tone, placed on
/// the video's time line for every client, a late joiner's too.
@Suite struct FragmentedMP4AudioTests {
    static func served(settings: H264Settings = H264Settings()) throws -> ServedCamera {
        try ServedCamera(width: 320, height: 240, fps: 30, microphone: true, prepare: { try $0.addFragmentedMP4Stream(settings: settings) })
    }

    @Test func ffprobeReadsH264AndAACAndTheSoundIsTheMicrophonesTone() throws {
        let served = try Self.served()
        defer { served.close() }
        let reader = try MP4Reader(port: served.port)
        let video = try reader.fragments(60, track: MP4Boxes.videoTrack)
        let audio = reader.history.filter { $0.track == MP4Boxes.audioTrack }
        // A key frame first; then about two seconds of AAC (47 packets a second at 48 kHz).
        #expect(reader.history.first?.track == MP4Boxes.videoTrack && video.first?.isKey == true)
        #expect(audio.count >= 60, "\(audio.count) audio packets beside \(video.count) frames")
        // The audio's samples follow each other without gaps or overlaps.
        for (a, b) in zip(audio, audio.dropFirst()) { #expect(b.decodeTime == a.decodeTime + UInt64(a.duration)) }
        let state = try FragmentedMP4Tests.mp4State(served)
        #expect(state["audio"] as? String == "mp4a.40.2", "\(state)")
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("stream-audio-\(UUID().uuidString).mp4")
        defer { try? FileManager.default.removeItem(at: file) }
        try Data(reader.received).write(to: file)
        let probe = try runProcess(
            "/usr/bin/ffprobe",
            [
                "-v", "error", "-show_entries", "stream=codec_type,codec_name,profile,width,height,sample_rate,channels,duration",
                "-of", "json", file.path,
            ])
        #expect(probe.status == 0, "\(probe.stderr)")
        let streams = (try JSONSerialization.jsonObject(with: probe.stdout) as? [String: Any])?["streams"] as? [[String: Any]] ?? []
        let v = streams.first { $0["codec_type"] as? String == "video" }
        let a = streams.first { $0["codec_type"] as? String == "audio" }
        #expect(v?["codec_name"] as? String == "h264" && v?["width"] as? Int == 320 && v?["height"] as? Int == 240, "\(streams)")
        #expect(a?["codec_name"] as? String == "aac" && a?["profile"] as? String == "LC", "\(streams)")
        #expect(a?["sample_rate"] as? String == "48000" && (a?["channels"] as? Int ?? 0) >= 1, "\(streams)")
        // Both tracks cover the same time (the audio placed by its capture time).
        let vd = Double(v?["duration"] as? String ?? "") ?? -1, ad = Double(a?["duration"] as? String ?? "") ?? -1
        print("/stream.mp4 with audio: video \(vd) s, audio \(ad) s, \(audio.count) packets")
        #expect(abs(vd - ad) < 0.3, "video \(vd) s, audio \(ad) s")
        // (Frames keep their own times: under load two frames a millisecond apart would share
        // a tick of ffmpeg's default 1/fps time base and be reported as out of order.)
        let decode = try runProcess(
            "/usr/bin/ffmpeg", ["-v", "error", "-i", file.path, "-fps_mode:v", "passthrough", "-enc_time_base:v", "-1", "-f", "null", "-"])
        #expect(decode.status == 0 && decode.stderr.isEmpty, "\(decode.stderr)")
        // The sound: the tone's pitch, from the zero crossings of a second of it.
        let pcm = try runProcess("/usr/bin/ffmpeg", ["-v", "error", "-i", file.path, "-map", "0:a", "-ac", "1", "-f", "s16le", "-"])
        let samples = pcm.stdout.withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
        let second = samples.dropFirst(samples.count / 4).prefix(48_000)
        #expect(second.count == 48_000, "\(samples.count) samples decoded")
        var crossings = 0
        for (x, y) in zip(second, second.dropFirst()) where (x < 0) != (y < 0) { crossings += 1 }
        let pitch = Double(crossings) / 2 / (Double(second.count) / 48_000)
        let peak = second.map { abs(Int($0)) }.max() ?? 0
        print("/stream.mp4 audio: pitch \(pitch) Hz, peak \(peak)")
        #expect(abs(pitch - (served.microphone?.frequency ?? 1000)) < 5, "pitch \(pitch) Hz")
        #expect(peak > 8000, "the tone's peak is \(peak)")
    }

    /// A client that joins a running stream starts at a key frame of its own, with the sound
    /// from there: its audio starts near its time 0 and runs without gaps.
    @Test func aLateJoinerStartsAtAKeyFrameWithTheSoundFromThere() throws {
        let served = try Self.served(settings: H264Settings(keyFrameInterval: 300))
        defer { served.close() }
        let first = try MP4Reader(port: served.port)
        _ = try first.fragments(15, track: MP4Boxes.videoTrack)
        let joined = Date()
        let late = try MP4Reader(port: served.port)
        _ = try late.fragments(1, track: MP4Boxes.videoTrack)
        let wait = Date().timeIntervalSince(joined)
        _ = try late.fragments(30, track: MP4Boxes.videoTrack)
        print("late joiner with audio: first fragment after \(Int(wait * 1000)) ms")
        let start = try #require(late.history.first)
        #expect(start.track == MP4Boxes.videoTrack && start.isKey && start.decodeTime == 0)
        #expect(wait < 5, "the first fragment came after \(wait) s")
        let audio = late.history.filter { $0.track == MP4Boxes.audioTrack }
        #expect(audio.count >= 20, "\(audio.count) audio packets in a second")
        // Its audio starts within a packet of its time 0 (silence fills what came before the
        // first packet) and runs on without gaps.
        #expect((audio.first?.decodeTime ?? .max) <= 1024, "\(audio.prefix(3))")
        for (a, b) in zip(audio, audio.dropFirst()) { #expect(b.decodeTime == a.decodeTime + UInt64(a.duration)) }
        #expect(try first.fragments(5, track: MP4Boxes.videoTrack).count == 5)
    }

    /// A microphone that goes away (unplugged) leaves the picture playing: the client's audio
    /// goes on as silence beside it, with no hole, so a player that waits for both tracks plays on.
    @Test func aMicrophoneThatGoesAwayLeavesSilenceBesideThePicture() throws {
        let served = try Self.served()
        defer { served.close() }
        let reader = try MP4Reader(port: served.port)
        _ = try reader.fragments(20, track: MP4Boxes.videoTrack)
        served.microphone?.disconnect()
        let video = try reader.fragments(60, track: MP4Boxes.videoTrack)
        let audio = reader.history.filter { $0.track == MP4Boxes.audioTrack }
        for (a, b) in zip(audio, audio.dropFirst()) { #expect(b.decodeTime == a.decodeTime + UInt64(a.duration)) }
        let videoEnd = Double(video.last!.decodeTime) / 90_000
        let audioEnd = Double((audio.last?.decodeTime ?? 0) + UInt64(audio.last?.duration ?? 0)) / 48_000
        print("microphone gone: video to \(videoEnd) s, audio to \(audioEnd) s")
        #expect(audioEnd > videoEnd - 0.6, "the audio ends at \(audioEnd) s, the video at \(videoEnd) s")
        let silence = try FragmentedMP4Tests.mp4Clients(served).map { $0["silence_packets"] as? Int ?? 0 }.reduce(0, +)
        #expect(silence > 20, "\(silence) packets of silence")
    }

    /// One AAC encode per microphone buffer, however many clients watch.
    @Test func twoClientsShareOneAudioEncode() throws {
        let served = try Self.served()
        defer { served.close() }
        let readers = try (0..<2).map { _ in try MP4Reader(port: served.port) }
        for r in readers { _ = try r.fragments(45, track: MP4Boxes.videoTrack) }
        // (Encodes first: a buffer handed and encoded between the two readings is then in both.)
        let encodes = served.session.audioStageEncodes, handed = served.session.audioBuffersHanded
        #expect(encodes > 0 && encodes <= handed, "\(encodes) audio encodes for \(handed) microphone buffers")
        for r in readers { #expect(r.history.filter { $0.track == MP4Boxes.audioTrack }.count >= 40) }
    }

    /// A movie output recording AAC while a client watches shares the stream's audio encode: one
    /// encode per microphone buffer for both (two encoders would make two).
    @Test func aRecordingSharesTheStreamsAudioEncode() throws {
        let movie = CaptureMovieFileOutput()
        let served = try ServedCamera(
            width: 320, height: 240, fps: 30, microphone: true,
            prepare: {
                $0.session.addOutput(movie)
                try $0.addFragmentedMP4Stream()
            })
        defer { served.close() }
        let reader = try MP4Reader(port: served.port)
        _ = try reader.fragments(15, track: MP4Boxes.videoTrack)
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("shared-audio-\(UUID().uuidString).mp4")
        defer { try? FileManager.default.removeItem(at: url) }
        movie.maxRecordedDuration = .seconds(2)
        let finished = FinishedRecording()
        let handed = served.session.audioBuffersHanded, encodes = served.session.audioStageEncodes
        movie.startRecording(to: url, recordingDelegate: finished)
        // The client reads on meanwhile (it must, or the server would skip it forward).
        while !finished.isDone { _ = try reader.fragments(5, track: MP4Boxes.videoTrack) }
        // Encodes read before buffers: with one encode per buffer the encodes can never be more
        // (however far the stage's queue is behind at either reading); a second encoder for the
        // recording would add about 47 a second.
        let allEncodes = served.session.audioStageEncodes, allHanded = served.session.audioBuffersHanded
        let newHanded = allHanded - handed, newEncodes = allEncodes - encodes
        print("recording beside /stream.mp4: \(newEncodes) audio encodes for \(newHanded) microphone buffers")
        #expect(
            newHanded > 0 && allEncodes <= allHanded,
            "\(newEncodes) encodes for \(newHanded) buffers (\(allEncodes) for \(allHanded) in all)")
        #expect(movie.lastRecording?.audioDuration != nil, "\(String(describing: movie.lastRecording))")
        let audio = reader.history.filter { $0.track == MP4Boxes.audioTrack }
        for (a, b) in zip(audio, audio.dropFirst()) { #expect(b.decodeTime == a.decodeTime + UInt64(a.duration)) }
    }

    /// `addFragmentedMP4Stream(audio: false)` serves the video alone beside a microphone.
    @Test func audioFalseServesTheVideoAlone() throws {
        let served = try ServedCamera(
            width: 320, height: 240, fps: 30, microphone: true, prepare: { try $0.addFragmentedMP4Stream(audio: false) })
        defer { served.close() }
        let reader = try MP4Reader(port: served.port)
        #expect(try reader.fragments(20).allSatisfy { $0.track == MP4Boxes.videoTrack })
        #expect(try FragmentedMP4Tests.mp4State(served)["audio"] is NSNull)
    }

    /// A client's time line where it skipped two seconds (as a slow client skips to a key frame),
    /// and where the microphone then went quiet for two seconds: the video runs on without gaps,
    /// the audio too (silence where it had none), and after each the sound is back beside the
    /// picture captured with it (within a packet).
    @Test func aClientThatSkipsForwardKeepsItsSoundInStepWithoutHoles() {
        let rate = 48_000, packet = 1024, frameNs: Int64 = 33_333_333
        let packetNs = Int64(packet) * 1_000_000_000 / Int64(rate)
        var t = MP4Timeline()
        var frames: [(capture: Int64, at: Int64, duration: Int64)] = []
        var audio: [(capture: Int64?, at: Int64, duration: Int)] = []
        func frame(_ capture: Int64) {
            // Silence first when the audio is half a second behind.
            for _ in 0..<t.silenceBeforeFrame(rate: rate, frameSize: packet) {
                audio.append((nil, t.placeSilence(frameSize: packet), packet))
            }
            let (at, duration) = t.placeFrame(at: capture, nominal: 3000)
            frames.append((capture, at, duration))
        }
        func sound(_ capture: Int64) {
            while true {
                switch t.placeAudio(at: capture, duration: packet, rate: rate, frameSize: packet, canFill: true) {
                case .drop: return
                case .silenceFirst(let n):
                    for _ in 0..<n { audio.append((nil, t.placeSilence(frameSize: packet), packet)) }
                case .at(let at):
                    audio.append((capture, at, packet))
                    return
                }
            }
        }
        // Both as they come, in capture order, over `range` (ns from 1 s); audio arrives 40 ms late.
        var nextFrame: Int64 = 1_000_000_000, nextPacket: Int64 = 1_000_000_000 - 3 * packetNs
        func run(until end: Int64, video: Bool = true, sound hasSound: Bool = true) {
            while nextFrame < end || nextPacket < end {
                if nextFrame <= nextPacket + 40_000_000 {
                    if video { frame(nextFrame) }
                    nextFrame += frameNs
                } else {
                    if hasSound { sound(nextPacket) }
                    nextPacket += packetNs
                }
            }
        }
        run(until: 2_000_000_000)
        run(until: 4_000_000_000, video: false, sound: false)  // skipped: frames and audio alike
        let afterSkip = frames.count
        run(until: 5_000_000_000)
        run(until: 7_000_000_000, sound: false)  // the microphone quiet
        let afterQuiet = frames.count
        run(until: 8_000_000_000)
        // No gaps in either track.
        for (a, b) in zip(frames, frames.dropFirst()) { #expect(b.at == a.at + a.duration) }
        for (a, b) in zip(audio, audio.dropFirst()) { #expect(b.at == a.at + Int64(a.duration)) }
        #expect(audio.first?.at == 0)
        // After each, the sound captured with a frame plays with it (within a packet). (The
        // first frame after the skip lasts the second it stands for, then the time line goes on.)
        for i in [afterSkip + 1, afterQuiet + 1] {
            let f = frames[i]
            let p = audio.first { ($0.capture ?? 0) >= f.capture }!
            let soundAt = Double(p.at) / Double(rate) - Double(p.capture! - f.capture) / 1e9
            let pictureAt = Double(f.at) / 90_000
            #expect(abs(soundAt - pictureAt) < Double(packet) / Double(rate), "sound at \(soundAt) s, picture at \(pictureAt) s")
        }
        // The skip's two seconds became one frame lasting a second; silence filled the rest.
        #expect(frames[afterSkip].duration == 90_000)
        #expect(audio.contains { $0.capture == nil })
    }
}

/// A recording delegate that says when the recording finished.
final class FinishedRecording: CaptureFileOutputRecordingDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var done = false
    var isDone: Bool { lock.withLock { done } }
    func fileOutput(
        _ output: CaptureMovieFileOutput, didFinishRecordingTo outputFileURL: URL, from connections: [CaptureConnection],
        error: RecordingError?
    ) { lock.withLock { done = true } }
}
