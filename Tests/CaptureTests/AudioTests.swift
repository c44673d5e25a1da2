import CaptureALSA
import CaptureBackend
import CaptureSystem
import Foundation
import Testing
@testable import Capture

/// A sine of `amplitude` (1 = full scale) in `format`, starting at phase 0, same on all channels
/// except that channel c is scaled by `channelScale[c]` when given.
func makeSineBuffer(
    frequency: Double, amplitude: Double, format: AudioFormat, frames: Int,
    channelScale: [Double]? = nil
) -> AudioPCMBuffer {
    var data = Data(capacity: frames * format.bytesPerFrame)
    func sample(_ i: Int, _ c: Int) -> Double {
        amplitude * (channelScale?[c] ?? 1) * sin(2 * Double.pi * frequency * Double(i) / Double(format.sampleRate))
    }
    func append(_ v: Double) {
        switch format.sampleFormat {
        case .s16:
            let s = Int16(clamping: Int((v * 32767).rounded()))
            withUnsafeBytes(of: s.littleEndian) { data.append(contentsOf: $0) }
        case .s32:
            let s = Int32(clamping: Int64((v * 2_147_483_647).rounded()))
            withUnsafeBytes(of: s.littleEndian) { data.append(contentsOf: $0) }
        case .float32:
            withUnsafeBytes(of: Float(v).bitPattern.littleEndian) { data.append(contentsOf: $0) }
        }
    }
    if format.isInterleaved {
        for i in 0..<frames { for c in 0..<format.channelCount { append(sample(i, c)) } }
    } else {
        for c in 0..<format.channelCount { for i in 0..<frames { append(sample(i, c)) } }
    }
    return AudioPCMBuffer(format: format, frameCount: frames, data: data)
}

@Suite struct AudioLevelTests {
    let sixDB = pow(10, -6.0 / 20)  // -6 dBFS as a linear amplitude

    @Test(arguments: AudioFormat.SampleFormat.allCases)
    func sineLevels(_ sampleFormat: AudioFormat.SampleFormat) {
        let format = AudioFormat(sampleRate: 48000, channelCount: 2, sampleFormat: sampleFormat)
        // 4800 frames = 100 whole periods of 1 kHz: RMS is exactly amplitude/sqrt(2).
        let buffer = makeSineBuffer(frequency: 1000, amplitude: sixDB, format: format, frames: 4800, channelScale: [1, 0.5])
        let levels = buffer.channelLevels
        #expect(levels.count == 2)
        #expect(abs(levels[0].peakHoldLevel - -6.0) < 0.05)
        #expect(abs(levels[0].averagePowerLevel - -9.03) < 0.05)
        // Half the amplitude is 6.02 dB lower.
        #expect(abs(levels[1].peakHoldLevel - -12.02) < 0.05)
        #expect(abs(levels[1].averagePowerLevel - -15.05) < 0.05)
    }

    @Test func silenceAndFullScale() {
        let format = AudioFormat(sampleRate: 8000, channelCount: 1, sampleFormat: .s16)
        let silent = AudioPCMBuffer(format: format, frameCount: 100, data: Data(count: 200))
        #expect(silent.channelLevels == [AudioChannelLevel(averagePowerLevel: -160, peakHoldLevel: -160)])
        var square = Data()
        for i in 0..<100 {
            let v: Int16 = i % 2 == 0 ? .min : .min  // -32768 is exactly full scale
            withUnsafeBytes(of: v.littleEndian) { square.append(contentsOf: $0) }
        }
        let full = AudioPCMBuffer(format: format, frameCount: 100, data: square).channelLevels[0]
        #expect(full.peakHoldLevel == 0)
        #expect(full.averagePowerLevel == 0)
    }

    @Test func planarLevelsSeparateChannels() {
        let format = AudioFormat(sampleRate: 48000, channelCount: 2, sampleFormat: .float32, isInterleaved: false)
        let buffer = makeSineBuffer(frequency: 1000, amplitude: 1, format: format, frames: 480, channelScale: [1, 0.1])
        let levels = buffer.channelLevels
        #expect(abs(levels[0].peakHoldLevel) < 0.01)
        #expect(abs(levels[1].peakHoldLevel - -20) < 0.01)
    }

