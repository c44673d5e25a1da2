// A device's formats and frame durations, and the configuration lock that changing them needs.
import CaptureBackend
import Foundation

extension CaptureDevice {
    // MARK: Formats

    /// Every format the device offers, largest first. Empty when the device cannot be opened.
    public var formats: [Format] {
        (try? loadFormats()) ?? []
    }

    func loadFormats() throws(CaptureError) -> [Format] {
        if let f = state.withLock({ $0.formats }) { return f }
        let src = try source()
        let list = try fromBackend { () throws(BackendError) in try src.formats() }.map(Format.init).sorted { a, b in
            let pa = a.dimensions.width * a.dimensions.height, pb = b.dimensions.width * b.dimensions.height
            if pa != pb { return pa > pb }
            let ra = PresetResolver.rank(a.pixelFormat, preferred: nil), rb = PresetResolver.rank(b.pixelFormat, preferred: nil)
            if ra != rb { return ra < rb }
            if a.pixelFormat != b.pixelFormat { return a.pixelFormat.rawValue < b.pixelFormat.rawValue }
            return a.maxFrameRate > b.maxFrameRate
        }
        state.withLock { $0.formats = list }
        return list
    }

    /// The best format at `dimensions`: `pixelFormat` if given, else the one stills and video
    /// handle best (YUYV and the other raw YUV formats first, then MJPEG, then RGB and grey).
    /// Nil when the device has no such size (or no format the library can encode at it).
    public func bestFormat(for dimensions: VideoDimensions, pixelFormat: PixelFormat? = nil) -> Format? {
        formats.filter { f in
            f.dimensions == dimensions
                && (pixelFormat.map { $0 == f.pixelFormat }
                    ?? (PresetResolver.rank(f.pixelFormat, preferred: nil) < PresetResolver.pixelFormatRank.count))
        }.first
    }

    /// The format the device uses now; nil when the device cannot be opened.
    ///
    /// Assignable inside the configuration lock, as AVFoundation's `activeFormat`, with the
    /// effect of `setActiveFormat(_:)`: without the lock, or with nil or a format not in
    /// `formats`, the assignment traps (AVFoundation raises an exception); `setActiveFormat(_:)`
    /// throws instead. A running session that cannot restart in the new format keeps the old
    /// one and posts `.configurationRejected`.
    public var activeFormat: Format? {
        get {
            if let f = state.withLock({ $0.activeFormat }) { return f }
            guard let src = try? source(), let cur = try? src.currentFormat() else { return nil }
            return formats.first { $0.pixelFormat == cur.pixelFormat && $0.dimensions == cur.dimensions }
        }
        set {
            let known = try? loadFormats()
            assign(
                "activeFormat", newValue.map { "\($0)" } ?? "nil", readable: known != nil,
                supported: newValue.map { known?.contains($0) == true } ?? false, check: "formats", reportsFault: false
            ) { () throws(CaptureError) in
                if let newValue { try setActiveFormat(newValue) }
            }
        }
    }

    /// The shortest frame duration, the inverse of the highest frame rate: the rate the camera
    /// runs at (a V4L2 camera has one). Nil when the device cannot be opened.
    ///
    /// Assignable inside the configuration lock, as AVFoundation's, with the effect of
    /// `setActiveVideoMinFrameDuration(_:)`; nil (AVFoundation's `CMTime.invalid`) goes back to
    /// the default, the active format's highest rate (and a format chosen later runs at its own
    /// highest rate). Without the lock, or with a duration the
    /// active format's `videoSupportedFrameRateRanges` do not contain, the assignment traps.
    public var activeVideoMinFrameDuration: FrameInterval? {
        get {
            if let d = state.withLock({ $0.minFrameDuration }) { return d }
            return try? source().frameInterval()
        }
        set {
            let format = activeFormat
            let wanted = newValue ?? format.flatMap(Self.defaultMinFrameDuration)
            assign(
                "activeVideoMinFrameDuration", newValue.map { "\($0)" } ?? "nil", readable: format != nil,
                supported: wanted.map { format?.supports($0) == true } ?? false,
                check: "activeFormat.videoSupportedFrameRateRanges", reportsFault: false
            ) { () throws(CaptureError) in
                guard let wanted else { return }
                try setActiveVideoMinFrameDuration(wanted)
                // The default is no wish: a later format or preset runs at its own highest rate.
                if newValue == nil { state.withLock { $0.minFrameDuration = nil } }
            }
        }
    }

    /// The longest frame duration, the inverse of the lowest frame rate, as AVFoundation's
    /// `activeVideoMaxFrameDuration`. A V4L2 camera runs at one rate, so the default is
    /// `activeVideoMinFrameDuration`; a longer value is kept and read back (an app's "no
    /// slower than" limit), but frames still come at `activeVideoMinFrameDuration`; a shorter
    /// one raises the rate to it, so that the minimum never exceeds the maximum. Nil when the
    /// device cannot be opened.
    ///
    /// Assignable inside the configuration lock, with the effect of
    /// `setActiveVideoMaxFrameDuration(_:)`; nil goes back to the default. Without the lock, or
    /// with a duration the active format's `videoSupportedFrameRateRanges` do not contain, the
    /// assignment traps.
    public var activeVideoMaxFrameDuration: FrameInterval? {
        get {
            guard let minimum = activeVideoMinFrameDuration else { return nil }
            // A limit the format no longer has (a new format or preset) is dropped, as a new
            // preset resets it in AVFoundation.
            guard let kept = state.withLock({ $0.maxFrameDuration }), !(kept < minimum),
                activeFormat?.supports(kept) ?? true
            else { return minimum }
            return kept
        }
        set {
            let format = activeFormat
            assign(
                "activeVideoMaxFrameDuration", newValue.map { "\($0)" } ?? "nil", readable: format != nil,
                supported: newValue.map { format?.supports($0) == true } ?? true,
                check: "activeFormat.videoSupportedFrameRateRanges", reportsFault: false
            ) { () throws(CaptureError) in try setActiveVideoMaxFrameDuration(newValue) }
        }
    }

