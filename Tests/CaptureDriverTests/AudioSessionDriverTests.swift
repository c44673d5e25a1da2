// Audio through the object model in the VM: CaptureDevice discovery, CaptureDeviceInput errors,
// CaptureAudioDataOutput (delegate and async sequence), and audio with vivid video in one
// session (seed 004), and the interruption while another process (arecord) holds the device.
// Nested in AudioDriverTests, which is serialized: the audio tests never overlap (a loaded VM
// overruns sooner). Uses loopback subdevices 1, 2 and 4.
import CaptureALSA
import CaptureBackend
import CaptureTestSupport
import Foundation
import Testing
@testable import Capture

/// One object serving both data outputs, as seed 004's view controller does.
final class AVCollector: CaptureAudioDataOutputSampleBufferDelegate, CaptureVideoDataOutputSampleBufferDelegate,
    @unchecked Sendable
{
    struct Audio {
        var sample: SampleBuffer
        var arrival: CaptureTime
        var connection: CaptureConnection
    }
    struct Video {
        var timestamp: CaptureTime
        var arrival: CaptureTime
    }
    private let lock = NSLock()
    private var _audio: [Audio] = []
    private var _video: [Video] = []
    private var _drops: [DroppedFrames] = []
    /// When set, the delegate sleeps this long in the callback for audio buffer number `stallAt`.
    var stall: (at: Int, seconds: Double)?
    let audioQueue = DispatchQueue(label: "test.audio")
    let videoQueue = DispatchQueue(label: "test.video")

    var audio: [Audio] { lock.withLock { _audio } }
    var video: [Video] { lock.withLock { _video } }
    var drops: [DroppedFrames] { lock.withLock { _drops } }

    func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
        let now = CaptureTime.now()
        if sampleBuffer.mediaType == .audio {
            let n = lock.withLock {
                _audio.append(Audio(sample: sampleBuffer, arrival: now, connection: connection))
                return _audio.count
            }
            if let stall, stall.at == n { Thread.sleep(forTimeInterval: stall.seconds) }
        } else {
            // Keep only the time: holding the sample would keep its driver buffer.
            lock.withLock { _video.append(Video(timestamp: sampleBuffer.presentationTimeStamp, arrival: now)) }
        }
    }

    func captureOutput(_ output: CaptureOutput, didDrop drop: DroppedFrames, from connection: CaptureConnection) {
        lock.withLock { _drops.append(drop) }
    }

    func waitForAudio(_ count: Int, timeout: Double) -> Bool {
        let end = Date().addingTimeInterval(timeout)
        while Date() < end {
            if lock.withLock({ _audio.count }) >= count { return true }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return false
    }
}

extension AudioDriverTests {
    @Suite(.serialized) struct Session {
        static let playback = "hw:Loopback,0,1"
        static let capture = "hw:Loopback,1,1"
        static let format = CaptureAudioDataOutput.AudioSettings(sampleRate: 48000, channelCount: 2, sampleFormat: .s16)

        @Test func audioDevicesAreCaptureDevices() throws {
            let devices = CaptureDevice.devices(for: .audio)
            let loop = try #require(devices.first { $0.uniqueID == "hw:CARD=Loopback,DEV=1" }, "\(devices.map(\.uniqueID))")
            #expect(loop.mediaType == .audio)
            #expect(loop.deviceType == .microphone)
            #expect(loop.hasMediaType(.audio) && !loop.hasMediaType(.video))
            let formats = try #require(loop.audioFormats)
            #expect(formats.supports(AudioFormat(sampleRate: 48000, channelCount: 2, sampleFormat: .s16)))
            #expect(CaptureDevice.default(for: .audio) === devices.first)
            // The same device is the same object, whichever way it is found.
            #expect(CaptureDevice.devices(for: .audio).first { $0.uniqueID == loop.uniqueID } === loop)
            #expect(CaptureDevice.device(withUniqueID: loop.path) === loop)
            #expect(try CaptureDevice.audioDevice(named: loop.path) === loop)
            let plain = try CaptureDevice.audioDevice(named: Self.capture)
            #expect(plain.path == Self.capture && plain.mediaType == .audio)
        }