    @Test func sampleAccess() {
        let format = AudioFormat(sampleRate: 48000, channelCount: 2, sampleFormat: .s16)
        var data = Data()
        for v: Int16 in [1, -1, 2, -2, 16384, -16384] { withUnsafeBytes(of: v.littleEndian) { data.append(contentsOf: $0) } }
        let b = AudioPCMBuffer(format: format, frameCount: 3, data: data)
        #expect(b.int16Samples == [1, -1, 2, -2, 16384, -16384])
        #expect(b.int32Samples == nil)
        let left: [Float] = [1 / 32768, 2 / 32768, 0.5]
        let right: [Float] = [-1 / 32768, -2 / 32768, -0.5]
        #expect(b.floatSamples(channel: 0) == left)
        #expect(b.floatSamples(channel: 1) == right)
        #expect(b.floatSamples(channel: 2).isEmpty)
        #expect(abs(b.duration - 3.0 / 48000) < 1e-12)
        let marked = b.withDiscontinuity(AudioDiscontinuity(reason: .dropped, lostFrames: 10))
        #expect(marked.discontinuity?.lostFrames == 10)
        #expect(marked.data == b.data)
        #expect(b.discontinuity == nil)
    }

    @Test func floatSamplesOfS32AndFloat() {
        let f32 = AudioFormat(sampleRate: 48000, channelCount: 1, sampleFormat: .float32)
        let sine = makeSineBuffer(frequency: 12000, amplitude: 0.5, format: f32, frames: 4)
        let s = sine.floatSamples(channel: 0)
        #expect(s.count == 4)
        #expect(abs(s[1] - 0.5) < 1e-6)
        #expect(abs(s[3] - -0.5) < 1e-6)
        let s32 = makeSineBuffer(
            frequency: 12000, amplitude: 0.5, format: AudioFormat(sampleRate: 48000, channelCount: 1, sampleFormat: .s32), frames: 4)
        #expect(abs(s32.floatSamples(channel: 0)[1] - 0.5) < 1e-6)
        #expect(s32.int32Samples?.count == 4)
    }
}

@Suite struct AudioFormatNegotiationTests {
    let loopbackLike = AudioFormatRange(
        sampleFormats: [.s16, .float32, .s32], sampleRates: 8000...192000,
        standardSampleRates: AudioFormatRange.commonSampleRates, channelCounts: 1...32)
    let fixed = AudioFormatRange(
        sampleFormats: [.s32], sampleRates: 44100...48000, standardSampleRates: [44100, 48000],
        channelCounts: 2...2)

    @Test func acceptedRequestIsKept() {
        let request = AudioFormat(sampleRate: 44100, channelCount: 1, sampleFormat: .float32)
        #expect(loopbackLike.supports(request))
        #expect(loopbackLike.closestFormat(to: request) == request)
    }

    @Test func unsupportedPartsMoveToTheNearestOffer() {
        let request = AudioFormat(sampleRate: 16000, channelCount: 6, sampleFormat: .s16)
        #expect(!fixed.supports(request))
        #expect(fixed.closestFormat(to: request) == AudioFormat(sampleRate: 44100, channelCount: 2, sampleFormat: .s32))
        let high = AudioFormat(sampleRate: 96000, channelCount: 1, sampleFormat: .s32)
        #expect(fixed.closestFormat(to: high) == AudioFormat(sampleRate: 48000, channelCount: 2, sampleFormat: .s32))
    }

    @Test func rateWithoutStandardRatesIsClamped() {
        let odd = AudioFormatRange(sampleFormats: [.s16], sampleRates: 22000...23000, standardSampleRates: [], channelCounts: 1...1)
        #expect(odd.closestFormat(to: AudioFormat(sampleRate: 48000, channelCount: 2, sampleFormat: .s16))?.sampleRate == 23000)
    }

    @Test func noReadableSampleFormatGivesNil() {
        let none = AudioFormatRange(sampleFormats: [], sampleRates: 8000...48000, standardSampleRates: [48000], channelCounts: 1...2)
        #expect(none.closestFormat(to: AudioConfiguration.standard.format) == nil)
        #expect(!none.supports(AudioConfiguration.standard.format))
    }

