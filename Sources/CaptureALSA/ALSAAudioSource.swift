// An ALSA capture PCM as an `AudioSource`: non-blocking reads woken by poll on the PCM's
// descriptors plus an eventfd for `wakeUp`, overrun recovery, and monotonic timestamps.
import CaptureBackend
import CaptureSystem
import Foundation
#if canImport(Glibc)
import Glibc
#endif
internal import CALSA

package final class ALSAAudioSource: AudioSource, @unchecked Sendable {
    package let info: SourceInfo
    /// The name the PCM was opened with.
    package let deviceName: String
    // Owned; closed in deinit. Configuration calls and the reader never overlap (see AudioSource).
    private let pcm: OpaquePointer
    private let wake: FileDescriptor
    private let range: AudioFormatRange

    private struct Settings {
        package var configuration: AudioConfiguration?
        package var running = false
    }
    private let settings = Locked(Settings())

    // Reader state: touched by `start` (before the reader runs) and the reader thread only.
    private var framePosition: UInt64 = 0
    /// Where the next buffer should start on the clock if nothing is lost.
    private var expectedNext: CaptureTime?
    private var lastStamp: CaptureTime?
    private var pendingBreak: AudioDiscontinuity.Reason?
    private var status: OpaquePointer?

    /// Opens an ALSA capture PCM by name: a discovery ID (`hw:CARD=Loopback,DEV=1`, `default`)
    /// or any ALSA name (`hw:1,1`, `hw:Loopback,1,0`, `plughw:0`).
    package init(name: String, info: SourceInfo? = nil) throws(BackendError) {
        ALSA.quietLibrary()
        var handle: OpaquePointer?
        // Non-blocking open: a busy device fails with EBUSY at once instead of waiting for it.
        try ALSA.check(
            snd_pcm_open(&handle, name, SND_PCM_STREAM_CAPTURE, SND_PCM_NONBLOCK), "snd_pcm_open",
            device: name)
        guard let handle else { throw BackendError.audio(.noHandle, name, operation: "snd_pcm_open") }
        let efd: FileDescriptor
        switch FileDescriptor.makeEventFD() {
        case .success(let fd): efd = fd
        case .failure(let e):
            snd_pcm_close(handle)
            throw BackendError(e, device: name, kind: .audio)
        }
        do {
            range = try ALSA.formatRange(of: handle, device: name)
        } catch {
            snd_pcm_close(handle)
            throw error
        }
        pcm = handle
        wake = efd
        deviceName = name
        self.info = info ?? ALSAAudioSource.identity(of: handle, name: name)
        var st: OpaquePointer?
        if snd_pcm_status_malloc(&st) >= 0 { status = st }
    }

    deinit {
        snd_pcm_drop(pcm)
        snd_pcm_close(pcm)
        if let status { snd_pcm_status_free(status) }
    }

    /// Identity for a PCM opened by a name discovery did not produce.
    private static func identity(of pcm: OpaquePointer, name: String) -> SourceInfo {
        var infoPtr: OpaquePointer?
        guard snd_pcm_info_malloc(&infoPtr) >= 0, let pi = infoPtr else {
            return SourceInfo(uniqueID: name, name: name, driver: "alsa", busInfo: "", path: name, position: .unspecified)
        }
        defer { snd_pcm_info_free(pi) }
        guard snd_pcm_info(pcm, pi) >= 0 else {
            return SourceInfo(uniqueID: name, name: name, driver: "alsa", busInfo: "", path: name, position: .unspecified)
        }
        let cardIndex = Int(snd_pcm_info_get_card(pi)), dev = Int(snd_pcm_info_get_device(pi))
        let pcmName = ALSA.string(snd_pcm_info_get_name(pi))
        if cardIndex >= 0, let card = ALSA.card(cardIndex), !name.hasPrefix("default") {
            return ALSADiscovery.info(card: card, device: dev, pcmName: pcmName, path: name)
        }
        return SourceInfo(
            uniqueID: name, name: pcmName.isEmpty ? name : pcmName, driver: "alsa", busInfo: "", path: name,
            position: .unspecified)
    }

    package func formats() throws(BackendError) -> AudioFormatRange { range }

    package var configuration: AudioConfiguration? { settings.withLock { $0.configuration } }

    package func configure(_ request: AudioConfiguration) throws(BackendError) -> AudioConfiguration {
        let fmt = request.format
        guard fmt.isInterleaved else {
            throw BackendError.audio(.interleavedOnly, deviceName)
        }
        guard fmt.sampleRate > 0, fmt.channelCount > 0, request.periodFrames > 0, request.bufferFrames >= request.periodFrames
        else {
            throw BackendError.audio(.invalidConfiguration(request), deviceName)
        }
        guard range.sampleFormats.contains(fmt.sampleFormat) else {
            throw BackendError.audio(.sampleFormatNotOffered(fmt.sampleFormat, offered: range.sampleFormats), deviceName)
        }
        if settings.withLock({ $0.running }) { stop() }
        let dev = deviceName
        var hwp: OpaquePointer?
        try ALSA.check(snd_pcm_hw_params_malloc(&hwp), "snd_pcm_hw_params_malloc", device: dev)
        guard let hw = hwp else { throw ALSA.error(-ENOMEM, operation: "snd_pcm_hw_params_malloc", device: dev) }
        defer { snd_pcm_hw_params_free(hw) }
        try ALSA.check(snd_pcm_hw_params_any(pcm, hw), "snd_pcm_hw_params_any", device: dev)
        try ALSA.check(snd_pcm_hw_params_set_access(pcm, hw, SND_PCM_ACCESS_RW_INTERLEAVED), "snd_pcm_hw_params_set_access", device: dev)
        try ALSA.check(snd_pcm_hw_params_set_format(pcm, hw, ALSA.pcmFormat(fmt.sampleFormat)), "snd_pcm_hw_params_set_format", device: dev)
        var channels = UInt32(clamping: fmt.channelCount)
        try ALSA.check(snd_pcm_hw_params_set_channels_near(pcm, hw, &channels), "snd_pcm_hw_params_set_channels_near", device: dev)
        var rate = UInt32(clamping: fmt.sampleRate)
        var dir: Int32 = 0
        try ALSA.check(snd_pcm_hw_params_set_rate_near(pcm, hw, &rate, &dir), "snd_pcm_hw_params_set_rate_near", device: dev)
        var period = snd_pcm_uframes_t(request.periodFrames)
        dir = 0
        try ALSA.check(
            snd_pcm_hw_params_set_period_size_near(pcm, hw, &period, &dir), "snd_pcm_hw_params_set_period_size_near", device: dev)
        var bufferSize = snd_pcm_uframes_t(max(request.bufferFrames, Int(period) * 2))
        try ALSA.check(snd_pcm_hw_params_set_buffer_size_near(pcm, hw, &bufferSize), "snd_pcm_hw_params_set_buffer_size_near", device: dev)
        try ALSA.check(snd_pcm_hw_params(pcm, hw), "snd_pcm_hw_params", device: dev)
        // Read back what was applied: the "near" calls may have moved every value.
        dir = 0
        _ = snd_pcm_hw_params_get_rate(hw, &rate, &dir)
        _ = snd_pcm_hw_params_get_channels(hw, &channels)
        _ = snd_pcm_hw_params_get_period_size(hw, &period, &dir)
        _ = snd_pcm_hw_params_get_buffer_size(hw, &bufferSize)

        var swp: OpaquePointer?
        try ALSA.check(snd_pcm_sw_params_malloc(&swp), "snd_pcm_sw_params_malloc", device: dev)
        guard let sw = swp else { throw ALSA.error(-ENOMEM, operation: "snd_pcm_sw_params_malloc", device: dev) }
        defer { snd_pcm_sw_params_free(sw) }
        try ALSA.check(snd_pcm_sw_params_current(pcm, sw), "snd_pcm_sw_params_current", device: dev)
        try ALSA.check(snd_pcm_sw_params_set_avail_min(pcm, sw, period), "snd_pcm_sw_params_set_avail_min", device: dev)
        // Time stamps taken by the kernel at each pointer update, on the clock video uses. Plugins
        // that refuse fall back to reading the clock at read time (see `timestamp`).
        _ = snd_pcm_sw_params_set_tstamp_mode(pcm, sw, SND_PCM_TSTAMP_ENABLE)
        _ = snd_pcm_sw_params_set_tstamp_type(pcm, sw, SND_PCM_TSTAMP_TYPE_MONOTONIC)
        try ALSA.check(snd_pcm_sw_params(pcm, sw), "snd_pcm_sw_params", device: dev)

        let applied = AudioConfiguration(
            format: AudioFormat(sampleRate: Int(rate), channelCount: Int(channels), sampleFormat: fmt.sampleFormat),
            periodFrames: Int(period), bufferFrames: Int(bufferSize))
        settings.withLock { $0.configuration = applied }
        return applied
    }

    package func start() throws(BackendError) {
        if configuration == nil {
            let std = AudioConfiguration.standard
            let fmt = range.closestFormat(to: std.format) ?? std.format
            _ = try configure(AudioConfiguration(format: fmt, periodFrames: std.periodFrames, bufferFrames: std.bufferFrames))
        }
        if settings.withLock({ $0.running }) { return }
        if snd_pcm_state(pcm) != SND_PCM_STATE_PREPARED {
            try ALSA.check(snd_pcm_prepare(pcm), "snd_pcm_prepare", device: deviceName)
        }
        try ALSA.check(snd_pcm_start(pcm), "snd_pcm_start", device: deviceName)
        framePosition = 0
        expectedNext = nil
        lastStamp = nil
        pendingBreak = nil
        drainWake()
        settings.withLock { $0.running = true }
    }

    package func stop() {
        settings.withLock { $0.running = false }
        snd_pcm_drop(pcm)
    }

    package func wakeUp() {
        wake.signal()
    }

    private func drainWake() {
        wake.drain()
    }

    package func nextBuffer(timeout: Duration) throws(BackendError) -> AudioEvent {
        guard let config = configuration, settings.withLock({ $0.running }) else {
            throw BackendError.audio(.notStreaming, deviceName)
        }
        let deadline = ContinuousClock.now + timeout
        while true {
            let avail = snd_pcm_avail(pcm)
            if avail < 0 {
                try recover(Int32(avail))
                continue
            }
            if Int(avail) >= config.periodFrames {
                if let buffer = try readPeriod(config) { return .buffer(buffer) }
                continue
            }
            switch try wait(until: deadline) {
            case .ready: continue
            case .timeout: return .timeout
            case .woken: return .interrupted
            }
        }
    }

    private enum WaitResult { case ready, timeout, woken }

    private func wait(until deadline: ContinuousClock.Instant) throws(BackendError) -> WaitResult {
        let count = Int(snd_pcm_poll_descriptors_count(pcm))
        guard count > 0 else { throw BackendError.audio(.noPollDescriptors, deviceName, operation: "snd_pcm_poll_descriptors_count") }
        var fds = [pollfd](repeating: pollfd(), count: count + 1)
        let filled = fds.withUnsafeMutableBufferPointer { snd_pcm_poll_descriptors(pcm, $0.baseAddress, UInt32(count)) }
        try ALSA.check(filled, "snd_pcm_poll_descriptors", device: deviceName)
        fds[count] = pollfd(fd: wake.rawValue, events: Int16(POLLIN), revents: 0)
        while true {
            let left = deadline - ContinuousClock.now
            if left <= .zero { return .timeout }
            let ms = Int32(clamping: (left.components.seconds * 1000) + Int64(left.components.attoseconds / 1_000_000_000_000_000) + 1)
            let r: Int32
            switch Syscall.poll(&fds, timeoutMilliseconds: ms) {
            case .success(let n): r = n
            case .failure(let e):
                throw BackendError(e, device: deviceName, kind: .audio)
            }
            if r == 0 { continue }  // loop re-checks the deadline (poll's ms rounding)
            if fds[count].revents & Int16(POLLIN) != 0 {
                drainWake()
                return .woken
            }
            var revents: UInt16 = 0
            let rr = fds.withUnsafeMutableBufferPointer {
                snd_pcm_poll_descriptors_revents(pcm, $0.baseAddress, UInt32(count), &revents)
            }
            try ALSA.check(rr, "snd_pcm_poll_descriptors_revents", device: deviceName)
            if revents & UInt16(POLLERR | POLLHUP | POLLNVAL) != 0 || revents & UInt16(POLLIN) != 0 { return .ready }
            // Woken for nothing this PCM cares about (plugins may do this): wait again.
        }
    }

    /// Restarts the stream after an overrun or suspend; the next buffer carries the break.
    private func recover(_ result: Int32) throws(BackendError) {
        let e = -result
        switch e {
        case EPIPE:
            pendingBreak = .overrun
            try ALSA.check(snd_pcm_prepare(pcm), "snd_pcm_prepare", device: deviceName)
            try ALSA.check(snd_pcm_start(pcm), "snd_pcm_start", device: deviceName)
        case ESTRPIPE:
            pendingBreak = .suspended
            var r = snd_pcm_resume(pcm)
            var tries = 0
            // The driver answers EAGAIN until the hardware is back; give it up to a second.
            while r == -EAGAIN && tries < 20 {
                usleep(50_000)
                tries += 1
                r = snd_pcm_resume(pcm)
            }
            if r < 0 {
                try ALSA.check(snd_pcm_prepare(pcm), "snd_pcm_prepare", device: deviceName)
            }
            if snd_pcm_state(pcm) != SND_PCM_STATE_RUNNING {
                try ALSA.check(snd_pcm_start(pcm), "snd_pcm_start", device: deviceName)
            }
        case EAGAIN:
            return
        default:
            throw ALSA.error(result, operation: "snd_pcm_avail", device: deviceName)
        }
    }

    /// Reads one period. Nil when the read found nothing after all (the caller waits again).
    private func readPeriod(_ config: AudioConfiguration) throws(BackendError) -> CapturedAudio? {
        let fmt = config.format
        let (stamp, queued) = statusStamp(rate: fmt.sampleRate)
        var data = Data(count: config.periodFrames * fmt.bytesPerFrame)
        let n = data.withUnsafeMutableBytes { snd_pcm_readi(pcm, $0.baseAddress, snd_pcm_uframes_t(config.periodFrames)) }
        if n < 0 {
            try recover(Int32(n))
            return nil
        }
        if n == 0 { return nil }
        let frames = Int(n)
        if frames < config.periodFrames { data.count = frames * fmt.bytesPerFrame }
        // The oldest unread frame was captured `queued` frames before the stamp.
        var pts: CaptureTime
        if let stamp {
            pts = CaptureTime(nanoseconds: stamp.nanoseconds &- UInt64(queued) * 1_000_000_000 / UInt64(fmt.sampleRate))
        } else {
            var delay: snd_pcm_sframes_t = 0
            if snd_pcm_delay(pcm, &delay) < 0 { delay = 0 }
            // After the read, `delay` frames remain queued behind the ones just read.
            let back = (UInt64(max(0, delay)) + UInt64(frames)) * 1_000_000_000 / UInt64(fmt.sampleRate)
            pts = CaptureTime(nanoseconds: CaptureTime.now().nanoseconds &- back)
        }
        var discontinuity: AudioDiscontinuity?
        if let reason = pendingBreak {
            var lost: Int?
            if let expected = expectedNext {
                let gap = pts - expected
                lost = max(0, Int((Double(gap) * Double(fmt.sampleRate) / 1e9).rounded()))
            }
            discontinuity = AudioDiscontinuity(reason: reason, lostFrames: lost)
            framePosition &+= UInt64(lost ?? 0)
            pendingBreak = nil
        } else if let previous = lastStamp, pts - previous <= 0 {
            // Keep stamps strictly increasing despite jitter, without pulling later ones along
            // (each stamp stays its own measurement, so one late stamp biases nothing after it).
            pts = CaptureTime(nanoseconds: previous.nanoseconds &+ 1)
        }
        lastStamp = pts
        let first = framePosition
        framePosition &+= UInt64(frames)
        expectedNext = CaptureTime(nanoseconds: pts.nanoseconds &+ UInt64(frames) * 1_000_000_000 / UInt64(fmt.sampleRate))
        let buffer = AudioPCMBuffer(format: fmt, frameCount: frames, data: data, discontinuity: discontinuity)
        return CapturedAudio(buffer: buffer, timestamp: pts, firstFrame: first)
    }

    /// The kernel's time stamp of the last pointer update and the frames queued then, when the
    /// stamp is on the monotonic clock; nil to fall back to reading the clock.
    private func statusStamp(rate: Int) -> (CaptureTime?, Int) {
        guard let status, snd_pcm_status(pcm, status) >= 0 else { return (nil, 0) }
        var ts = snd_htimestamp_t()
        snd_pcm_status_get_htstamp(status, &ts)
        let queued = Int(snd_pcm_status_get_avail(status))
        guard ts.tv_sec > 0 || ts.tv_nsec > 0 else { return (nil, 0) }
        let stamp = CaptureTime(nanoseconds: UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec))
        // A stamp far from now is on another clock (a plugin kept gettimeofday): do not use it.
        let skew = CaptureTime.now() - stamp
        guard skew >= 0, skew < 1_000_000_000 else { return (nil, 0) }
        return (stamp, queued)
    }
}
