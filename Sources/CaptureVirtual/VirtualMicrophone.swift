import CaptureBackend
import CaptureSystem
import Foundation
import Synchronization

/// An in-process microphone that captures a steady sine tone, paced by the monotonic clock as
/// a sound card is: the audio counterpart of `VirtualCamera`.
///
/// Install it to list it among `CaptureDevice.devices(for: .audio)` (after the ALSA devices).
/// It behaves as a device does: a reader that falls behind by more than its ring loses audio
/// and gets a buffer marked `.overrun` with the frames lost. Thread-safe.
public final class VirtualMicrophone: Sendable {
    /// Shown as the device name; the unique ID is `virtual-audio:<name>`.
    public let name: String
    /// Tone frequency in Hz.
    public let frequency: Double
    /// Tone peak level in dBFS (e.g. -6).
    public let level: Double

    /// Makes a microphone; it is not listed until you `install` it.
    public init(name: String = "Virtual Microphone", frequency: Double = 1000, level: Double = -6) {
        precondition(frequency > 0 && level <= 0, "VirtualMicrophone needs a positive frequency and a level <= 0 dBFS")
        self.name = name
        self.frequency = frequency
        self.level = level
    }

    /// `virtual-audio:<name>`.
    public var uniqueID: String { "virtual-audio:\(name)" }

    /// What it accepts: every sample format, 8-192 kHz, 1-8 channels.
    public static let formatRange = AudioFormatRange(
        sampleFormats: AudioFormat.SampleFormat.preferred, sampleRates: 8000...192000,
        standardSampleRates: AudioFormatRange.commonSampleRates,
        channelCounts: 1...8)

    package var info: SourceInfo {
        SourceInfo(uniqueID: uniqueID, name: name, driver: "virtual", busInfo: "", path: uniqueID, position: .unspecified)
    }

    private static let registry = Locked<[VirtualMicrophone]>([])
    private let connected = Atomic<Bool>(true)

    /// Simulates an unplug: running captures fail with `.disconnected` within one period and
    /// opening fails with `.noSuchDevice` until `reconnect()`.
    public func disconnect() { connected.store(false, ordering: .releasing) }
    /// Plugs it back in; a session has to be started again.
    public func reconnect() { connected.store(true, ordering: .releasing) }
    /// Whether it is plugged in.
    public var isConnected: Bool { connected.load(ordering: .acquiring) }

    private let occupied = Atomic<Bool>(false)

    /// Simulates another process holding the microphone, as one holding an ALSA `hw:` device:
    /// opening it (an input, a session starting) fails with `.deviceBusy` until `release()`,
    /// so a session started with `startRunning()` runs interrupted
    /// (`.audioDeviceInUseByAnotherClient`). A capture already running goes on, as ALSA does
    /// not take an open device away.
    public func occupy() { occupied.store(true, ordering: .releasing) }
    /// Ends `occupy()`: the microphone opens again.
    public func release() { occupied.store(false, ordering: .releasing) }
    /// Whether `occupy()` holds it.
    public var isOccupied: Bool { occupied.load(ordering: .acquiring) }

    /// The installed microphones, in installation order.
    public static var installed: [VirtualMicrophone] { registry.withLock { $0 } }

    /// Makes `microphone` discoverable; one with the same unique ID is replaced.
    public static func install(_ microphone: VirtualMicrophone) {
        registry.withLock { list in
            guard !list.contains(where: { $0 === microphone }) else { return }
            list.removeAll { $0.uniqueID == microphone.uniqueID }
            list.append(microphone)
        }
    }

    /// Removes `microphone` from discovery. Running captures go on.
    public static func uninstall(_ microphone: VirtualMicrophone) {
        registry.withLock { $0.removeAll { $0 === microphone } }
    }

    package func makeSource() throws(CaptureError) -> VirtualAudioSource {
        guard isConnected else { throw CaptureError(.noSuchDevice, "the virtual microphone '\(name)' is disconnected") }
        guard !isOccupied else {
            throw CaptureError(.deviceBusy, "the virtual microphone '\(name)' is in use by another client: call release() to free it")
        }
        return VirtualAudioSource(microphone: self)
    }
}