    @Test func planarIsNeverSupported() {
        #expect(!loopbackLike.supports(AudioFormat(sampleRate: 48000, channelCount: 2, sampleFormat: .s16, isInterleaved: false)))
    }

    @Test func outputSettingsBecomeADeviceRequest() {
        // No settings: 48 kHz stereo s16, 1024-frame periods, about a second of ring.
        let std = AudioPipeline.request(for: nil, range: loopbackLike)
        #expect(std.format == AudioFormat(sampleRate: 48000, channelCount: 2, sampleFormat: .s16))
        #expect(std.periodFrames == 1024 && std.bufferFrames == 49152)
        // Settings the device cannot meet move to its nearest offer; the ring scales with the rate.
        let wanted = CaptureAudioDataOutput.AudioSettings(sampleRate: 16000, channelCount: 1, sampleFormat: .float32, framesPerBuffer: 160)
        let r = AudioPipeline.request(for: wanted, range: fixed)
        #expect(r.format == AudioFormat(sampleRate: 44100, channelCount: 2, sampleFormat: .s32))
        #expect(r.periodFrames == 160)
        #expect(r.bufferFrames == 49152 * 44100 / 48000)
        // A huge period still gets four of them in the ring.
        let big = AudioPipeline.request(for: .init(framesPerBuffer: 48000), range: loopbackLike)
        #expect(big.bufferFrames == 4 * 48000)
    }

    @Test func descriptionListsTheOffer() {
        #expect(fixed.description == "s32, 44100/48000 Hz, 2 ch")
    }
}

@Suite struct AudioALSAHostTests {
    /// The ALSA result of `operation` on `device`, in the object model's words.
    private func mapped(_ result: Int32, _ operation: String, device: String = "x") -> CaptureError {
        CaptureError(ALSA.error(result, operation: operation, device: device))
    }

    @Test func errnoMapsToTypedErrors() {
        #expect(mapped(-ENOENT, "snd_pcm_open").code == .noSuchDevice)
        #expect(mapped(-ENODEV, "snd_pcm_open").code == .noSuchDevice)
        #expect(mapped(-ENODEV, "snd_pcm_readi").code == .disconnected)
        #expect(mapped(-EBUSY, "snd_pcm_open").code == .deviceBusy)
        #expect(mapped(-EACCES, "snd_pcm_open").code == .permissionDenied)
        #expect(mapped(-EPERM, "snd_pcm_open").code == .permissionDenied)
        #expect(mapped(-EINVAL, "snd_pcm_open").code == .noSuchDevice)  // a malformed name
        #expect(mapped(-EINVAL, "snd_pcm_hw_params_set_format").code == .unsupportedFormat)
        // The same code as V4L2's EIO (a driver failure the stream must restart after).
        #expect(mapped(-EIO, "snd_pcm_readi").code == .driverError)
        let e = mapped(-EBUSY, "snd_pcm_open", device: "hw:1,1")
        #expect(e.errno == EBUSY)
        #expect(e.operation == "snd_pcm_open")
        #expect(e.message.contains("hw:1,1"))
        // The layer itself says only the facts.
        let raw = ALSA.error(-EBUSY, operation: "snd_pcm_open", device: "hw:1,1")
        #expect(raw.failure == .system(SystemCallError(operation: "snd_pcm_open", errno: .resourceBusy)))
        #expect(raw.kind == .audio && raw.device == "hw:1,1")
    }

    @Test(arguments: ["hw:CARD=NoSuchCard,DEV=0", "hw:7,0", "plughw:9", "nonsense-pcm-name", ""])
    func missingDeviceIsNoSuchDevice(_ name: String) {
        #expect(throws: BackendError.self) { _ = try ALSADiscovery.open(name) }
        do {
            _ = try ALSADiscovery.open(name)
        } catch {
            #expect(CaptureError(error).code == .noSuchDevice, "\(error)")
        }
    }

