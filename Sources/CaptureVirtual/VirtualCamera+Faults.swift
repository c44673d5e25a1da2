#if canImport(Glibc)
import Glibc
#endif
import CaptureImaging
import CaptureBackend
import CaptureSystem

// The faults a real camera has, injected on purpose, and the counts that show them: a file of its
// own, so that the camera itself (VirtualCamera.swift) changes only with how it streams.
extension VirtualCamera {
    /// Loses the next `n` frames: the next delivered frame's sequence number is `n` higher than
    /// it would have been (as when a driver drops frames). It arrives at the normal time.
    public func injectDroppedFrames(_ n: Int) {
        precondition(n >= 0, "injectDroppedFrames needs n >= 0")
        state.withLock { $0.pendingDrops += n }
    }

    /// Flags the next frame written as damaged (as `V4L2_BUF_FLAG_ERROR`): it is not delivered,
    /// the session reports a "corrupt" drop. Calls add up: two calls flag two frames.
    public func injectCorruptFrame() {
        state.withLock { $0.pendingCorrupt += 1 }
    }

    /// How `injectDamagedFrame(_:)` spoils a frame's payload.
    public enum FrameDamage: Sendable, Hashable, CaseIterable {
        /// Only the first half of the bytes count as used (`bytesused` below the image size;
        /// an MJPEG frame loses its end, EOI included), as a USB transfer cut short.
        case truncated
        /// No bytes used (`bytesused` 0).
        case empty
        /// The bytes right after the start (MJPEG: every marker segment after SOI) are noise,
        /// as hostile or garbled input. Raw frames show noise in their top rows (the counter).
        case scrambledHeader
    }

    /// Delivers the next frame as a good one (no error flag) but with a damaged payload, as
    /// cameras and drivers sometimes do: the consumer's own checks must catch it. Calls add up.
    public func injectDamagedFrame(_ damage: FrameDamage) {
        state.withLock { $0.pendingDamage.append(damage) }
    }

    /// Makes the next stream start fail as a USB camera's does when its bus has no bandwidth
    /// left for it (`STREAMON` answers `ENOSPC`). Calls add up.
    public func injectInsufficientBandwidth() {
        state.withLock { $0.pendingBandwidthFailures += 1 }
    }

    /// Makes another client take the camera the moment its stream next stops, as a program that
    /// waited for it would: starts then fail with `.deviceBusy` (as for a camera another process
    /// streams from) until `endTakeover()`. For testing what an app or a session does when it loses
    /// its camera while restarting it (a new format, an undone configuration).
    public func injectTakeover() {
        state.withLock { $0.takeoverPending = true }
    }

    /// Ends a takeover (`injectTakeover()`), or cancels one that has not happened yet: the camera
    /// is free again.
    public func endTakeover() {
        state.withLock { s in
            s.takeoverPending = false
            if s.streamOwner == Self.takeoverOwner { s.streamOwner = nil }
        }
    }

    /// Unplugs the camera: a running stream ends with `.disconnected` at once, and every call
    /// on a source opened before now, and every new open, fails with `.disconnected` until
    /// `reconnect()`. Frames already delivered stay readable.
    public func disconnect() {
        let (signal, changed) = state.withLock { s -> (StreamCondition?, Bool) in
            let changed = s.connected
            if s.connected {
                s.connected = false
                s.generation &+= 1
            }
            return (s.streamSignal, changed)
        }
        signal?.broadcastAfterChange()
        if changed { VirtualCameraRegistry.shared.connectionChanged(self, connected: false) }
    }

    /// Plugs the camera back in: new opens work again (sources opened before the disconnect
    /// stay dead, as a V4L2 node does), and its controls are at their defaults again, as a USB
    /// camera's are after it lost power.
    public func reconnect() {
        let changed = state.withLock { s -> Bool in
            let changed = !s.connected
            if !s.connected { s.controlValues = VirtualCamera.defaultControlValues }
            s.connected = true
            return changed
        }
        if changed { VirtualCameraRegistry.shared.connectionChanged(self, connected: true) }
    }

    /// Whether the camera is plugged in.
    public var isConnected: Bool { state.withLock { $0.connected } }

    /// Stops producing frames for `duration`, or until `resume()` when nil. While stalled no
    /// sequence numbers are used: the stream just goes quiet, like a camera that hangs.
    public func stall(for duration: Duration?) {
        let signal = state.withLock { s -> StreamCondition? in
            if let duration {
                s.stall = .until(StreamCondition.time(.now(), plus: duration))
            } else {
                s.stall = .forever
            }
            return s.streamSignal
        }
        signal?.broadcastAfterChange()
    }

    /// Ends a stall at once.
    public func resume() {
        let signal = state.withLock { s -> StreamCondition? in
            s.stall = .none
            return s.streamSignal
        }
        signal?.broadcastAfterChange()
    }

    /// Sequence numbers used so far (see `Statistics.framesProduced`).
    public var framesProduced: UInt64 { state.withLock { $0.statistics.framesProduced } }

    /// Counts of what the camera produced, queued and lost.
    public var statistics: Statistics { state.withLock { $0.statistics } }

    /// Whether a stream is running on the camera.
    public var isStreaming: Bool { state.withLock { $0.streamOwner != nil } }
}
