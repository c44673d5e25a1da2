// Audio against snd-aloop in the VM (`scripts/vm/run --aloop`): what is played into
// hw:Loopback,0,N comes out of hw:Loopback,1,N. These tests fail, not skip, without the driver.
import CaptureVirtual
import CaptureALSA
import CaptureBackend
import Foundation
import Synchronization
import Testing
@testable import Capture
internal import CALSA

/// Plays a continuous sine into an ALSA playback device from its own thread, as an app playing
/// sound would: blocking interleaved S16 writes, one period at a time.
final class TonePlayer: @unchecked Sendable {
    let frequency: Double
    let amplitude: Double
    let rate: Int
    let channels: Int
    private let pcm: OpaquePointer
    private let running = Atomic<Bool>(true)
    private let finished = DispatchSemaphore(value: 0)
    /// Frames written so far.
    let written = Atomic<Int>(0)
    /// Times the player itself fell behind (the loopback then carries silence: not a capture gap).
    let underruns = Atomic<Int>(0)

    init(device: String, frequency: Double, decibels: Double, rate: Int = 48000, channels: Int = 2) throws {
        self.frequency = frequency
        self.amplitude = pow(10, decibels / 20)
        self.rate = rate
        self.channels = channels
        var handle: OpaquePointer?
        let r = snd_pcm_open(&handle, device, SND_PCM_STREAM_PLAYBACK, 0)
        guard r >= 0, let handle else { throw CaptureError(.noSuchDevice, "playback open \(device): \(r)") }
        // One second of buffer: a loaded VM must not starve the loopback.
        let s = snd_pcm_set_params(
            handle, SND_PCM_FORMAT_S16_LE, SND_PCM_ACCESS_RW_INTERLEAVED, UInt32(channels),
            UInt32(rate), 0, 1_000_000)
        guard s >= 0 else {
            snd_pcm_close(handle)
            throw CaptureError(.unsupportedFormat, "playback set_params on \(device): \(s)")
        }
        pcm = handle
        let thread = Thread { [self] in self.run() }
        thread.start()
    }

    private func run() {
        let period = 1024
        // A 1 kHz tone at 48 kHz repeats every 48 samples: one table, no sin() per sample (the
        // VM is slow enough without it).
        let cycle = rate % Int(frequency) == 0 ? rate / Int(frequency) : rate
        let table = (0..<cycle).map { Int16((amplitude * 32767 * sin(2 * Double.pi * frequency * Double($0) / Double(rate))).rounded()) }
        var phase = 0
        var block = [Int16](repeating: 0, count: period * channels)
        while running.load(ordering: .relaxed) {
            for i in 0..<period {
                let v = table[(phase + i) % cycle]
                for c in 0..<channels { block[i * channels + c] = v }
            }
            let r = block.withUnsafeBytes { snd_pcm_writei(pcm, $0.baseAddress, snd_pcm_uframes_t(period)) }
            if r < 0 {
                _ = snd_pcm_recover(pcm, Int32(r), 1)
                underruns.add(1, ordering: .relaxed)
                continue
            }
            phase = (phase + Int(r)) % cycle
            written.add(Int(r), ordering: .relaxed)
        }
        finished.signal()
    }

    func stop() {
        running.store(false, ordering: .relaxed)
        finished.wait()
        snd_pcm_drop(pcm)
        snd_pcm_close(pcm)
    }
}

/// Rising zero crossings per second of `samples`, measured between the first and last crossing.
func estimateFrequency(_ samples: [Float], rate: Int) -> Double {
    var crossings: [Int] = []
    for i in 1..<samples.count where samples[i - 1] < 0 && samples[i] >= 0 { crossings.append(i) }
    guard crossings.count > 2, let first = crossings.first, let last = crossings.last else { return 0 }
    return Double(crossings.count - 1) * Double(rate) / Double(last - first)
}

/// Samples where `x[n] = 2cos(w)x[n-1] - x[n-2]` (a pure sine) fails by more than `tolerance`:
/// a gap or a repeated block shows up as a break.
func sineBreaks(_ x: [Float], frequency: Double, rate: Int, tolerance: Float) -> [Int] {
    let k = Float(2 * cos(2 * Double.pi * frequency / Double(rate)))
    var out: [Int] = []
    if x.count < 3 { return out }
    for n in 2..<x.count where abs(x[n] - (k * x[n - 1] - x[n - 2])) > tolerance { out.append(n) }
    return out
}

