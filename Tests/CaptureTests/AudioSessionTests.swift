// Audio through the object model on the host, with the virtual microphone: the same flows the
// VM runs on snd-aloop (AudioSessionDriverTests), without sound hardware.
import CaptureVirtual
import CaptureBackend
import Foundation
import Testing
@testable import Capture

/// Collects audio (and video times) from data outputs; one object for both, as seed 004.
final class AudioCollector: CaptureAudioDataOutputSampleBufferDelegate, CaptureVideoDataOutputSampleBufferDelegate,
    @unchecked Sendable
{
    private let lock = NSLock()
    private var _audio: [(sample: SampleBuffer, connection: CaptureConnection, arrival: CaptureTime)] = []
    private var _video: [(timestamp: CaptureTime, connection: CaptureConnection)] = []
    private var _drops: [DroppedFrames] = []
    /// Runs `body` in the callback for audio buffer number `at` (1-based): a delegate stalled
    /// until `body` returns.
    var stall: (at: Int, body: @Sendable () -> Void)?
    let audioQueue = DispatchQueue(label: "test.audio-collector")
    let videoQueue = DispatchQueue(label: "test.video-collector")

    var audio: [(sample: SampleBuffer, connection: CaptureConnection, arrival: CaptureTime)] { lock.withLock { _audio } }
    var video: [(timestamp: CaptureTime, connection: CaptureConnection)] { lock.withLock { _video } }
    var drops: [DroppedFrames] { lock.withLock { _drops } }

    func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
        if sampleBuffer.mediaType == .audio {
            let n = lock.withLock {
                _audio.append((sampleBuffer, connection, CaptureTime.now()))
                return _audio.count
            }
            if let stall, stall.at == n { stall.body() }
        } else {
            lock.withLock { _video.append((sampleBuffer.presentationTimeStamp, connection)) }
        }
    }

    func captureOutput(_ output: CaptureOutput, didDrop drop: DroppedFrames, from connection: CaptureConnection) {
        lock.withLock { _drops.append(drop) }
    }

    func wait(audio count: Int, timeout: Double) -> Bool {
        let end = Date().addingTimeInterval(timeout)
        while Date() < end {
            if lock.withLock({ _audio.count }) >= count { return true }
            Thread.sleep(forTimeInterval: 0.01)
        }
        return false
    }
}

/// Rising zero crossings per second.
private func frequency(of x: [Float], rate: Int) -> Double {
    var crossings: [Int] = []
    for i in 1..<x.count where x[i - 1] < 0 && x[i] >= 0 { crossings.append(i) }
    guard crossings.count > 2 else { return 0 }
    return Double(crossings.count - 1) * Double(rate) / Double(crossings.last! - crossings.first!)
}

@Suite(.serialized) struct AudioSessionTests {
    static func microphone(_ tag: String, frequency: Double = 1000) -> (VirtualMicrophone, CaptureDevice) {
        let mic = VirtualMicrophone(name: "Mic \(tag)", frequency: frequency, level: -6)
        VirtualMicrophone.install(mic)
        let device = CaptureDevice.devices(for: .audio).first { $0.uniqueID == mic.uniqueID }!
        return (mic, device)
    }

