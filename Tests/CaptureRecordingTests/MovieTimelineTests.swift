import Capture
import CaptureBenchSupport
import CaptureCodecs
import CaptureTestSupport
import Foundation
import Testing

@testable import CaptureRecording

/// The writer's time line with audio, on frames and samples from memory at exact times (so
/// nothing here depends on the machine's load): 30 fps video for 2 s beside a 48 kHz tone.
@Suite struct MovieTimelineTests {
    private static let frames = 60
    private static let interval: Int64 = 33_333_333

    /// Records `name` (its extension picks the container) and returns its URL; `audioPast` more
    /// frames' worth of audio come after the last frame (audio that reached the stop while the
    /// last frames before it were lost), and `onFinish` sees the writer after its finish.
    private func record(
        _ folder: TempFolder, _ name: String, audioPast: Int = 0, onFinish: (MovieWriter) -> Void = { _ in }
    ) throws -> URL {
        let (width, height) = (64, 48)
        let memory = UnsafeMutableRawBufferPointer.allocate(byteCount: width * height * 3 / 2, alignment: 64)
        defer { memory.deallocate() }
        memory.initializeMemory(as: UInt8.self, repeating: 128)
        let replay = FrameReplay(
            pixelFormat: .nv12, width: width, height: height, bytesPerLine: 0, buffers: [UnsafeRawBufferPointer(memory)])
        let url = folder.file(name)
        let writer = try #require(try MovieWriter(url: url, fragmentInterval: .seconds(1)))
        let format = AudioFormat(sampleRate: 48_000, channelCount: 1, sampleFormat: .s16)
        // The tone encoded as a session's audio stage does (AAC), each packet written at its
        // capture time (a buffer of frame i's at t0 + i frames; nil: the encoder's tail).
        let audioEncoder = AudioFrameEncoder(AudioEncoderSettings(codec: .aac))
        let audioStream = try audioEncoder.open(for: format)
        let t0 = CaptureTime(nanoseconds: 1_000_000_000)
        func audio(_ pcm: AudioPCMBuffer?, frame i: Int) throws {
            var packets: [AudioPacket] = []
            let keep = { (p: AudioPacket) in
                p.hold()
                packets.append(p)
            }
            if let pcm {
                try audioEncoder.encode(pcm, at: CaptureTime(nanoseconds: t0.nanoseconds + UInt64(i) * UInt64(Self.interval)), keep)
            } else {
                try audioEncoder.finish(keep)
            }
            defer { for p in packets { p.letGo() } }
            for p in packets { try writer.writeAudio(p, at: p.presentationTimeStamp - t0) }
        }
        // The frames encoded as a session's stage would, each unit written at its frame's time.
        let encoder = H264FrameEncoder(H264Settings(rateControl: .quality(30)), interval: FrameInterval(framesPerSecond: 30))
        var begun = false
        func video(_ i: Int) throws {
            try encoder.load(replay.sample(0, sequence: UInt32(i)))
            var units: [H264AccessUnit] = []
            try encoder.encode(keyFrame: false) { unit in
                unit.hold()
                units.append(unit)
            }
            defer { for u in units { u.letGo() } }
            for u in units {
                if !begun {
                    try writer.begin(
                        .init(
                            width: width, height: height, pixelFormat: MovieWriter.VideoFormat.h264,
                            frameInterval: FrameInterval(framesPerSecond: 30)),
                        audio: audioStream, settings: MovieOutputSettings(rateControl: .quality(30)), parameterSets: u.parameterSets)
                    begun = true
                }
                try writer.write(u, at: Int64(i) * Self.interval)
            }
        }
        // One video frame's worth of a 1 kHz tone (1600 samples) at each frame's time.
        let perFrame = 1600
        for i in 0..<(Self.frames + audioPast) {
            if i < Self.frames { try video(i) }
            var pcm = Data(capacity: perFrame * 2)
            for n in 0..<perFrame {
                let v = Int16(8000 * sin(2 * Double.pi * 1000 * Double(i * perFrame + n) / 48_000))
                withUnsafeBytes(of: v.littleEndian) { pcm.append(contentsOf: $0) }
            }
            try audio(AudioPCMBuffer(format: format, frameCount: perFrame, data: pcm), frame: i)
        }
        try audio(nil, frame: 0)
        try writer.finish(videoEnd: Int64(Self.frames) * Self.interval)
        onFinish(writer)
        return url
    }