@Suite(.serialized) struct AudioDriverTests {
    static let playback = "hw:Loopback,0,0"
    static let capture = "hw:Loopback,1,0"

    @Test func discoveryListsLoopbackWithFormats() throws {
        let devices = ALSADiscovery.captureDevices()
        let ids = devices.map(\.info.uniqueID)
        #expect(ids.contains("hw:CARD=Loopback,DEV=0"), "\(ids)")
        let dev1 = try #require(devices.first { $0.info.uniqueID == "hw:CARD=Loopback,DEV=1" }, "\(ids)")
        #expect(dev1.info.driver == "snd_aloop" || dev1.info.driver.lowercased().contains("loopback"), "\(dev1.info)")
        #expect(dev1.info.path.hasPrefix("hw:") && dev1.info.path.hasSuffix(",1"))
        #expect(dev1.subdeviceCount >= 1)
        let formats = try #require(dev1.formats)
        #expect(formats.sampleFormats.contains(.s16))
        #expect(formats.standardSampleRates.contains(48000))
        #expect(formats.standardSampleRates.contains(44100))
        #expect(formats.channelCounts.contains(2))
        if ProcessInfo.processInfo.environment["CAPTURE_VM_DUMMY"] != nil {
            let dummy = try #require(devices.first { $0.info.uniqueID == "hw:CARD=Dummy,DEV=0" }, "\(ids)")
            #expect(dummy.formats?.sampleFormats.contains(.s16) == true, "\(String(describing: dummy.formats))")
        }
        // The default device comes first whenever it can capture.
        if ids.contains("default") { #expect(ids.first == "default") }
        // The plain name opens the same device.
        let source = try ALSADiscovery.open(dev1.info.path)
        #expect(source.info.uniqueID == dev1.info.uniqueID)
    }

    @Test func sineIsCapturedWithRateFrequencyLevelAndNoGaps() throws {
        let player = try TonePlayer(device: Self.playback, frequency: 1000, decibels: -6)
        defer { player.stop() }
        let source = try ALSADiscovery.open(Self.capture)
        let applied = try source.configure(
            AudioConfiguration(
                format: AudioFormat(sampleRate: 48000, channelCount: 2, sampleFormat: .s16), periodFrames: 1024, bufferFrames: 49152))
        #expect(applied.format.sampleRate == 48000)
        #expect(applied.format.channelCount == 2)
        #expect(applied.format.sampleFormat == .s16)
        try source.start()
        defer { source.stop() }

        var captured: [CapturedAudio] = []
        var frames = 0
        let startClock = CaptureTime.now()
        while frames < 48000 * 3 {
            guard case .buffer(let b) = try source.nextBuffer(timeout: .seconds(2)) else {
                Issue.record("no audio within 2 s after \(frames) frames")
                return
            }
            // Stamped on the monotonic clock before it was handed over: never from the future, at
            // most the 1 s ring (plus delivery) in the past.
            let age = CaptureTime.now() - b.timestamp
            #expect(age >= 0 && age < 1_500_000_000, "buffer age \(age) ns")
            captured.append(b)
            frames += b.buffer.frameCount
        }
        #expect(captured.first!.timestamp - startClock > -500_000_000)
        // Contiguous frame numbering, no discontinuity, stamps advancing at the sample rate.
        for (a, b) in zip(captured, captured.dropFirst()) {
            #expect(b.firstFrame == a.firstFrame + UInt64(a.buffer.frameCount))
            #expect(b.buffer.discontinuity == nil)
            #expect(b.timestamp - a.timestamp > 0)
        }
        let span = Double(captured.last!.timestamp - captured.first!.timestamp) / 1e9
        let expected = Double(captured.last!.firstFrame - captured.first!.firstFrame) / 48000
        #expect(abs(span - expected) < 0.05, "stamps span \(span) s for \(expected) s of audio")

        let left = captured.flatMap { $0.buffer.floatSamples(channel: 0) }
        let right = captured.flatMap { $0.buffer.floatSamples(channel: 1) }
        #expect(left.count == frames)
        // Skip the silence before the player's first period reached the loopback.
        let start = try #require(left.firstIndex { abs($0) > 0.01 }, "captured only silence")
        let signal = Array(left[(start + 480)...])
        #expect(signal.count > 48000 * 2)
        let freq = estimateFrequency(signal, rate: 48000)
        #expect(abs(freq - 1000) < 10, "measured \(freq) Hz")
        let tail = captured.suffix(captured.count / 2)
        let lv = tail.first!.buffer.channelLevels[0]
        print(
            "audio: \(applied), \(frames) frames in \(captured.count) buffers, \(freq) Hz, \(lv), stamps span \(span) s for \(expected) s")
        for b in tail {
            let levels = b.buffer.channelLevels
            #expect(levels.count == 2)
            #expect(abs(levels[0].peakHoldLevel - -6) < 1, "\(levels[0])")
            #expect(abs(levels[0].averagePowerLevel - -9.03) < 1, "\(levels[0])")
            #expect(abs(levels[1].averagePowerLevel - -9.03) < 1, "\(levels[1])")
        }
        // No lost or repeated samples: the sine continues exactly across every buffer boundary.
        #expect(player.underruns.load(ordering: .relaxed) == 0, "the test's player fell behind: its gaps are not capture gaps")
        let breaks = sineBreaks(signal, frequency: 1000, rate: 48000, tolerance: 4.0 / 32768)
        #expect(breaks.isEmpty, "sine breaks at \(breaks.prefix(10)) of \(signal.count)")
        #expect(Array(right[(start + 480)...]) == signal)
    }

    /// Through alsa-lib's plug layer (as "default" usually is): 48 kHz stereo played, 44.1 kHz
    /// mono captured. The tone survives the conversion and the stamps stay on the clock.
    @Test func plugLayerConvertsAndStamps() throws {
        let player = try TonePlayer(device: "hw:Loopback,0,3", frequency: 1000, decibels: -6)
        defer { player.stop() }
        let source = try ALSADiscovery.open("plughw:Loopback,1,3")
        let applied = try source.configure(
            AudioConfiguration(
                format: AudioFormat(sampleRate: 44100, channelCount: 1, sampleFormat: .float32), periodFrames: 1024, bufferFrames: 44100))
        #expect(applied.format == AudioFormat(sampleRate: 44100, channelCount: 1, sampleFormat: .float32))
        try source.start()
        defer { source.stop() }
        var got: [CapturedAudio] = []
        while got.count < 100 {
            guard case .buffer(let b) = try source.nextBuffer(timeout: .seconds(2)) else {
                Issue.record("no audio through plughw")
                return
            }
            // Never from the future; at most the 1 s ring (plus delivery) in the past.
            let age = CaptureTime.now() - b.timestamp
            #expect(age >= 0 && age < 1_500_000_000, "buffer age \(age) ns")
            got.append(b)
        }
        for (a, b) in zip(got, got.dropFirst()) {
            #expect(b.firstFrame == a.firstFrame + UInt64(a.buffer.frameCount))
            #expect(b.buffer.discontinuity == nil)
        }
        let span = Double(got.last!.timestamp - got.first!.timestamp) / 1e9
        let expected = Double(got.last!.firstFrame - got.first!.firstFrame) / 44100
        #expect(abs(span - expected) < 0.05, "stamps span \(span) s for \(expected) s of audio")
        let samples = got.flatMap { $0.buffer.floatSamples(channel: 0) }
        let start = try #require(samples.firstIndex { abs($0) > 0.01 })
        let signal = Array(samples[(start + 4410)...])
        let freq = estimateFrequency(signal, rate: 44100)
        #expect(abs(freq - 1000) < 10, "\(freq) Hz")
        let level = got.last!.buffer.channelLevels[0]
        print("audio: plughw 44.1 kHz mono float from 48 kHz stereo: \(freq) Hz, \(level), span \(span) s for \(expected) s")
        #expect(abs(level.peakHoldLevel - -6) < 1, "\(level)")
    }

    @Test func overrunIsReportedAndCaptureGoesOn() throws {
        let player = try TonePlayer(device: Self.playback, frequency: 1000, decibels: -6)
        defer { player.stop() }
        let source = try ALSADiscovery.open(Self.capture)
        let applied = try source.configure(
            AudioConfiguration(
                format: AudioFormat(sampleRate: 48000, channelCount: 2, sampleFormat: .s16), periodFrames: 1024, bufferFrames: 4096))
        try source.start()
        defer { source.stop() }
        func next() throws -> CapturedAudio? {
            if case .buffer(let b) = try source.nextBuffer(timeout: .seconds(2)) { return b }
            return nil
        }
        var last: CapturedAudio?
        for _ in 0..<5 {
            let b: CapturedAudio = try #require(try next())
            last = b
        }
        #expect(last?.buffer.discontinuity == nil)
        // Stall for far longer than the ring buffer holds (4096 frames = 85 ms).
        Thread.sleep(forTimeInterval: 0.4)
        var afterStall: [CapturedAudio] = []
        while afterStall.count < 20, let b = try next() { afterStall.append(b) }
        #expect(afterStall.count == 20)
        // The first buffer after the stall carries the break.
        let first = try #require(afterStall.first)
        let d = try #require(first.buffer.discontinuity)
        print("audio: overrun after a 0.4 s stall: \(d)")
        #expect(d.reason == .overrun)
        let lost = try #require(d.lostFrames)
        // About 0.4 s minus what the ring held, plus restart time.
        #expect(lost > 48000 / 5 && lost < 48000, "lost \(lost) frames")
        // The frame count skips the lost frames; afterwards it runs on contiguously (a loaded
        // machine may overrun again: that too must be marked and counted, never silent).
        #expect(first.firstFrame == last!.firstFrame + UInt64(last!.buffer.frameCount) + UInt64(lost))
        for (a, b) in zip(afterStall, afterStall.dropFirst()) {
            let skipped = UInt64(b.buffer.discontinuity?.lostFrames ?? 0)
            #expect(b.firstFrame == a.firstFrame + UInt64(a.buffer.frameCount) + skipped)
        }
        let further = afterStall.dropFirst().compactMap { $0.buffer.discontinuity }
        if !further.isEmpty { print("audio: further overruns on this machine: \(further)") }
        #expect(applied.bufferFrames == 4096)
    }

    @Test func wakeUpInterruptsAWaitPromptly() throws {
        let source = try ALSADiscovery.open(Self.capture)
        // Long periods: the wait for one lasts ~1.4 s unless woken.
        _ = try source.configure(
            AudioConfiguration(
                format: AudioFormat(sampleRate: 48000, channelCount: 2, sampleFormat: .s16), periodFrames: 65536, bufferFrames: 131072))
        try source.start()
        defer { source.stop() }
        let waker = Thread {
            Thread.sleep(forTimeInterval: 0.1); source.wakeUp()
        }
        let t0 = ContinuousClock.now
        waker.start()
        let event = try source.nextBuffer(timeout: .seconds(5))
        let waited = ContinuousClock.now - t0
        guard case .interrupted = event else {
            Issue.record("expected .interrupted, got \(event)")
            return
        }
        #expect(waited < .milliseconds(600), "\(waited)")
        // A timeout shorter than one period gives .timeout.
        guard case .timeout = try source.nextBuffer(timeout: .milliseconds(50)) else {
            Issue.record("expected .timeout")
            return
        }
    }

    @Test func busyAndMissingDevicesGiveTypedErrors() throws {
        let first = try ALSADiscovery.open(Self.capture)
        do {
            _ = try ALSADiscovery.open(Self.capture)
            Issue.record("a second open of \(Self.capture) succeeded")
        } catch {
            let error = CaptureError(error)
            #expect(error.code == .deviceBusy, "\(error)")
        }
        withExtendedLifetime(first) {}
        for name in ["hw:CARD=NoSuchCard,DEV=0", "hw:Loopback,7,0", "hw:9,0"] {
            do {
                _ = try ALSADiscovery.open(name)
                Issue.record("opened \(name)")
            } catch {
                let error = CaptureError(error)
                #expect(error.code == .noSuchDevice, "\(name): \(error)")
            }
        }
    }
}
