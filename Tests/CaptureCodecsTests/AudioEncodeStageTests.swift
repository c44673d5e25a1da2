import CFFmpeg
import CaptureBackend
import CaptureSystem
import Foundation
import Testing
@testable import Capture
@testable import CaptureCodecs
import CaptureTestSupport

/// The audio stage: one encode per microphone buffer for every consumer of the same settings,
/// packets a real decoder (FFmpeg's) reads, a late joiner served from its join on.
@Suite struct AudioEncodeStageTests {
    /// Keeps what an audio stage hands it (holding nothing past the call).
    final class Listener: AudioPacketConsumer, @unchecked Sendable {
        struct Seen {
            var packets: [(pts: Int64, duration: Int, packet: ObjectIdentifier, time: CaptureTime)] = []
            var bytes: [Data] = []
            var format: AudioStreamFormat?
            /// Samples lost by the microphone (`.discontinuity`), and by the stage (`.frameWasLate`).
            var dropped = 0
            var late = 0
            var failures: [AudioStageError] = []
        }
        let seen = Locked(Seen())
        func consumeAudioPacket(_ packet: AudioPacket, from connection: CaptureConnection) {
            seen.withLock { s in
                s.packets.append((packet.pts, packet.duration, ObjectIdentifier(packet), packet.presentationTimeStamp))
                s.bytes.append(packet.withUnsafeBytes { Data($0) })
                if s.format == nil { s.format = packet.format }
            }
        }
        func consumeDrop(_ drop: DroppedFrames, from connection: CaptureConnection) {
            seen.withLock { s in
                if drop.reason == .frameWasLate { s.late += drop.count } else { s.dropped += drop.count }
            }
        }
        func audioStageFailed(_ error: AudioStageError, from connection: CaptureConnection) {
            seen.withLock { $0.failures.append(error) }
        }
        var count: Int { seen.withLock { $0.packets.count } }
    }

    /// A session on a virtual microphone, with listeners on audio ports of their own.
    final class Rig: Sendable {
        let mic: VirtualMicrophone
        let session = CaptureSession()
        init(_ name: String, appFormat: CaptureAudioDataOutput.AudioSettings? = nil) throws {
            mic = VirtualMicrophone(name: "\(name) \(UUID().uuidString.prefix(8))")
            VirtualMicrophone.install(mic)
            let device = try #require(CaptureDevice.device(withUniqueID: mic.uniqueID))
            session.addInput(try CaptureDeviceInput(device: device))
            if let appFormat {
                // An app's output chooses the microphone's format.
                let output = CaptureAudioDataOutput()
                output.audioSettings = appFormat
                session.addOutput(output)
            }
        }
        func port(_ listener: Listener, _ settings: AudioEncoderSettings, keepsEveryPacket: Bool = false) -> FrameConsumerPort {
            let port = FrameConsumerPort(audioEncodedFor: listener, keepsEveryFrame: keepsEveryPacket)
            port.encodedProduct = settings.product
            #expect(session.addFrameConsumer(port))
            return port
        }
        func stop() {
            session.stopRunning()
            VirtualMicrophone.uninstall(mic)
        }
    }

    @Test func consumersOfTheSameSettingsShareOneEncode() async throws {
        let r = try Rig("AAC share")
        defer { r.stop() }
        let a = Listener(), b = Listener()
        let pa = r.port(a, AudioEncoderSettings(codec: .aac)), pb = r.port(b, AudioEncoderSettings(codec: .aac))
        try r.session.start()
        #expect(await eventually(timeout: 30) { a.count >= 40 && b.count >= 40 })
        // One encode per buffer: two encoders would count twice the buffers handed on. (The
        // stage may be a few buffers behind the reader on a loaded machine: waited for.)
        let before = r.session.audioBuffersHanded
        #expect(await eventually(timeout: 30) { r.session.audioStageEncodes >= before })
        let encodes = r.session.audioStageEncodes
        let after = r.session.audioBuffersHanded
        #expect(encodes >= before && encodes <= after, "\(encodes) encodes for \(before)...\(after) buffers")
        r.session.stopRunning()
        let sa = a.seen.withLock { $0 }, sb = b.seen.withLock { $0 }
        #expect(sa.failures.isEmpty && sb.failures.isEmpty, "\(sa.failures.map(\.message))")
        // The same packet objects, in the same order: each buffer encoded once for both.
        #expect(sa.packets.map(\.packet) == sb.packets.map(\.packet) && sa.packets.map(\.pts) == sb.packets.map(\.pts))
        // AAC frames of 1024 samples, one after the other, from the encoder's priming on.
        let format = try #require(sa.format)
        #expect(format.frameSize == 1024 && format.codec == .aac && !format.extradata.isEmpty, "\(format.frameSize)")
        #expect(sa.packets.first?.pts == -Int64(format.initialPadding))
        let steps = zip(sa.packets, sa.packets.dropFirst()).filter { $1.pts != $0.pts + Int64($0.duration) }
        #expect(steps.isEmpty, "packets not back to back: \(steps.prefix(3).map { ($0.0.pts, $0.1.pts) })")
        // Every packet decodes, to as many samples as the packets say.
        let decoded = try Self.decode(sa.bytes, format)
        let said = sa.packets.reduce(0) { $0 + $1.duration }
        #expect(decoded.errors == 0, "\(decoded.errors) packets did not decode")
        #expect(abs(decoded.samples - said) <= 1024, "decoded \(decoded.samples) samples, the packets say \(said)")
        withExtendedLifetime((pa, pb)) {}
    }