/// The source behind a `VirtualMicrophone`: period k is ready at start + (k+1)·period/rate.
package final class VirtualAudioSource: AudioSource, @unchecked Sendable {
    package let microphone: VirtualMicrophone
    package var info: SourceInfo { microphone.info }

    private struct State {
        package var configuration: AudioConfiguration?
        package var running = false
        package var start = CaptureTime(nanoseconds: 0)
        /// Frames handed out or skipped since start.
        package var position: UInt64 = 0
        package var woken = false
    }
    private let state = Locked(State())
    private let signal = DispatchSemaphore(value: 0)

    package init(microphone: VirtualMicrophone) { self.microphone = microphone }

    /// Runs a protocol call; the virtual microphone's own conditions keep their words (`.described`).
    private func described<T: ~Copyable>(_ body: () throws(CaptureError) -> T) throws(BackendError) -> T {
        try BackendError.describing(device: info.path, kind: .audio, body)
    }

    package func formats() throws(BackendError) -> AudioFormatRange { VirtualMicrophone.formatRange }

    package var configuration: AudioConfiguration? { state.withLock { $0.configuration } }

    package func configure(_ request: AudioConfiguration) throws(BackendError) -> AudioConfiguration {
        try described { () throws(CaptureError) -> AudioConfiguration in
            guard request.format.isInterleaved, request.periodFrames > 0, request.bufferFrames >= request.periodFrames,
                let format = VirtualMicrophone.formatRange.closestFormat(to: request.format),
                format.sampleFormat == request.format.sampleFormat
            else { throw CaptureError(.invalidArgument, "bad audio configuration \(request)") }
            let applied = AudioConfiguration(format: format, periodFrames: request.periodFrames, bufferFrames: request.bufferFrames)
            state.withLock {
                $0.configuration = applied
                $0.running = false
            }
            return applied
        }
    }

    package func start() throws(BackendError) {
        if configuration == nil { _ = try configure(.standard) }
        state.withLock {
            $0.running = true
            $0.start = .now()
            $0.position = 0
            $0.woken = false
        }
    }

    package func stop() { state.withLock { $0.running = false } }

    package func wakeUp() {
        state.withLock { $0.woken = true }
        signal.signal()
    }

    package func nextBuffer(timeout: Duration) throws(BackendError) -> AudioEvent {
        try described { () throws(CaptureError) -> AudioEvent in
            let deadline = CaptureTime(nanoseconds: CaptureTime.now().nanoseconds &+ UInt64(max(0, Self.nanoseconds(timeout))))
            while true {
                let (config, due, woken): (AudioConfiguration?, CaptureTime, Bool) = state.withLock { st in
                    defer { st.woken = false }
                    guard st.running, let c = st.configuration else { return (nil, .now(), st.woken) }
                    let end = st.position + UInt64(c.periodFrames)
                    return (c, Self.time(st.start, end, c.format.sampleRate), st.woken)
                }
                if woken { return .interrupted }
                guard microphone.isConnected else {
                    throw CaptureError(.disconnected, "the virtual microphone '\(microphone.name)' was disconnected")
                }
                guard let config else {
                    throw CaptureError(.invalidState, "the virtual microphone is not running: call start() first")
                }
                let now = CaptureTime.now()
                if now - due >= 0 { return .buffer(produce(config, now: now)) }
                let wait = min(due - now, deadline - now)
                if wait <= 0 { return .timeout }
                _ = signal.wait(timeout: .now() + .nanoseconds(Int(wait)))
            }
        }
    }

    /// The next period, skipping what a ring of `bufferFrames` could not have held.
    private func produce(_ config: AudioConfiguration, now: CaptureTime) -> CapturedAudio {
        let rate = config.format.sampleRate
        let (first, lost): (UInt64, Int) = state.withLock { st in
            let elapsed = Int64(Double(now - st.start) * Double(rate) / 1e9)
            let available = elapsed - Int64(st.position)
            var lost = 0
            if available > Int64(config.bufferFrames) {
                // Overrun: as ALSA restarts, everything queued is gone; capture resumes now.
                lost = Int(available) - config.periodFrames
                st.position &+= UInt64(lost)
            }
            let first = st.position
            st.position &+= UInt64(config.periodFrames)
            return (first, lost)
        }
        let data = Self.tone(microphone, config.format, from: first, frames: config.periodFrames)
        let pcm = AudioPCMBuffer(
            format: config.format, frameCount: config.periodFrames, data: data,
            discontinuity: lost > 0 ? AudioDiscontinuity(reason: .overrun, lostFrames: lost) : nil)
        let start = state.withLock { $0.start }
        return CapturedAudio(buffer: pcm, timestamp: Self.time(start, first, rate), firstFrame: first)
    }

    package static func time(_ start: CaptureTime, _ frame: UInt64, _ rate: Int) -> CaptureTime {
        CaptureTime(nanoseconds: start.nanoseconds &+ UInt64(Double(frame) * 1e9 / Double(rate)))
    }

    package static func nanoseconds(_ d: Duration) -> Int64 {
        d.components.seconds * 1_000_000_000 + d.components.attoseconds / 1_000_000_000
    }

    /// `frames` frames of the tone starting at stream frame `from`, same on every channel.
    package static func tone(_ mic: VirtualMicrophone, _ format: AudioFormat, from: UInt64, frames: Int) -> Data {
        let amplitude = pow(10, mic.level / 20)
        let step = 2 * Double.pi * mic.frequency / Double(format.sampleRate)
        var data = Data(count: frames * format.bytesPerFrame)
        let channels = format.channelCount
        data.withUnsafeMutableBytes { raw in
            for i in 0..<frames {
                // Phase from the frame number itself: continuous across buffers, and a double
                // keeps it to nanoradians even after days.
                let v = amplitude * sin(step * Double(from &+ UInt64(i)))
                for c in 0..<channels {
                    let k = i * channels + c
                    switch format.sampleFormat {
                    case .s16:
                        raw.storeBytes(of: Int16((v * 32767).rounded()).littleEndian, toByteOffset: k * 2, as: Int16.self)
                    case .s32:
                        raw.storeBytes(of: Int32((v * 2_147_483_647).rounded()).littleEndian, toByteOffset: k * 4, as: Int32.self)
                    case .float32:
                        raw.storeBytes(of: Float(v).bitPattern.littleEndian, toByteOffset: k * 4, as: UInt32.self)
                    }
                }
            }
        }
        return data
    }
}