    /// The default `activeVideoMinFrameDuration` of `format`: its highest rate.
    static func defaultMinFrameDuration(_ format: Format) -> FrameInterval? {
        format.videoSupportedFrameRateRanges.map(\.minFrameDuration).min()
    }

    // MARK: Configuration

    /// Takes the configuration lock, as AVFoundation's. Needed before assigning a setting
    /// (`focusMode`, `activeFormat`, `activeVideoMinFrameDuration`...) or calling a `set…` method
    /// (`setActiveFormat`, `setValue(_:for:)`...). Throws when the device is gone.
    public func lockForConfiguration() throws(CaptureError) {
        _ = try source()
        state.withLock { $0.lockCount += 1 }
    }

    /// Gives the configuration lock back.
    public func unlockForConfiguration() {
        state.withLock { $0.lockCount = max(0, $0.lockCount - 1) }
    }

    func requireLock(_ what: String) throws(CaptureError) {
        guard state.withLock({ $0.lockCount > 0 }) else {
            throw CaptureError(.invalidState, "\(what) needs the configuration lock: call lockForConfiguration() first")
        }
    }

    /// Makes `format` the active format. A running session restarts the stream in the new
    /// format; if the device refuses, the previous format stays and the error is thrown.
    public func setActiveFormat(_ format: Format) throws(CaptureError) {
        try requireLock("setActiveFormat")
        guard try loadFormats().contains(format) else {
            throw CaptureError(.unsupportedFormat, "\(format) is not one of \(localizedName)'s formats: pick one from `formats`")
        }
        if let session = owner {
            try session.deviceWantsFormat(self, format: format, interval: nil)
        } else {
            _ = try applyFormat(format)
        }
    }

    /// Sets the frame duration (e.g. `FrameInterval(framesPerSecond: 30)`). It must be within one
    /// of the active format's ranges. A running session sets the new rate on the stream
    /// (restarting it where the driver cannot change it while streaming). A longer
    /// `activeVideoMaxFrameDuration` stays; a shorter one becomes this one.
    public func setActiveVideoMinFrameDuration(_ interval: FrameInterval) throws(CaptureError) {
        try requireLock("setActiveVideoMinFrameDuration")
        if let f = activeFormat, !f.supports(interval) {
            throw CaptureError(
                .unsupportedFormat,
                "\(interval) is outside \(f)'s frame rates: choose from videoSupportedFrameRateRanges")
        }
        if let session = owner {
            try session.deviceWantsFormat(self, format: nil, interval: interval)
        } else {
            _ = try applyInterval(interval)
        }
        state.withLock { st in
            if let max = st.maxFrameDuration, max < interval { st.maxFrameDuration = nil }
        }
    }

    /// Sets the longest frame duration (see `activeVideoMaxFrameDuration`); nil goes back to the
    /// default. It must be within one of the active format's ranges. A duration shorter than
    /// `activeVideoMinFrameDuration` sets that too (the camera then runs at it, as through
    /// `setActiveVideoMinFrameDuration(_:)`); a longer one changes no frame. Needs the
    /// configuration lock; throws `.unsupportedFormat` outside the ranges.
    public func setActiveVideoMaxFrameDuration(_ interval: FrameInterval?) throws(CaptureError) {
        try requireLock("setActiveVideoMaxFrameDuration")
        guard let interval else {
            state.withLock { $0.maxFrameDuration = nil }
            return
        }
        if let f = activeFormat, !f.supports(interval) {
            throw CaptureError(
                .unsupportedFormat,
                "\(interval) is outside \(f)'s frame rates: choose from videoSupportedFrameRateRanges")
        }
        if let minimum = activeVideoMinFrameDuration, interval < minimum {
            try setActiveVideoMinFrameDuration(interval)
        }
        state.withLock { $0.maxFrameDuration = interval }
    }

    /// Sets the format on the source; returns what the driver applied. Throws when the driver
    /// picked another pixel format or size.
    @discardableResult
    func applyFormat(_ format: Format) throws(CaptureError) -> ActiveFormat {
        let src = try source()
        // S_FMT fails with EBUSY while buffers of an earlier stream are still held: skip it
        // when the driver already has the format.
        if let current = try? src.currentFormat(), current.pixelFormat == format.pixelFormat,
            current.dimensions == format.dimensions
        {
            state.withLock { $0.activeFormat = format }
            return current
        }
        let applied = try fromBackend { () throws(BackendError) in
            try src.setFormat(pixelFormat: format.pixelFormat, width: format.dimensions.width, height: format.dimensions.height)
        }
        guard applied.pixelFormat == format.pixelFormat, applied.dimensions == format.dimensions else {
            throw CaptureError(
                .unsupportedFormat,
                "\(localizedName) cannot capture \(format.pixelFormat) \(format.dimensions); the driver offered \(applied.pixelFormat) \(applied.dimensions)"
            )
        }
        state.withLock { $0.activeFormat = format }
        return applied
    }

    @discardableResult
    func applyInterval(_ interval: FrameInterval) throws(CaptureError) -> FrameInterval {
        let src = try source()
        let applied = try fromBackend { () throws(BackendError) in try src.setFrameInterval(interval) }
        state.withLock { $0.minFrameDuration = applied }
        return applied
    }
}