    /// Audio past the video's end is left out of the file and of the count of audio written,
    /// however much of it came (here 200 ms, more than an AAC frame's 21 ms).
    @Test(arguments: ["av.mkv", "av.mp4"])
    func audioPastTheVideosEndIsCut(_ name: String) throws {
        let folder = try TempFolder("timeline")
        defer { folder.remove() }
        var counted: Int64 = -1
        let url = try record(folder, name, audioPast: 6) { counted = $0.audioSamplesNanoseconds }
        let videoEnd = Double(Int64(Self.frames) * Self.interval) / 1e9
        // (The count is whole samples: within one of the video's end.)
        #expect(abs(Double(counted) / 1e9 - videoEnd) <= 1.0 / 48_000, "audio counted \(counted) ns, video \(videoEnd) s")
        // In the file: the last audio packet ends with the last frame (AAC's frames of 1024
        // samples end within one of it), where it ended 200 ms later before.
        let ends = try packetEnds(url)
        let audio = try #require(ends["audio"]), video = try #require(ends["video"])
        #expect(audio <= video + 1024.0 / 48_000, "audio ends at \(audio) s, video at \(video) s")
    }

    /// Where each stream's last packet ends (its time plus its duration), in seconds, by codec type.
    private func packetEnds(_ url: URL) throws -> [String: Double] {
        let r = try runProcess(
            "/usr/bin/ffprobe", ["-v", "error", "-show_entries", "packet=codec_type,pts_time,duration_time", "-of", "csv=p=0", url.path])
        guard r.status == 0 else { throw TestFailure("ffprobe cannot list the packets of \(url.path): \(r.stderr)") }
        var ends: [String: Double] = [:]
        for line in r.text.split(separator: "\n") {
            let f = line.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard f.count >= 3, let t = Double(f[1]) else { continue }
            ends[f[0]] = max(ends[f[0]] ?? -.infinity, t + (Double(f[2]) ?? 0))
        }
        return ends
    }

    /// The MP4 carries AAC's priming samples as the audio track's edit list: the first video
    /// frame lasts one frame (it lasted 1/30 s + 1024 samples, 55 ms, when the muxer shifted
    /// every track by the priming instead), every frame is at its time, the rate is constant
    /// (`avg_frame_rate` == `r_frame_rate`), and audio starts with the video.
    @Test func mp4KeepsTheFirstFrameAndTheRateWithAAC() throws {
        let folder = try TempFolder("timeline")
        defer { folder.remove() }
        let url = try record(folder, "av.mp4")
        let times = try packetTimes(url)
        let frame = 1.0 / 30
        #expect(times.count == Self.frames)
        #expect(
            times.count > 1 && abs(times[1] - times[0] - frame) < 0.001,
            "the first frame lasts \(zip(times.dropFirst(), times).map { $0 - $1 }.first ?? .nan) s")
        let misplaced = times.enumerated().filter { abs($0.element - Double($0.offset) * frame) >= 0.001 }
        #expect(misplaced.isEmpty, "\(misplaced.count) frames away from their time, first: \(misplaced.prefix(3))")
        let streams = try probeStreams(url)
        let video = try #require(streams.first { $0["codec_type"] as? String == "video" })
        let audio = try #require(streams.first { $0["codec_type"] as? String == "audio" })
        func rate(_ s: Any?) -> Double {
            let parts = (s as? String ?? "").split(separator: "/").compactMap { Double($0) }
            return parts.count == 2 && parts[1] > 0 ? parts[0] / parts[1] : .nan
        }
        let nominal = rate(video["r_frame_rate"]), average = rate(video["avg_frame_rate"])
        #expect(abs(nominal - 30) < 0.01 && abs(average - nominal) < 0.01, "r_frame_rate \(nominal), avg_frame_rate \(average)")
        let videoStart = Double(video["start_time"] as? String ?? "") ?? .nan
        let audioStart = Double(audio["start_time"] as? String ?? "") ?? .nan
        #expect(abs(audioStart - videoStart) < frame, "start: audio \(audioStart) s, video \(videoStart) s")
    }

    /// Matroska marks its video and audio tracks default (FlagDefault), as ffprobe's
    /// `disposition.default` reads it.
    @Test func matroskaTracksAreDefault() throws {
        let folder = try TempFolder("timeline")
        defer { folder.remove() }
        let streams = try probeStreams(try record(folder, "av.mkv"))
        #expect(streams.count == 2)
        for s in streams {
            let disposition = s["disposition"] as? [String: Any]
            #expect(disposition?["default"] as? Int == 1, "\(s["codec_type"] ?? "?"): \(disposition ?? [:])")
        }
    }
}
