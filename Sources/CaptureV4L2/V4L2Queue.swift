// A device's buffer queue: which pool owns the driver's buffers (REQBUFS), and orphaned ones.
import CaptureBackend
import CaptureSystem
#if canImport(Glibc)
import Glibc
#endif
internal import CV4L2Shim

/// A device's buffer queue. It records which pool owns the driver's buffers, so that a pool
/// freed late (its frames were held) never releases buffers of a newer stream.
package final class V4L2Queue: Sendable {
    package let fd: FileDescriptor
    package let type: V4L2BufferType
    private struct State {
        /// Generation of the pool owning the driver's buffers (0: none).
        package var owner: UInt64 = 0
        package var nextGeneration: UInt64 = 1
    }
    private let state = Locked(State())

    package init(fd: FileDescriptor, type: V4L2BufferType) {
        self.fd = fd
        self.type = type
    }

    /// Runs `body` with the queue locked; `body` gets a fresh generation number and returns
    /// whether it now owns the driver's buffers.
    func allocate<T>(_ body: (_ generation: UInt64, _ previousOwnerAlive: Bool) throws(BackendError) -> T)
        throws(BackendError) -> T
    {
        try state.withLock { s throws(BackendError) -> T in
            let generation = s.nextGeneration
            s.nextGeneration += 1
            let previous = s.owner != 0
            s.owner = 0
            let result = try body(generation, previous)
            s.owner = generation
            return result
        }
    }

    /// Releases the driver's buffers (REQBUFS 0) if `generation` still owns them.
    func release(_ generation: UInt64) {
        state.withLock { s in
            guard s.owner == generation else { return }
            s.owner = 0
            _ = requestBuffers(0)
        }
    }

    /// Lets go of the driver's buffers a stopped pool still owns because clients hold its frames
    /// (`REQBUFS 0` orphans them: they stay mapped until let go), so that the format can change.
    /// Throws `.previousStreamHeld` where the driver cannot orphan buffers (EBUSY).
    package func orphanStoppedBuffers() throws(BackendError) {
        try state.withLock { s throws(BackendError) in
            guard s.owner != 0 else { return }
            if case .failure(let e) = requestBuffers(0) {
                if e == .resourceBusy {
                    throw BackendError.video(.previousStreamHeld, fd.path, operation: "VIDIOC_REQBUFS", errno: e)
                }
                throw BackendError.video(e, "VIDIOC_REQBUFS", fd.path)
            }
            s.owner = 0
        }
    }

    /// Whether some pool of this queue holds the driver's buffers.
    package var isAllocated: Bool { state.withLock { $0.owner != 0 } }

    /// `VIDIOC_REQBUFS` with MMAP memory; returns the granted count and capabilities, or the errno.
    func requestBuffers(_ count: Int) -> Result<(count: Int, capabilities: UInt32), Errno> {
        var r = v4l2_requestbuffers()
        r.count = UInt32(clamping: count)
        r.type = type.rawValue
        r.memory = V4L2_MEMORY_MMAP.rawValue
        if let e = withUnsafeMutablePointer(to: &r, { fd.ioctlErrno(.requestBuffers, $0) }) { return .failure(e) }
        return .success((Int(r.count), r.capabilities))
    }

    /// Checks that no other process streams from the device (`REQBUFS 0` answers `EBUSY` then),
    /// without claiming anything. A stream of our own counts as available.
    package func checkAvailable() throws(BackendError) {
        try state.withLock { s throws(BackendError) in
            guard s.owner == 0 else { return }
            if case .failure(let e) = requestBuffers(0) {
                throw BackendError.video(e, "VIDIOC_REQBUFS", fd.path)
            }
        }
    }
}