    @Test func opusPacketsDecode() async throws {
        let r = try Rig("Opus")
        defer { r.stop() }
        let l = Listener()
        let p = r.port(l, AudioEncoderSettings(codec: .opus, bitRate: 48_000))
        try r.session.start()
        #expect(await eventually(timeout: 30) { l.count >= 30 })
        r.session.stopRunning()
        let s = l.seen.withLock { $0 }
        #expect(s.failures.isEmpty, "\(s.failures.map(\.message))")
        let format = try #require(s.format)
        // 20 ms at 48 kHz; OpusHead for a muxer.
        #expect(format.frameSize == 960 && format.sampleRate == 48_000, "\(format.frameSize) at \(format.sampleRate)")
        #expect(format.extradata.starts(with: Array("OpusHead".utf8)), "extradata \(format.extradata.prefix(8) as NSData)")
        let decoded = try Self.decode(s.bytes, format)
        #expect(decoded.errors == 0 && decoded.samples >= 30 * 960 - format.initialPadding, "\(decoded)")
        withExtendedLifetime(p) {}
    }

    /// A consumer that joins a running stage gets the packets from its join on: the same
    /// objects as the first consumer's from there, back to back, starting near its join.
    @Test func aLateJoinerGetsPacketsFromItsJoinOn() async throws {
        let r = try Rig("AAC join")
        defer { r.stop() }
        let first = Listener(), late = Listener()
        let settings = AudioEncoderSettings(codec: .aac, bitRate: 96_000)
        let p1 = r.port(first, settings)
        try r.session.start()
        #expect(await eventually(timeout: 30) { first.count >= 30 })
        let joined = CaptureTime.now()
        let p2 = r.port(late, settings)
        #expect(await eventually(timeout: 30) { late.count >= 30 })
        r.session.stopRunning()
        let sf = first.seen.withLock { $0 }, sl = late.seen.withLock { $0 }
        let start = try #require(sl.packets.first)
        let at = try #require(sf.packets.firstIndex { $0.pts == start.pts }, "the late joiner's first packet is not the first's")
        #expect(at >= 30, "the late joiner got packets from before its join (from the first's \(at))")
        #expect(Array(sf.packets[at...].map(\.packet)) == sl.packets.map(\.packet), "not the same packets from the join on")
        // Its first packet holds audio from about its join (the encoder's delay and a period or
        // two before it; generous bounds for a loaded machine).
        let offset = Double(Int64(bitPattern: start.time.nanoseconds &- joined.nanoseconds)) / 1e9
        #expect(offset > -1 && offset < 2, "the first packet was captured \(offset) s from the join")
        withExtendedLifetime((p1, p2)) {}
    }

    /// A raw consumer of the same microphone that holds its reader past the ring (an overrun):
    /// the loss reaches the raw consumer and, through the stage, the encoded one, each once with
    /// the same count; the stage's time line has no hole (silence in its place), so the packets
    /// after it keep their capture times.
    final class Blocker: FrameConsumer, @unchecked Sendable {
        let block = Locked(false)
        let dropped = Locked(0)
        func consume(_ sample: SampleBuffer, from connection: CaptureConnection) {}
        func consumeDrop(_ drop: DroppedFrames, from connection: CaptureConnection) { dropped.withLock { $0 += drop.count } }
        /// Where the last buffer ends, on the capture clock.
        let lastEnd = Locked(CaptureTime(nanoseconds: 0))
        func consumeAudio(_ sample: SampleBuffer, from connection: CaptureConnection) {
            if let pcm = sample.audioBuffer {
                let end = sample.presentationTimeStamp.nanoseconds &+ UInt64(pcm.frameCount) * 1_000_000_000 / UInt64(pcm.format.sampleRate)
                lastEnd.withLock { $0 = CaptureTime(nanoseconds: end) }
            }
            // (Once: the reader is held 1.5 s, past the microphone's ring of about a second.)
            if block.withLock({ b in
                defer { b = false }; return b
            }) {
                Thread.sleep(forTimeInterval: 1.5)
            }
        }
    }

