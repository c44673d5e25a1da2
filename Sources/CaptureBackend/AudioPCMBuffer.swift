import Foundation

/// The format of captured audio.
public struct AudioFormat: Sendable, Hashable, CustomStringConvertible {
    /// How one sample is stored.
    public enum SampleFormat: String, Sendable, Hashable, CaseIterable {
        /// Signed 16-bit little-endian integers.
        case s16
        /// Signed 32-bit little-endian integers.
        case s32
        /// 32-bit little-endian floats in -1...1.
        case float32
        /// Bytes per sample.
        public var bytesPerSample: Int {
            switch self {
            case .s16: 2
            case .s32, .float32: 4
            }
        }
    }
    /// Frames per second.
    public var sampleRate: Int
    /// Samples per frame.
    public var channelCount: Int
    public var sampleFormat: SampleFormat
    /// Channels alternate sample by sample (ALSA interleaved access).
    public var isInterleaved: Bool
    public init(sampleRate: Int, channelCount: Int, sampleFormat: SampleFormat, isInterleaved: Bool = true) {
        self.sampleRate = sampleRate
        self.channelCount = channelCount
        self.sampleFormat = sampleFormat
        self.isInterleaved = isInterleaved
    }
    /// Bytes per frame (one sample of every channel).
    public var bytesPerFrame: Int { sampleFormat.bytesPerSample * channelCount }
    public var description: String {
        "\(sampleRate) Hz, \(channelCount) ch, \(sampleFormat.rawValue)\(isInterleaved ? "" : " planar")"
    }
}

/// The level of one channel over one buffer, as AVFoundation's `AVCaptureAudioChannel` reports it.
///
/// Both values are in dBFS: 0 is a full-scale sample, a full-scale sine has an average power of
/// about -3 dB, and silence reads as `AudioChannelLevel.silence` (-160 dB) rather than -infinity.
public struct AudioChannelLevel: Sendable, Hashable, CustomStringConvertible {
    /// The RMS level, 20·log10(rms), in dBFS.
    public var averagePowerLevel: Float
    /// The largest absolute sample, 20·log10(peak), in dBFS.
    public var peakHoldLevel: Float
    public init(averagePowerLevel: Float, peakHoldLevel: Float) {
        self.averagePowerLevel = averagePowerLevel
        self.peakHoldLevel = peakHoldLevel
    }
    /// The floor reported for digital silence, in dBFS.
    public static let silence: Float = -160

    /// Converts a linear amplitude (1 is full scale) to dBFS, floored at `silence`.
    public static func decibels(_ amplitude: Double) -> Float {
        guard amplitude > 0 else { return silence }
        return max(silence, Float(20 * log10(amplitude)))
    }
    public var description: String {
        String(format: "avg %.1f dB, peak %.1f dB", averagePowerLevel, peakHoldLevel)
    }
}

/// A break in the captured audio: frames between the previous buffer and this one are missing.
public struct AudioDiscontinuity: Sendable, Hashable, CustomStringConvertible {
    public enum Reason: String, Sendable, Hashable {
        /// The device's buffer overflowed before it was read (ALSA overrun, `EPIPE`); the
        /// stream was restarted.
        case overrun
        /// The system suspended the device (`ESTRPIPE`); the stream was resumed or restarted.
        case suspended
        /// The output dropped buffers because its consumer (delegate or async sequence) did not
        /// keep up.
        case dropped
    }
    public var reason: Reason
    /// How many frames are missing before this buffer, when it is known.
    public var lostFrames: Int?
    public init(reason: Reason, lostFrames: Int?) {
        self.reason = reason
        self.lostFrames = lostFrames
    }
    public var description: String {
        "\(reason.rawValue), " + (lostFrames.map { "\($0) frames lost" } ?? "lost frames unknown")
    }
}

/// A block of captured PCM audio: `frameCount` frames in `format`, owned by this object.
/// Immutable; safe to pass between threads.
public final class AudioPCMBuffer: @unchecked Sendable {
    public let format: AudioFormat
    /// Frames (samples per channel) in this buffer.
    public let frameCount: Int
    /// The interleaved sample bytes.
    public let data: Data
    /// Set when frames are missing between the previous buffer and this one.
    public let discontinuity: AudioDiscontinuity?

    package init(format: AudioFormat, frameCount: Int, data: Data, discontinuity: AudioDiscontinuity? = nil) {
        self.format = format
        self.frameCount = frameCount
        self.data = data
        self.discontinuity = discontinuity
    }

    /// The same samples with another discontinuity mark (the bytes are shared, not copied).
    package func withDiscontinuity(_ d: AudioDiscontinuity?) -> AudioPCMBuffer {
        AudioPCMBuffer(format: format, frameCount: frameCount, data: data, discontinuity: d)
    }

    /// How long the buffer plays, in seconds.
    public var duration: Double { format.sampleRate > 0 ? Double(frameCount) / Double(format.sampleRate) : 0 }

