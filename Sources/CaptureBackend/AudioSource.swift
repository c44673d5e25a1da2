// The internal contract between the object model and audio backends (ALSA), the audio
// counterpart of `VideoSource` in Backend/VideoSource.swift. Nothing here but the format range
// is public.

/// What an audio device accepts: sample formats, a rate range and a channel range.
///
/// ALSA devices state ranges; `standardSampleRates` lists the common rates inside the range
/// that the device actually accepted when asked.
public struct AudioFormatRange: Sendable, Hashable, CustomStringConvertible {
    /// The sample formats the library can capture from this device, preferred first.
    public var sampleFormats: [AudioFormat.SampleFormat]
    /// The lowest and highest sample rate, in Hz.
    public var sampleRates: ClosedRange<Int>
    /// The common rates (8000 ... 192000 Hz) the device accepts.
    public var standardSampleRates: [Int]
    /// The fewest and most channels.
    public var channelCounts: ClosedRange<Int>

    public init(
        sampleFormats: [AudioFormat.SampleFormat], sampleRates: ClosedRange<Int>, standardSampleRates: [Int],
        channelCounts: ClosedRange<Int>
    ) {
        self.sampleFormats = sampleFormats
        self.sampleRates = sampleRates
        self.standardSampleRates = standardSampleRates
        self.channelCounts = channelCounts
    }

    /// The rates probed for `standardSampleRates`.
    public static let commonSampleRates = [8000, 11025, 16000, 22050, 32000, 44100, 48000, 88200, 96000, 176400, 192000]

    /// Whether the device accepts `format` exactly (interleaved only).
    public func supports(_ format: AudioFormat) -> Bool {
        format.isInterleaved && sampleFormats.contains(format.sampleFormat) && sampleRates.contains(format.sampleRate)
            && channelCounts.contains(format.channelCount)
    }

    /// The format closest to `request` that the device accepts: the requested sample format if
    /// offered, else the first offered; the requested rate if in range, else the nearest standard
    /// rate (or the range's nearer end); the channel count clamped to the range. Nil when the
    /// device offers no sample format the library can read.
    public func closestFormat(to request: AudioFormat) -> AudioFormat? {
        guard let sampleFormat = sampleFormats.contains(request.sampleFormat) ? request.sampleFormat : sampleFormats.first
        else { return nil }
        var rate = request.sampleRate
        if !sampleRates.contains(rate) {
            if let nearest = standardSampleRates.min(by: { abs($0 - rate) < abs($1 - rate) }) {
                rate = nearest
            } else {
                rate = min(max(rate, sampleRates.lowerBound), sampleRates.upperBound)
            }
        }
        let channels = min(max(request.channelCount, channelCounts.lowerBound), channelCounts.upperBound)
        return AudioFormat(sampleRate: rate, channelCount: channels, sampleFormat: sampleFormat)
    }

    public var description: String {
        let rates =
            standardSampleRates.isEmpty
            ? "\(sampleRates.lowerBound)-\(sampleRates.upperBound) Hz"
            : standardSampleRates.map(String.init).joined(separator: "/") + " Hz"
        let ch =
            channelCounts.lowerBound == channelCounts.upperBound
            ? "\(channelCounts.lowerBound)"
            : "\(channelCounts.lowerBound)-\(channelCounts.upperBound)"
        return "\(sampleFormats.map(\.rawValue).joined(separator: "/")), \(rates), \(ch) ch"
    }
}

/// A capture configuration: the format plus ALSA's period (the block read at once) and ring
/// buffer sizes, in frames.
package struct AudioConfiguration: Sendable, Hashable, CustomStringConvertible {
    package var format: AudioFormat
    package var periodFrames: Int
    package var bufferFrames: Int

    /// 48 kHz stereo 16-bit, 1024-frame periods (21 ms), a ring of about one second: a large
    /// ring costs no latency (each period is read as soon as it is complete) and rides out a
    /// reader that is descheduled for a while on a loaded machine.
    package static let standard = AudioConfiguration(
        format: AudioFormat(sampleRate: 48000, channelCount: 2, sampleFormat: .s16), periodFrames: 1024, bufferFrames: 49152)

    package var description: String { "\(format), period \(periodFrames), buffer \(bufferFrames) frames" }

    package init(format: AudioFormat, periodFrames: Int, bufferFrames: Int) {
        self.format = format
        self.periodFrames = periodFrames
        self.bufferFrames = bufferFrames
    }
}

/// One block of audio from a source.
package struct CapturedAudio: Sendable {
    package var buffer: AudioPCMBuffer
    /// When the first frame was captured, on the monotonic clock.
    package var timestamp: CaptureTime
    /// Index of the first frame in the stream since `start()`, counting lost frames where known.
    package var firstFrame: UInt64

    package init(buffer: AudioPCMBuffer, timestamp: CaptureTime, firstFrame: UInt64) {
        self.buffer = buffer
        self.timestamp = timestamp
        self.firstFrame = firstFrame
    }
}

/// What one wait for audio produced.
package enum AudioEvent: Sendable {
    case buffer(CapturedAudio)
    /// Nothing arrived within the timeout.
    case timeout
    /// `wakeUp()` was called.
    case interrupted
}

/// An audio device found by discovery.
package struct AudioDeviceInfo: Sendable, Hashable {
    /// Identity as the object model uses it: `uniqueID` is a stable ALSA name
    /// (`hw:CARD=Loopback,DEV=1`, or `default`), `path` the plain one (`hw:1,1`).
    package var info: SourceInfo
    /// ALSA card and device numbers; nil for `default`.
    package var card: Int?
    package var device: Int?
    /// Capture subdevices (streams that can be open at once).
    package var subdeviceCount: Int
    /// What the device accepts; nil when it could not be opened to ask (busy).
    package var formats: AudioFormatRange?

    package init(info: SourceInfo, card: Int?, device: Int?, subdeviceCount: Int, formats: AudioFormatRange?) {
        self.info = info
        self.card = card
        self.device = device
        self.subdeviceCount = subdeviceCount
        self.formats = formats
    }
}

/// An opened audio capture device. Implementation: `ALSAAudioSource`.
///
/// Threading: `configure`, `start` and `stop` come from the session's configuration lock (or
/// one owner); `nextBuffer` from the one audio thread; `wakeUp` from any thread. Stop the reader
/// (wake it and wait for it) before calling `stop`.
package protocol AudioSource: AnyObject, Sendable {
    var info: SourceInfo { get }
    /// What the device accepts.
    func formats() throws(BackendError) -> AudioFormatRange
    /// Sets format and buffer sizes; returns what the device applied (rate, channel count and
    /// sizes may differ from the request; the sample format never does).
    func configure(_ request: AudioConfiguration) throws(BackendError) -> AudioConfiguration
    /// The configuration in use; nil before `configure`.
    var configuration: AudioConfiguration? { get }
    /// Starts capturing (configures `.standard` first if `configure` was not called).
    func start() throws(BackendError)
    /// Waits up to `timeout` for the next period. Recovers overruns by itself and marks the next
    /// buffer with a discontinuity. Throws when the device went away (ALSA: ENODEV).
    func nextBuffer(timeout: Duration) throws(BackendError) -> AudioEvent
    /// Makes a waiting `nextBuffer` return `.interrupted` soon. Any thread.
    func wakeUp()
    /// Stops capturing; `start` may be called again.
    func stop()
}