    @Test func aMicrophoneOverrunReachesEachConsumerOnce() async throws {
        let r = try Rig("AAC overrun")
        defer { r.stop() }
        let l = Listener(), blocker = Blocker()
        // (Keeping every packet: the second of audio the reader finds after the block fits the
        // stage's ring.)
        let p = r.port(l, AudioEncoderSettings(codec: .aac), keepsEveryPacket: true)
        let raw = FrameConsumerPort(audioFor: blocker)
        #expect(r.session.addFrameConsumer(raw))
        try r.session.start()
        #expect(await eventually(timeout: 30) { l.count >= 10 })
        blocker.block.withLock { $0 = true }
        #expect(await eventually(timeout: 30) { blocker.dropped.withLock { $0 } > 0 && l.seen.withLock(\.dropped) > 0 })
        let n = l.count
        #expect(await eventually(timeout: 30) { l.count >= n + 20 })
        r.session.stopRunning()
        let s = l.seen.withLock { $0 }
        let lost = blocker.dropped.withLock { $0 }
        #expect(s.dropped == lost && lost > 48_000 / 4, "the stage's consumer heard of \(s.dropped) lost samples, the raw one of \(lost)")
        #expect(s.late == 0, "the stage lost \(s.late) samples of its own")
        let steps = zip(s.packets, s.packets.dropFirst()).filter { $1.pts != $0.pts + Int64($0.duration) }
        #expect(steps.isEmpty, "packets not back to back: \(steps.prefix(3).map { ($0.0.pts, $0.1.pts) })")
        // The last packet ends where the microphone's last buffer did (the encoder's short last
        // frame within a packet): without the silence its time would be off by the loss.
        let last = try #require(s.packets.last)
        let end = Double(last.time.nanoseconds) / 1e9 + Double(last.duration) / 48_000
        let rawEnd = Double(blocker.lastEnd.withLock { $0 }.nanoseconds) / 1e9
        #expect(abs(end - rawEnd) < 1024.0 / 48_000 + 0.002, "the stage's audio ends at \(end) s, the microphone's at \(rawEnd) s")
        withExtendedLifetime((p, raw)) {}
    }

    /// Opus at a rate it does not take: the stage says so, once, to each consumer.
    @Test func opusAtARateItDoesNotTakeFailsOnce() async throws {
        let r = try Rig("Opus 44.1", appFormat: .init(sampleRate: 44_100, channelCount: 2, sampleFormat: .s16, framesPerBuffer: 441))
        defer { r.stop() }
        let l = Listener()
        let p = r.port(l, AudioEncoderSettings(codec: .opus))
        try r.session.start()
        #expect(await eventually(timeout: 30) { !l.seen.withLock(\.failures).isEmpty })
        // A few more buffers: still one report.
        let handed = r.session.audioBuffersHanded
        #expect(await eventually(timeout: 30) { r.session.audioBuffersHanded >= handed + 5 })
        r.session.stopRunning()
        let s = l.seen.withLock { $0 }
        #expect(s.failures.count == 1 && s.packets.isEmpty, "\(s.failures.count) failures, \(s.packets.count) packets")
        #expect(s.failures.first?.code == .unsupportedCodec && s.failures.first?.message.contains("44100 Hz") == true)
        withExtendedLifetime(p) {}
    }

    /// Decodes `packets` with FFmpeg's decoder for `format` (its extradata as a muxer would
    /// carry it): the samples per channel it gave and the packets it refused.
    static func decode(_ packets: [Data], _ format: AudioStreamFormat) throws -> (samples: Int, errors: Int) {
        let id: AVCodecID =
            switch format.codec {
            case .aac: AV_CODEC_ID_AAC
            case .opus: AV_CODEC_ID_OPUS
            case .pcm: AV_CODEC_ID_PCM_S16LE
            }
        var ctx = avcodec_alloc_context3(avcodec_find_decoder(id))
        var frame = av_frame_alloc()
        var packet = av_packet_alloc()
        defer {
            avcodec_free_context(&ctx)
            av_frame_free(&frame)
            av_packet_free(&packet)
        }
        guard let ctx, let frame, let packet else { throw TestFailure("no decoder for \(format.codec)") }
        ctx.pointee.sample_rate = Int32(format.sampleRate)
        av_channel_layout_default(&ctx.pointee.ch_layout, Int32(format.channels))
        if !format.extradata.isEmpty {
            let n = format.extradata.count
            let extra = av_mallocz(n + Int(AV_INPUT_BUFFER_PADDING_SIZE))!
            format.extradata.withUnsafeBytes { extra.copyMemory(from: $0.baseAddress!, byteCount: n) }
            ctx.pointee.extradata = extra.assumingMemoryBound(to: UInt8.self)
            ctx.pointee.extradata_size = Int32(n)
        }
        guard avcodec_open2(ctx, nil, nil) >= 0 else { throw TestFailure("the \(format.codec) decoder does not open") }
        var samples = 0, errors = 0
        func drain() {
            while avcodec_receive_frame(ctx, frame) >= 0 { samples += Int(frame.pointee.nb_samples) }
        }
        for bytes in packets {
            guard av_new_packet(packet, Int32(bytes.count)) >= 0 else { throw TestFailure("out of memory") }
            bytes.withUnsafeBytes { packet.pointee.data.update(from: $0.bindMemory(to: UInt8.self).baseAddress!, count: bytes.count) }
            if avcodec_send_packet(ctx, packet) < 0 { errors += 1 }
            av_packet_unref(packet)
            drain()
        }
        avcodec_send_packet(ctx, nil)
        drain()
        return (samples, errors)
    }
}