    @Test func virtualSourceIsPacedContiguousAndStamped() throws {
        let source = try VirtualMicrophone(name: "source").makeSource()
        let applied = try source.configure(
            AudioConfiguration(
                format: AudioFormat(sampleRate: 48000, channelCount: 2, sampleFormat: .s16), periodFrames: 480, bufferFrames: 4800))
        #expect(applied.format == AudioFormat(sampleRate: 48000, channelCount: 2, sampleFormat: .s16))
        try source.start()
        let t0 = ContinuousClock.now
        var got: [CapturedAudio] = []
        while got.count < 30 {
            if case .buffer(let b) = try source.nextBuffer(timeout: .seconds(1)) {
                #expect(CaptureTime.now() - b.timestamp >= 0)
                got.append(b)
            }
        }
        // 30 periods of 10 ms arrive in real time, not faster.
        #expect(ContinuousClock.now - t0 >= .milliseconds(290))
        for (a, b) in zip(got, got.dropFirst()) {
            #expect(b.firstFrame == a.firstFrame + 480)
            #expect(b.timestamp - a.timestamp == 10_000_000)
            #expect(b.buffer.discontinuity == nil)
        }
        let levels = got[5].buffer.channelLevels
        #expect(abs(levels[0].peakHoldLevel - -6) < 0.1)
        #expect(abs(levels[1].averagePowerLevel - -9.03) < 0.1)
        let samples = got.flatMap { $0.buffer.floatSamples(channel: 0) }
        #expect(abs(frequency(of: samples, rate: 48000) - 1000) < 5)

        // A reader that sleeps past the ring (100 ms) gets one marked buffer, then goes on.
        Thread.sleep(forTimeInterval: 0.25)
        guard case .buffer(let late) = try source.nextBuffer(timeout: .seconds(1)) else {
            Issue.record("no buffer after the stall")
            return
        }
        let d = try #require(late.buffer.discontinuity)
        #expect(d.reason == .overrun)
        let lost = try #require(d.lostFrames)
        // At least the 100 ms ring; the upper bound leaves room for a loaded machine's sleep.
        #expect(lost > 4800 && lost < 48000 * 10, "\(lost)")
        #expect(late.firstFrame == got.last!.firstFrame + 480 + UInt64(lost))
        guard case .buffer(let next) = try source.nextBuffer(timeout: .seconds(1)) else {
            Issue.record("no buffer after the overrun")
            return
        }
        #expect(next.buffer.discontinuity == nil && next.firstFrame == late.firstFrame + 480)
        source.stop()
    }

    @Test func virtualSourceWakesAndTimesOut() throws {
        let source = try VirtualMicrophone(name: "wake").makeSource()
        _ = try source.configure(
            AudioConfiguration(
                format: AudioFormat(sampleRate: 8000, channelCount: 1, sampleFormat: .s16), periodFrames: 8000, bufferFrames: 16000))
        try source.start()
        guard case .timeout = try source.nextBuffer(timeout: .milliseconds(20)) else {
            Issue.record("expected a timeout: a period lasts 1 s")
            return
        }
        let waker = Thread {
            Thread.sleep(forTimeInterval: 0.05); source.wakeUp()
        }
        waker.start()
        let t0 = ContinuousClock.now
        guard case .interrupted = try source.nextBuffer(timeout: .seconds(5)) else {
            Issue.record("expected .interrupted")
            return
        }
        #expect(ContinuousClock.now - t0 < .milliseconds(500))
        source.stop()
        #expect(throws: BackendError.self) { _ = try source.nextBuffer(timeout: .zero) }
    }

    @Test func dataOutputDeliversTheToneWithLevels() throws {
        let (mic, device) = Self.microphone("output")
        defer { VirtualMicrophone.uninstall(mic) }
        #expect(device.mediaType == .audio && device.virtualMicrophone === mic)
        #expect(device.audioFormats == VirtualMicrophone.formatRange)
        #expect(try CaptureDevice.audioDevice(named: mic.uniqueID) === device)
        let session = CaptureSession()
        let input = try CaptureDeviceInput(device: device)
        let output = CaptureAudioDataOutput()
        output.audioSettings = .init(sampleRate: 44100, channelCount: 1, sampleFormat: .float32, framesPerBuffer: 441)
        let collector = AudioCollector()
        output.setSampleBufferDelegate(collector, queue: collector.audioQueue)
        #expect(session.canAddInput(input))
        session.addInput(input)
        #expect(session.canAddOutput(output))
        session.addOutput(output)
        try session.start()
        #expect(output.audioFormat == AudioFormat(sampleRate: 44100, channelCount: 1, sampleFormat: .float32))
        #expect(collector.wait(audio: 40, timeout: 5))
        let connection = try #require(output.connection(with: .audio))
        let levels = connection.audioChannels
        session.stopRunning()
        #expect(output.audioFormat == nil)
        let got = collector.audio
        #expect(got.allSatisfy { $0.connection === connection })
        for (a, b) in zip(got, got.dropFirst()) {
            #expect(b.sample.sequenceNumber == a.sample.sequenceNumber + 441)
            #expect(b.sample.audioBuffer?.discontinuity == nil)
        }
        #expect(levels.count == 1)
        #expect(abs((levels.first?.peakHoldLevel ?? 0) - -6) < 0.1)
        let samples = got.flatMap { $0.sample.audioBuffer!.floatSamples(channel: 0) }
        #expect(abs(frequency(of: samples, rate: 44100) - 1000) < 5)
        #expect(output.statistics.delivered == got.count)
    }