    @Test func procFallbackListsCaptureDevices() throws {
        // A /proc/asound tree as snd-aloop leaves it, for a card whose control cannot be opened.
        let root = NSTemporaryDirectory() + "asound-\(getpid())"
        defer { try? FileManager.default.removeItem(atPath: root) }
        let fm = FileManager.default
        for d in ["card1/pcm0c", "card1/pcm0p", "card1/pcm1c", "card1/pcm2p"] {
            try fm.createDirectory(atPath: "\(root)/\(d)", withIntermediateDirectories: true)
        }
        try "Loopback\n".write(toFile: "\(root)/card1/id", atomically: true, encoding: .utf8)
        try
            " 0 [Dummy          ]: Dummy - Dummy\n                      Dummy 1\n 1 [Loopback       ]: Loopback - Loopback\n                      Loopback 1\n"
            .write(toFile: "\(root)/cards", atomically: true, encoding: .utf8)
        for dev in [0, 1] {
            try "card: 1\ndevice: \(dev)\nid: Loopback PCM\nname: Loopback PCM\nstream: CAPTURE\nsubdevices_count: 8\n"
                .write(toFile: "\(root)/card1/pcm\(dev)c/info", atomically: true, encoding: .utf8)
        }
        let devices = ALSADiscovery.procDevices(card: 1, root: root)
        #expect(devices.map(\.info.uniqueID) == ["hw:CARD=Loopback,DEV=0", "hw:CARD=Loopback,DEV=1"])
        #expect(devices.map(\.info.path) == ["hw:1,0", "hw:1,1"])
        // Both PCMs are called "Loopback PCM": the device number tells them apart.
        #expect(devices.map(\.info.name) == ["Loopback: Loopback PCM (device 0)", "Loopback: Loopback PCM (device 1)"])
        #expect(devices.first?.info.busInfo == "Loopback 1")
        #expect(devices.allSatisfy { $0.subdeviceCount == 8 && $0.formats == nil && $0.card == 1 })
        #expect(ALSADiscovery.procDevices(card: 5, root: root).isEmpty)
    }

    @Test func discoveryMatchesTheCardsPresent() {
        let devices = ALSADiscovery.captureDevices()
        if !FileManager.default.fileExists(atPath: "/proc/asound/cards") {
            // No sound driver at all: nothing to list, not even "default".
            #expect(devices.isEmpty)
        }
        for d in devices.dropFirst() {
            #expect(d.info.uniqueID.hasPrefix("hw:CARD="))
            #expect(d.info.path.hasPrefix("hw:"))
        }
        if let first = devices.first, first.card == nil { #expect(first.info.uniqueID == "default") }
    }
}

@Suite struct AudioWAVTests {
    func temporaryPath(_ name: String) -> String {
        NSTemporaryDirectory() + "audio-wav-\(getpid())-\(name).wav"
    }
    func u32(_ d: Data, _ o: Int) -> UInt32 {
        d.withUnsafeBytes { UInt32(littleEndian: $0.loadUnaligned(fromByteOffset: o, as: UInt32.self)) }
    }
    func u16(_ d: Data, _ o: Int) -> UInt16 {
        d.withUnsafeBytes { UInt16(littleEndian: $0.loadUnaligned(fromByteOffset: o, as: UInt16.self)) }
    }
    func tag(_ d: Data, _ o: Int) -> String { String(decoding: d[o..<o + 4], as: UTF8.self) }

    @Test func pcmFileHasCorrectHeaderAndSamples() throws {
        let path = temporaryPath("s16")
        defer { unlink(path) }
        let format = AudioFormat(sampleRate: 48000, channelCount: 2, sampleFormat: .s16)
        let writer = try WAVFileWriter(path: path, format: format)
        let a = makeSineBuffer(frequency: 1000, amplitude: 0.5, format: format, frames: 1000)
        let b = makeSineBuffer(frequency: 500, amplitude: 0.25, format: format, frames: 333)
        try writer.write(a)
        try writer.write(b)
        #expect(writer.framesWritten == 1333)
        try writer.close()
        let file = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(file.count == 44 + 1333 * 4)
        #expect(tag(file, 0) == "RIFF")
        #expect(u32(file, 4) == UInt32(file.count - 8))
        #expect(tag(file, 8) == "WAVE")
        #expect(tag(file, 12) == "fmt ")
        #expect(u32(file, 16) == 16)
        #expect(u16(file, 20) == 1)  // PCM
        #expect(u16(file, 22) == 2)
        #expect(u32(file, 24) == 48000)
        #expect(u32(file, 28) == 48000 * 4)
        #expect(u16(file, 32) == 4)
        #expect(u16(file, 34) == 16)
        #expect(tag(file, 36) == "data")
        #expect(u32(file, 40) == 1333 * 4)
        #expect(file.subdata(in: 44..<44 + 4000) == a.data)
        #expect(file.subdata(in: 4044..<file.count) == b.data)
    }

