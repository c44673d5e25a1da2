import CaptureImaging
import CaptureBackend
import Foundation

/// A range of frame rates a format supports, as AVFoundation's `AVFrameRateRange`.
///
/// A device with discrete intervals has one range per interval (minimum equals maximum).
public struct FrameRateRange: Sendable, Hashable, CustomStringConvertible {
    /// The shortest frame duration, i.e. the highest rate.
    public var minFrameDuration: FrameInterval
    /// The longest frame duration, i.e. the lowest rate.
    public var maxFrameDuration: FrameInterval
    /// For stepwise ranges, the step between durations; nil for discrete or continuous ranges.
    public var stepFrameDuration: FrameInterval?

    public init(minFrameDuration: FrameInterval, maxFrameDuration: FrameInterval, stepFrameDuration: FrameInterval? = nil) {
        self.minFrameDuration = minFrameDuration
        self.maxFrameDuration = maxFrameDuration
        self.stepFrameDuration = stepFrameDuration
    }
    public var maxFrameRate: Double { minFrameDuration.framesPerSecond }
    public var minFrameRate: Double { maxFrameDuration.framesPerSecond }

    /// Whether `interval` lies in the range (for discrete ranges: equals it in value).
    public func contains(_ interval: FrameInterval) -> Bool {
        !(interval < minFrameDuration) && !(maxFrameDuration < interval)
    }
    public var description: String {
        minFrameDuration == maxFrameDuration
            ? String(format: "%.3g fps", maxFrameRate)
            : String(format: "%.3g-%.3g fps", minFrameRate, maxFrameRate)
    }
}

extension CaptureDevice {
    /// One way the device can capture: pixel format, size and frame rates.
    public struct Format: Sendable, Hashable, CustomStringConvertible {
        public var pixelFormat: PixelFormat
        public var dimensions: VideoDimensions
        /// Frame rates at this size, highest first.
        public var videoSupportedFrameRateRanges: [FrameRateRange]
        /// The driver's name for the pixel format (e.g. "YUYV 4:2:2").
        public var formatDescription: String
        /// Whether frames are compressed (MJPEG).
        public var isCompressed: Bool
        /// Whether the driver produces this format by converting another (V4L2 emulated flag).
        public var isEmulated: Bool

        public init(
            pixelFormat: PixelFormat, dimensions: VideoDimensions, videoSupportedFrameRateRanges: [FrameRateRange],
            formatDescription: String = "", isCompressed: Bool? = nil, isEmulated: Bool = false
        ) {
            self.pixelFormat = pixelFormat
            self.dimensions = dimensions
            self.videoSupportedFrameRateRanges = videoSupportedFrameRateRanges
            self.formatDescription = formatDescription.isEmpty ? pixelFormat.description : formatDescription
            self.isCompressed = isCompressed ?? pixelFormat.isCompressed
            self.isEmulated = isEmulated
        }

        /// The highest frame rate of the format, 0 when unknown.
        public var maxFrameRate: Double { videoSupportedFrameRateRanges.map(\.maxFrameRate).max() ?? 0 }

        /// Whether the format can run at `interval`.
        public func supports(_ interval: FrameInterval) -> Bool {
            videoSupportedFrameRateRanges.contains { $0.contains(interval) }
        }

        public var description: String {
            "\(pixelFormat) \(dimensions) @ \(videoSupportedFrameRateRanges.map(\.description).joined(separator: ", "))"
        }

        init(_ s: SourceFormat) {
            let ranges: [FrameRateRange]
            switch s.intervals.kind {
            case .discrete(let list):
                ranges = list.sorted().map { FrameRateRange(minFrameDuration: $0, maxFrameDuration: $0) }
            case .stepwise(let lo, let hi, let step):
                ranges = [FrameRateRange(minFrameDuration: lo, maxFrameDuration: hi, stepFrameDuration: step)]
            case .continuous(let lo, let hi):
                ranges = [FrameRateRange(minFrameDuration: lo, maxFrameDuration: hi)]
            }
            self.init(
                pixelFormat: s.pixelFormat, dimensions: VideoDimensions(width: s.width, height: s.height),
                videoSupportedFrameRateRanges: ranges, formatDescription: s.description,
                isCompressed: s.isCompressed, isEmulated: s.isEmulated)
        }
    }
}