    @Test func stalledDelegateGetsAMarkedGap() throws {
        let (mic, device) = Self.microphone("stall")
        defer { VirtualMicrophone.uninstall(mic) }
        let session = CaptureSession()
        session.addInput(try CaptureDeviceInput(device: device))
        let output = CaptureAudioDataOutput()
        output.audioSettings = .init(sampleRate: 48000, channelCount: 2, sampleFormat: .s16, framesPerBuffer: 480)
        output.maximumPendingDuration = .milliseconds(200)
        let collector = AudioCollector()
        // The third buffer stalls the delegate until the output has dropped 0.2 s of audio,
        // however long a loaded machine takes to capture it (not a fixed sleep, whose outcome
        // depends on how much audio the reader got through meanwhile).
        collector.stall = (
            at: 3,
            body: {
                let base = output.statistics.droppedFrames
                let end = CaptureTime.now().nanoseconds + 20_000_000_000
                while output.statistics.droppedFrames - base < 9600, CaptureTime.now().nanoseconds < end {
                    Thread.sleep(forTimeInterval: 0.005)
                }
            }
        )
        output.setSampleBufferDelegate(collector, queue: collector.audioQueue)
        session.addOutput(output)
        try session.start()
        #expect(collector.wait(audio: 3 + 20 + 20, timeout: 30))
        session.stopRunning()
        collector.audioQueue.sync {}  // every delivery and drop report queued before the stop has run
        let got = collector.audio, drops = collector.drops
        try #require(got.count > 23)
        func lost(_ i: Int) -> Int { got[i].sample.audioBuffer?.discontinuity?.lostFrames ?? 0 }
        // Every buffer starts where the one before ended plus the frames its mark says are
        // missing, and the marks add up to the drops reported before the last buffer.
        for i in got.indices.dropFirst() {
            #expect(got[i].sample.sequenceNumber == got[i - 1].sample.sequenceNumber + 480 + UInt64(lost(i)), "buffer \(i)")
        }
        let last: UInt64 = got[got.count - 1].sample.sequenceNumber
        let reported: Int = drops.filter { ($0.sequenceNumber ?? .max) < last }.map(\.count).reduce(0, +)
        let marked: Int = got.indices.map(lost).reduce(0, +)
        #expect(reported == marked)
        #expect(drops.contains { $0.reason == .frameWasLate })
        // The 20 buffers (0.2 s) after the stalled third waited (a delegate that lagged 0.2 s
        // earlier may have left a mark among them); the next one through carries the gap: at least
        // the 0.2 s dropped while the delegate stalled (less an overrun marked on a waiting one) ...
        let mark = 3 + 20
        let marks = got.indices.filter { lost($0) > 0 }.map { ($0, lost($0)) }
        let d = try #require(got[mark].sample.audioBuffer?.discontinuity, "no mark on buffer \(mark): \(marks)")
        #expect(d.reason == .dropped)
        #expect((3...mark).map(lost).reduce(0, +) >= 9600, "\(marks)")
        // ... and at most what the microphone's clock made before the delegate came back: the
        // marked buffer starts at or before where that clock stood (overruns skip it ahead).
        let stalled = got[2].sample
        let overruns = drops.filter { $0.reason == .discontinuity }.map(\.count).reduce(0, +)
        let startsAt = Int64(got[mark].sample.sequenceNumber - stalled.sequenceNumber) - Int64(overruns)
        let clock = Double(got[3].arrival - stalled.presentationTimeStamp + 1) * 48000 / 1e9
        #expect(Double(startsAt) <= clock + 1, "mark \(d), \(startsAt) frames after the stalled buffer, clock \(clock)")
    }