    @Test func floatFileUsesFormat3WithFactChunk() throws {
        let path = temporaryPath("f32")
        defer { unlink(path) }
        let format = AudioFormat(sampleRate: 44100, channelCount: 1, sampleFormat: .float32)
        let writer = try WAVFileWriter(path: path, format: format)
        try writer.write(makeSineBuffer(frequency: 440, amplitude: 0.5, format: format, frames: 441))
        try writer.close()
        let file = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(u16(file, 20) == 3)
        #expect(u32(file, 16) == 18)
        #expect(u16(file, 34) == 32)
        #expect(tag(file, 38) == "fact")
        #expect(u32(file, 46) == 441)
        #expect(tag(file, 50) == "data")
        #expect(u32(file, 54) == 441 * 4)
        #expect(file.count == 58 + 441 * 4)
        #expect(u32(file, 4) == UInt32(file.count - 8))
    }

    @Test func unclosedFileStillHoldsTheSamples() throws {
        let path = temporaryPath("unclosed")
        defer { unlink(path) }
        let format = AudioFormat(sampleRate: 8000, channelCount: 1, sampleFormat: .s16)
        var writer: WAVFileWriter? = try WAVFileWriter(path: path, format: format)
        try writer?.write(Data(count: 100))
        // Before close the header says 0; after deinit it is fixed.
        #expect(u32(try Data(contentsOf: URL(fileURLWithPath: path)), 40) == 0)
        writer = nil
        #expect(u32(try Data(contentsOf: URL(fileURLWithPath: path)), 40) == 100)
    }

    @Test func fullDiskIsDiskFull() {
        // /dev/full accepts the open and fails every write with ENOSPC.
        let format = AudioFormat(sampleRate: 8000, channelCount: 1, sampleFormat: .s16)
        do {
            _ = try WAVFileWriter(path: "/dev/full", format: format)
            Issue.record("writing the header to /dev/full succeeded")
        } catch {
            #expect(error.code == .diskFull)
            #expect(error.errno == ENOSPC)
        }
    }

    @Test func misuseIsTyped() throws {
        let format = AudioFormat(sampleRate: 8000, channelCount: 1, sampleFormat: .s16)
        do {
            _ = try WAVFileWriter(path: "/nonexistent-folder-\(getpid())/x.wav", format: format)
            Issue.record("opened a file in a missing folder")
        } catch { #expect(error.code == .invalidArgument) }

        let path = temporaryPath("misuse")
        defer { unlink(path) }
        let writer = try WAVFileWriter(path: path, format: format)
        let stereo = makeSineBuffer(
            frequency: 100, amplitude: 0.1, format: AudioFormat(sampleRate: 8000, channelCount: 2, sampleFormat: .s16), frames: 10)
        do { try writer.write(stereo); Issue.record("wrote a stereo buffer to a mono file") } catch {
            #expect(error.code == .invalidArgument)
        }
        do { try writer.write(Data(count: 3)); Issue.record("wrote half a frame") } catch { #expect(error.code == .invalidArgument) }
        try writer.close()
        do { try writer.write(Data(count: 2)); Issue.record("wrote after close") } catch { #expect(error.code == .invalidState) }
        #expect(throws: CaptureError.self) {
            _ = try WAVFileWriter(
                path: path, format: AudioFormat(sampleRate: 8000, channelCount: 1, sampleFormat: .s16, isInterleaved: false))
        }
    }
}