        @Test func missingAndBusyDevicesGiveTypedErrors() throws {
            do {
                _ = try CaptureDevice.audioDevice(named: "hw:CARD=NoSuchCard,DEV=0")
                Issue.record("found a missing card")
            } catch { #expect(error.code == .noSuchDevice, "\(error)") }
            let device = try CaptureDevice.audioDevice(named: "hw:Loopback,1,2")
            do {
                let holder = try ALSADiscovery.open("hw:Loopback,1,2")
                defer { withExtendedLifetime(holder) {} }
                do {
                    _ = try CaptureDeviceInput(device: device)
                    Issue.record("an input on a busy subdevice opened")
                } catch { #expect(error.code == .deviceBusy, "\(error)") }
                do {
                    _ = try CaptureDevice.audioDevice(named: "hw:Loopback,1,2")
                    Issue.record("looked up a busy subdevice by name without an error")
                } catch { #expect(error.code == .deviceBusy, "\(error)") }
            }
            // Free again (the holder is closed): the input opens.
            _ = try CaptureDeviceInput(device: device)
        }

        @Test func audioDataOutputDeliversTheSine() throws {
            let player = try TonePlayer(device: Self.playback, frequency: 1000, decibels: -6)
            defer { player.stop() }
            let session = CaptureSession()
            let input = try CaptureDeviceInput(device: try CaptureDevice.audioDevice(named: Self.capture))
            let output = CaptureAudioDataOutput()
            output.audioSettings = Self.format
            let collector = AVCollector()
            output.setSampleBufferDelegate(collector, queue: collector.audioQueue)
            #expect(session.canAddInput(input))
            session.addInput(input)
            #expect(session.canAddOutput(output))
            session.addOutput(output)
            try session.start()
            #expect(output.audioFormat == AudioFormat(sampleRate: 48000, channelCount: 2, sampleFormat: .s16))
            #expect(collector.waitForAudio(120, timeout: 20))
            let connection = try #require(output.connection(with: .audio))
            let levels = connection.audioChannels
            session.stopRunning()
            #expect(output.audioFormat == nil)

            let got = collector.audio
            #expect(got.allSatisfy { $0.connection === connection })
            // Every gap in the frame numbers is marked on the buffer and reported as a drop of the
            // same size; AudioDriverTests checks strictly that none occurs. (A VM starved by its
            // host for longer than the 1 s ring does overrun; that must never be silent.)
            var runs: [[Float]] = [[]]
            var marked: [Int] = []
            for (i, item) in got.enumerated() {
                let pcm = try #require(item.sample.audioBuffer)
                if i > 0 {
                    let prev = got[i - 1].sample
                    let skipped = UInt64(pcm.discontinuity?.lostFrames ?? 0)
                    #expect(item.sample.sequenceNumber == prev.sequenceNumber + UInt64(prev.audioBuffer!.frameCount) + skipped)
                    #expect(item.sample.presentationTimeStamp - prev.presentationTimeStamp > 0)
                }
                if let d = pcm.discontinuity {
                    #expect(d.reason == .overrun)
                    marked.append(d.lostFrames ?? -1)
                    runs.append([])
                }
                runs[runs.count - 1] += pcm.floatSamples(channel: 0)
            }
            #expect(collector.drops.map(\.count) == marked, "drops \(collector.drops), marks \(marked)")
            #expect(collector.drops.allSatisfy { $0.reason == .discontinuity })
            if !marked.isEmpty { print("audio: session capture overran on this machine: \(marked) frames lost") }
            let samples = try #require(runs.max { $0.count < $1.count })
            let start = try #require(samples.firstIndex { abs($0) > 0.01 })
            let signal = Array(samples[(start + 480)...])
            #expect(signal.count > 48000, "the longest run without a break is \(signal.count) frames")
            let freq = estimateFrequency(signal, rate: 48000)
            #expect(abs(freq - 1000) < 10, "\(freq) Hz")
            #expect(player.underruns.load(ordering: .relaxed) == 0, "the test's player fell behind: its gaps are not capture gaps")
            #expect(sineBreaks(signal, frequency: 1000, rate: 48000, tolerance: 4.0 / 32768).isEmpty)
            #expect(levels.count == 2)
            for l in levels {
                #expect(abs(l.peakHoldLevel - -6) < 1, "\(l)")
                #expect(abs(l.averagePowerLevel - -9.03) < 1, "\(l)")
            }
        }

        @Test func stallingDelegateSeesAMarkedGapAndCaptureGoesOn() throws {
            let session = CaptureSession()
            let input = try CaptureDeviceInput(device: try CaptureDevice.audioDevice(named: Self.capture))
            let output = CaptureAudioDataOutput()
            output.audioSettings = Self.format
            output.maximumPendingDuration = .milliseconds(500)
            let collector = AVCollector()
            collector.stall = (at: 5, seconds: 1.5)
            output.setSampleBufferDelegate(collector, queue: collector.audioQueue)
            session.addInput(input)
            session.addOutput(output)
            try session.start()
            defer { session.stopRunning() }
            #expect(collector.waitForAudio(5 + 40 + 30, timeout: 30))
            let got = collector.audio
            let marks = got.enumerated().filter { $0.element.sample.audioBuffer?.discontinuity?.reason == .dropped }
            let (index, marked) = try #require(marks.first, "no buffer was marked after a 1.5 s stall")
            let d = try #require(marked.sample.audioBuffer?.discontinuity)
            let lost = try #require(d.lostFrames)
            print("audio: delegate stalled 1.5 s with 0.5 s allowed: \(d)")
            // Stalled 1.5 s with 0.5 s allowed to wait: about 1 s (48000 frames) dropped.
            #expect(lost > 48000 / 2 && lost < 48000 * 3 / 2, "lost \(lost)")
            // Every gap in the frame numbers is a marked one, of the size it says.
            for (a, b) in zip(got, got.dropFirst()) {
                let skipped = UInt64(b.sample.audioBuffer?.discontinuity?.lostFrames ?? 0)
                #expect(b.sample.sequenceNumber == a.sample.sequenceNumber + UInt64(a.sample.audioBuffer!.frameCount) + skipped)
            }
            #expect(got.count - index > 20, "capture did not go on after the stall")
            #expect(collector.drops.contains { $0.reason == .frameWasLate })
            #expect(output.statistics.droppedFrames >= lost)
        }

        @Test func asyncSequenceYieldsContiguousBuffers() async throws {
            let session = CaptureSession()
            let input = try CaptureDeviceInput(device: try CaptureDevice.audioDevice(named: Self.capture))
            let output = CaptureAudioDataOutput()
            output.audioSettings = CaptureAudioDataOutput.AudioSettings(
                sampleRate: 44100, channelCount: 1, sampleFormat: .s16,
                framesPerBuffer: 441)
            session.addInput(input)
            session.addOutput(output)
            let stream = output.sampleBuffers()
            try session.start()
            defer { session.stopRunning() }
            var got: [SampleBuffer] = []
            for await s in stream {
                got.append(s)
                if got.count == 30 { break }
            }
            #expect(got.count == 30)
            let f = try #require(got.first?.audioBuffer?.format)
            #expect(f.sampleRate == 44100 && f.channelCount == 1)
            for (a, b) in zip(got, got.dropFirst()) {
                #expect(b.sequenceNumber == a.sequenceNumber + UInt64(a.audioBuffer!.frameCount))
            }
        }

        /// Seed 004: a camera and a microphone in one session, one delegate for both. Over 10 s the
        /// two streams' time stamps stay within one video frame interval of each other.
        @Test func videoAndAudioShareOneClock() throws {
            let cams = CaptureDevice.devices(for: .video).filter { $0.modelID == "vivid" }
            let camera = try #require(cams.last, "no vivid camera")
            let player = try TonePlayer(device: Self.playback, frequency: 1000, decibels: -6)
            defer { player.stop() }
            let session = CaptureSession()
            let videoInput = try CaptureDeviceInput(device: camera)
            let audioInput = try CaptureDeviceInput(device: try CaptureDevice.audioDevice(named: Self.capture))
            #expect(session.canAddInput(videoInput))
            session.addInput(videoInput)
            #expect(session.canAddInput(audioInput))
            session.addInput(audioInput)
            let videoOutput = CaptureVideoDataOutput()
            let audioOutput = CaptureAudioDataOutput()
            audioOutput.audioSettings = Self.format
            let collector = AVCollector()
            videoOutput.setSampleBufferDelegate(collector, queue: collector.videoQueue)
            audioOutput.setSampleBufferDelegate(collector, queue: collector.audioQueue)
            #expect(session.canAddOutput(videoOutput))
            session.addOutput(videoOutput)
            #expect(session.canAddOutput(audioOutput))
            session.addOutput(audioOutput)
            session.sessionPreset = .low
            let videoConnection = try #require(videoOutput.connection(with: .video))
            let audioConnection = try #require(audioOutput.connection(with: .audio))
            #expect(videoConnection !== audioConnection)
            // 30 fps: a 33 ms frame interval to stay within.
            do {
                try camera.lockForConfiguration()
                defer { camera.unlockForConfiguration() }
                try camera.setActiveVideoMinFrameDuration(FrameInterval(framesPerSecond: 30))
            } catch {
                Issue.record("setting 30 fps before start: \(error)")
            }
            try session.start()
            Thread.sleep(forTimeInterval: 0.5)
            // Measured from here: after the rate change has settled.
            let from = CaptureTime.now()
            Thread.sleep(forTimeInterval: 10.5)
            let interval = camera.activeVideoMinFrameDuration?.seconds ?? (1.0 / 30)
            session.stopRunning()

            let video = collector.video.filter { $0.arrival - from >= 0 }
            let audio = collector.audio.filter { $0.arrival - from >= 0 }
            #expect(video.count > Int(5 / interval), "\(video.count) frames in 10 s")
            #expect(audio.allSatisfy { $0.connection === audioConnection })
            let first = try #require(audio.first), last = try #require(audio.last)
            let audioSeconds = Double(last.sample.sequenceNumber - first.sample.sequenceNumber) / 48000
            #expect(audioSeconds > 9, "\(audioSeconds) s of audio in 10 s")
            // Latency of each item: arrival at the delegate minus the capture time of its last
            // sample. Its floor (the fastest delivery) is the stamp's offset from the clock the
            // delegate reads, free of queueing delays a loaded machine adds. On one clock both
            // floors are within a frame interval of zero (vivid stamps a frame with the ideal end of
            // its period, handed over about one interval early, so its floor is slightly negative),
            // and the offset between the streams stays the same from the first to the last seconds.
            let videoLatency = video.map { (at: $0.arrival, latency: Double($0.arrival - $0.timestamp) / 1e9) }
            let audioLatency = audio.map { a in
                (at: a.arrival, latency: Double(a.arrival - a.sample.presentationTimeStamp) / 1e9 - a.sample.audioBuffer!.duration)
            }
            // No stamp lies far in the future or the past.
            #expect(videoLatency.allSatisfy { $0.latency > -2 * interval && $0.latency < 1.5 }, "\(videoLatency.map(\.latency).min()!)")
            #expect(audioLatency.allSatisfy { $0.latency > -2 * interval && $0.latency < 1.5 }, "\(audioLatency.map(\.latency).min()!)")
            let t0 = video[0].arrival
            func window(_ x: [(at: CaptureTime, latency: Double)], _ from: Double, _ to: Double) -> [Double] {
                x.filter {
                    let t = Double($0.at - t0) / 1e9; return t >= from && t < to
                }.map(\.latency).sorted()
            }
            func pct(_ x: [(at: CaptureTime, latency: Double)]) -> String {
                let s = x.map(\.latency).sorted()
                return [0, 0.1, 0.5, 0.9].map { String(format: "%.1f", s[Int($0 * Double(s.count - 1))] * 1000) }.joined(separator: "/")
                    + " ms"
            }
            let videoFloor = try #require(window(videoLatency, 0, 11).first), audioFloor = try #require(window(audioLatency, 0, 11).first)
            let early = try #require(window(audioLatency, 0, 3).first) - (try #require(window(videoLatency, 0, 3).first))
            let late = try #require(window(audioLatency, 7, 11).first) - (try #require(window(videoLatency, 7, 11).first))
            print(
                "audio+video: \(video.count) frames, \(audio.count) audio buffers (\(audioSeconds) s), interval \(interval) s; latency min/p10/median/p90: video \(pct(videoLatency)), audio \(pct(audioLatency)); audio - video floor: first 3 s \(early) s, last 3 s \(late) s"
            )
            #expect(abs(videoFloor) < interval, "video stamps are \(videoFloor) s from the clock at delivery")
            #expect(abs(audioFloor) < interval, "audio stamps are \(audioFloor) s from the clock at delivery")
            #expect(abs(late - early) < interval, "the streams drift apart: \(early) s then \(late) s")
        }

        /// Another process (arecord) holds the ALSA device when the session starts: as a camera
        /// another process streams from, the session runs interrupted
        /// (audioDeviceInUseByAnotherClient, no runtime error) and starts the microphone by itself
        /// once the process exits.
        @Test(.timeLimit(.minutes(2))) func anotherProcessHoldingTheDeviceInterruptsUntilItExits() throws {
            let name = "hw:Loopback,1,4"
            let device = try CaptureDevice.audioDevice(named: name)
            let session = CaptureSession()
            let events = EventLog(session)
            session.addInput(try CaptureDeviceInput(device: device))
            let output = CaptureAudioDataOutput()
            output.audioSettings = Self.format
            let collector = AVCollector()
            output.setSampleBufferDelegate(collector, queue: collector.audioQueue)
            session.addOutput(output)
            // (Killed when it goes, if the test ends first.)
            let child = try RunningProcess(
                URL(fileURLWithPath: "/usr/bin/arecord"),
                ["-q", "-D", name, "-f", "S16_LE", "-r", "48000", "-c", "2", "-t", "raw", "/dev/null"])
            // The substream's status file says when arecord has the device open.
            let status = "/proc/asound/Loopback/pcm1c/sub4/status"
            let end = Date().addingTimeInterval(20)
            while Date() < end, child.process.isRunning,
                (try? String(contentsOfFile: status, encoding: .utf8))?.hasPrefix("closed") ?? true
            {
                Thread.sleep(forTimeInterval: 0.05)
            }
            try #require(child.process.isRunning, "arecord exited: \(child.output.status) \(child.stderr)")
            try #require(
                (try? String(contentsOfFile: status, encoding: .utf8)).map { !$0.hasPrefix("closed") } == true,
                "arecord did not open \(name)")
            session.startRunning()
            defer { session.stopRunning() }
            #expect(session.isRunning)
            let began = { (e: CaptureSession.Event) -> Bool in
                if case .wasInterrupted(let d, .audioDeviceInUseByAnotherClient) = e { d === device } else { false }
            }
            #expect(events.wait(timeout: 10, began), "events: \(events.events)")
            #expect(session.isInterrupted)
            Thread.sleep(forTimeInterval: 1)
            #expect(collector.audio.isEmpty)
            #expect(!events.events.contains { if case .runtimeError = $0 { true } else { false } }, "\(events.events)")
            child.signal(SIGKILL)
            _ = child.exitStatus()
            let ended = events.wait(timeout: 20) { if case .interruptionEnded(let d) = $0 { d === device } else { false } }
            #expect(ended, "events: \(events.events)")
            #expect(!session.isInterrupted)
            #expect(collector.waitForAudio(10, timeout: 20), "no audio after the interruption ended: \(events.events)")
            #expect(events.events.filter(began).count == 1)
            #expect(!events.events.contains { if case .runtimeError = $0 { true } else { false } }, "\(events.events)")
            print("audio interruption: \(events.events.map(\.description))")
        }
    }
}