    @Test func aDroppedBufferCountsTheOverrunItCarried() async throws {
        let (mic, device) = Self.microphone("overrun-drop")
        defer { VirtualMicrophone.uninstall(mic) }
        let output = CaptureAudioDataOutput()
        output.maximumPendingDuration = .zero  // one buffer waits beside the one delivered
        let connection = CaptureConnection(input: try CaptureDeviceInput(device: device), output: output, mediaType: .audio)
        let collector = AudioCollector()
        let gate = DispatchSemaphore(value: 0)
        collector.stall = (at: 1, body: { gate.wait() })
        output.setSampleBufferDelegate(collector, queue: collector.audioQueue)
        var stream = output.sampleBuffers(bufferingOldest: 1).makeAsyncIterator()
        let format = AudioFormat(sampleRate: 48000, channelCount: 1, sampleFormat: .s16)
        func feed(_ first: UInt64, overrun: Int = 0) {
            if overrun > 0 {
                // As the reader does: the device's drop first, then the buffer that carries it.
                let drop = DroppedFrames(reason: .discontinuity, count: overrun, sequenceNumber: first - UInt64(overrun))
                output.handleDrop(drop, connection: connection)
            }
            let pcm = AudioPCMBuffer(
                format: format, frameCount: 480, data: Data(count: 960),
                discontinuity: overrun > 0 ? AudioDiscontinuity(reason: .overrun, lostFrames: overrun) : nil)
            let stamp = CaptureTime(nanoseconds: first * 1_000_000_000 / 48000)
            output.handleAudio(SampleBuffer(audio: pcm, timestamp: stamp, firstFrame: first), connection: connection)
        }
        feed(0)  // the delegate holds it; the stream buffers it
        #expect(collector.wait(audio: 1, timeout: 10))
        feed(480)  // waits for the delegate; dropped by the stream
        feed(1960, overrun: 1000)  // dropped by both, with the 1000 frames the device lost before it
        feed(2440)  // dropped by both
        #expect(await stream.next()?.sequenceNumber == 0)
        gate.signal()
        #expect(collector.wait(audio: 2, timeout: 10))
        collector.audioQueue.sync {}
        feed(2920)
        collector.audioQueue.sync {}
        // Each consumer's next buffer counts every frame missing before it, the device's too.
        let delegateGap = collector.audio.last?.sample.audioBuffer?.discontinuity
        #expect(collector.audio.map(\.sample.sequenceNumber) == [0, 480, 2920])
        #expect(delegateGap == AudioDiscontinuity(reason: .dropped, lostFrames: 2920 - 960))
        #expect(collector.drops.map(\.count).reduce(0, +) == 2920 - 960)
        let next = await stream.next()
        #expect(next?.sequenceNumber == 2920)
        #expect(next?.audioBuffer?.discontinuity == AudioDiscontinuity(reason: .dropped, lostFrames: 2920 - 480))
    }

    @Test func asyncSequenceEndsWhenTheSessionStops() async throws {
        let (mic, device) = Self.microphone("async")
        defer { VirtualMicrophone.uninstall(mic) }
        let session = CaptureSession()
        session.addInput(try CaptureDeviceInput(device: device))
        let output = CaptureAudioDataOutput()
        output.audioSettings = .init(framesPerBuffer: 240)
        session.addOutput(output)
        let stream = output.sampleBuffers()
        try session.start()
        var got: [SampleBuffer] = []
        for await s in stream {
            got.append(s)
            if got.count == 20 { session.stopRunning() }
        }
        // Ended by the stop, with every buffer in order. A consumer that got no CPU for longer
        // than the stream buffers (64 x 5 ms: other suites load the machine) loses buffers: the
        // next one then says how many frames are missing, and the count must add up.
        #expect(got.count >= 20)
        #expect(got.first?.audioBuffer?.format == AudioFormat(sampleRate: 48000, channelCount: 2, sampleFormat: .s16))
        for (a, b) in zip(got, got.dropFirst()) {
            if let gap = b.audioBuffer?.discontinuity {
                if let lost = gap.lostFrames {
                    #expect(b.sequenceNumber == a.sequenceNumber + 240 + UInt64(lost), "\(gap)")
                } else {
                    #expect(b.sequenceNumber > a.sequenceNumber)
                }
            } else {
                #expect(b.sequenceNumber == a.sequenceNumber + 240)
            }
        }
    }