    /// Calls `body` with the raw interleaved sample bytes (no copy). Valid only inside `body`.
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try data.withUnsafeBytes(body)
    }

    /// The interleaved samples when the format is `.s16`; nil otherwise.
    public var int16Samples: [Int16]? {
        guard format.sampleFormat == .s16 else { return nil }
        return samples(as: Int16.self)
    }

    /// The interleaved samples when the format is `.s32`; nil otherwise.
    public var int32Samples: [Int32]? {
        guard format.sampleFormat == .s32 else { return nil }
        return samples(as: Int32.self)
    }

    /// The samples of one channel as floats in -1...1, whatever the sample format. Empty for a
    /// channel the buffer does not have.
    public func floatSamples(channel: Int) -> [Float] {
        let channels = format.channelCount
        guard channel >= 0, channel < channels else { return [] }
        let n = min(frameCount, data.count / max(1, format.bytesPerFrame))
        var out = [Float](repeating: 0, count: n)
        data.withUnsafeBytes { raw in
            // Interleaved: sample i of channel c at i*channels + c; planar: c*frames + i.
            let index: (Int) -> Int = format.isInterleaved ? { $0 * channels + channel } : { channel * n + $0 }
            switch format.sampleFormat {
            case .s16:
                for i in 0..<n {
                    out[i] = Float(Int16(littleEndian: raw.loadUnaligned(fromByteOffset: index(i) * 2, as: Int16.self))) / 32768
                }
            case .s32:
                for i in 0..<n {
                    out[i] = Float(
                        Double(Int32(littleEndian: raw.loadUnaligned(fromByteOffset: index(i) * 4, as: Int32.self))) / 2_147_483_648)
                }
            case .float32:
                for i in 0..<n {
                    out[i] = Float(bitPattern: UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: index(i) * 4, as: UInt32.self)))
                }
            }
        }
        return out
    }

    /// Peak and RMS level of every channel over this buffer, in dBFS. Computed on each call.
    public var channelLevels: [AudioChannelLevel] {
        AudioLevelMeter.levels(of: self)
    }

    private func samples<T: FixedWidthInteger>(as: T.Type) -> [T] {
        let count = min(frameCount * format.channelCount, data.count / MemoryLayout<T>.size)
        return data.withUnsafeBytes { raw in
            (0..<count).map { T(littleEndian: raw.loadUnaligned(fromByteOffset: $0 * MemoryLayout<T>.size, as: T.self)) }
        }
    }
}

/// Peak and RMS per channel, computed straight from the sample bytes. Runs on the audio thread
/// for every buffer, so it reads typed samples in one plain loop per format.
package enum AudioLevelMeter {
    package static func levels(of buffer: AudioPCMBuffer) -> [AudioChannelLevel] {
        let format = buffer.format
        let channels = format.channelCount
        guard channels > 0 else { return [] }
        let frames = min(buffer.frameCount, buffer.data.count / max(1, format.bytesPerFrame))
        var peak = [Double](repeating: 0, count: channels)
        var sumSquares = [Double](repeating: 0, count: channels)
        buffer.data.withUnsafeBytes { raw in
            switch format.sampleFormat {
            case .s16:
                accumulate(raw, Int16.self, scale: 1.0 / 32768, format, frames, &peak, &sumSquares) { Double(Int16(littleEndian: $0)) }
            case .s32:
                accumulate(raw, Int32.self, scale: 1.0 / 2_147_483_648, format, frames, &peak, &sumSquares) {
                    Double(Int32(littleEndian: $0))
                }
            case .float32:
                accumulate(raw, UInt32.self, scale: 1, format, frames, &peak, &sumSquares) {
                    Double(Float(bitPattern: UInt32(littleEndian: $0)))
                }
            }
        }
        return (0..<channels).map { c in
            let rms = frames > 0 ? (sumSquares[c] / Double(frames)).squareRoot() : 0
            return AudioChannelLevel(
                averagePowerLevel: AudioChannelLevel.decibels(rms),
                peakHoldLevel: AudioChannelLevel.decibels(peak[c]))
        }
    }

    /// Sums per channel with integer peaks and squares kept in the sample's own units, scaled once.
    @inline(__always)
    private static func accumulate<T: FixedWidthInteger>(
        _ raw: UnsafeRawBufferPointer, _: T.Type, scale: Double, _ format: AudioFormat, _ frames: Int,
        _ peak: inout [Double], _ sumSquares: inout [Double], _ value: (T) -> Double
    ) {
        let channels = format.channelCount
        guard let base = raw.baseAddress, frames > 0 else { return }
        // Data's storage is malloc'ed, so aligned for any sample type; fall back to copying if not.
        let aligned = Int(bitPattern: base) % MemoryLayout<T>.alignment == 0
        let copy: [T] =
            aligned ? [] : (0..<(frames * channels)).map { raw.loadUnaligned(fromByteOffset: $0 * MemoryLayout<T>.size, as: T.self) }
        func run(_ samples: UnsafeBufferPointer<T>) {
            for c in 0..<channels {
                var p = 0.0, sq = 0.0
                if format.isInterleaved {
                    var k = c
                    while k < frames * channels {
                        let v = value(samples[k])
                        p = max(p, abs(v))
                        sq += v * v
                        k += channels
                    }
                } else {
                    for k in (c * frames)..<((c + 1) * frames) {
                        let v = value(samples[k])
                        p = max(p, abs(v))
                        sq += v * v
                    }
                }
                peak[c] = p * scale
                sumSquares[c] = sq * scale * scale
            }
        }
        if aligned {
            run(UnsafeBufferPointer(start: base.assumingMemoryBound(to: T.self), count: frames * channels))
        } else {
            copy.withUnsafeBufferPointer { run($0) }
        }
    }
}

extension AudioFormat.SampleFormat {
    /// Sample formats in the order the library prefers them (the ALSA reader and the virtual
    /// microphone offer them in this order).
    package static let preferred: [AudioFormat.SampleFormat] = [.s16, .float32, .s32]
}