    @Test(.timeLimit(.minutes(1))) func unplugStopsTheInputWithAnEvent() async throws {
        let (mic, device) = Self.microphone("unplug")
        defer { VirtualMicrophone.uninstall(mic) }
        let session = CaptureSession()
        session.addInput(try CaptureDeviceInput(device: device))
        let output = CaptureAudioDataOutput()
        output.audioSettings = .init(framesPerBuffer: 480)
        session.addOutput(output)
        let events = session.events()
        let stream = output.sampleBuffers()
        try session.start()
        var got: [SampleBuffer] = []
        var unpluggedAt: CaptureTime?
        for await s in stream {
            got.append(s)
            if got.count == 5 {
                mic.disconnect()
                unpluggedAt = .now()
            }
        }
        // The sequence ended because the device went away. A slow consumer may still drain
        // buffers captured before the unplug, but at most the one period in flight ends after it.
        let cut = try #require(unpluggedAt)
        let period: Int64 = 480 * 1_000_000_000 / 48000
        let late = got.filter { $0.presentationTimeStamp.nanoseconds &+ UInt64(period) > cut.nanoseconds }
        #expect(got.count >= 5)
        #expect(late.count <= 1, "\(late.count) of \(got.count) buffers end after the unplug")
        var sawDisconnect = false
        for await event in events {
            if case .deviceDisconnected(let d) = event {
                #expect(d === device)
                sawDisconnect = true
                break
            }
        }
        #expect(sawDisconnect)
        do {
            _ = try CaptureDeviceInput(device: device)
            Issue.record("an unplugged microphone opened")
        } catch { #expect(error.code == .noSuchDevice) }
        mic.reconnect()
        _ = try CaptureDeviceInput(device: device)
    }

    /// Seed 004 on the host: the virtual camera and microphone in one session, one delegate for
    /// both, told apart by connection; both streams stamped on the monotonic clock.
    @Test func cameraAndMicrophoneInOneSession() throws {
        let cam = VirtualCamera(name: "AV Camera", position: .front)
        VirtualCamera.install(cam)
        defer { VirtualCamera.uninstall(cam) }
        let (mic, micDevice) = Self.microphone("av")
        defer { VirtualMicrophone.uninstall(mic) }
        let camDevice = try #require(CaptureDevice.devices(for: .video).first { $0.uniqueID == cam.uniqueID })
        #expect(CaptureDevice.DiscoverySession(deviceTypes: [.microphone], mediaType: .audio).devices.contains { $0 === micDevice })
        let session = CaptureSession()
        let videoInput = try CaptureDeviceInput(device: camDevice)
        let audioInput = try CaptureDeviceInput(device: micDevice)
        #expect(session.canAddInput(videoInput))
        session.addInput(videoInput)
        #expect(session.canAddInput(audioInput))
        session.addInput(audioInput)
        let videoOutput = CaptureVideoDataOutput()
        let audioOutput = CaptureAudioDataOutput()
        let collector = AudioCollector()
        videoOutput.setSampleBufferDelegate(collector, queue: collector.videoQueue)
        audioOutput.setSampleBufferDelegate(collector, queue: collector.audioQueue)
        #expect(session.canAddOutput(videoOutput))
        session.addOutput(videoOutput)
        #expect(session.canAddOutput(audioOutput))
        session.addOutput(audioOutput)
        let videoConnection = try #require(videoOutput.connection(with: .video))
        let audioConnection = try #require(audioOutput.connection(with: .audio))
        #expect(audioOutput.connection(with: .video) == nil)
        let t0 = CaptureTime.now()
        try session.start()
        #expect(collector.wait(audio: 40, timeout: 5))
        session.stopRunning()
        let t1 = CaptureTime.now()
        let audio = collector.audio, video = collector.video
        #expect(video.count > 5)
        #expect(audio.allSatisfy { $0.connection === audioConnection })
        #expect(video.allSatisfy { $0.connection === videoConnection })
        // Both on the monotonic clock, inside the run.
        for a in audio { #expect(a.sample.presentationTimeStamp - t0 >= 0 && t1 - a.sample.presentationTimeStamp >= 0) }
        for v in video { #expect(v.timestamp - t0 >= 0 && t1 - v.timestamp >= 0) }
    }
}
