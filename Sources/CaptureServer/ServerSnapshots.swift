// `/snapshot`: a request waits for the next frame and is answered from its bytes.
import CMicroHTTPD
import Capture
import Foundation

extension CaptureStreamServer {
    func snapshot(_ c: HTTP.Connection) -> MHD_Result {
        // Not the frame there is now (it may be old): the next one, so the picture is fresh.
        lock.lock()
        defer { lock.unlock() }
        guard !stopping, !offline else {
            return queueText(c, 503, "the camera is offline: check that it is connected\n")
        }
        let deadline = CaptureTime(nanoseconds: CaptureTime.now().nanoseconds + UInt64(configuration.snapshotTimeout * 1e9))
        waitingSnapshots.append((c, newest?.serial ?? 0, deadline))
        MHD_suspend_connection(c)
        return HTTP.yes
    }

    /// Queues `frame`'s JPEG for `c` without a copy: the response holds the frame. Under `lock`.
    func queueSnapshot(_ c: HTTP.Connection, _ frame: ServedFrame) {
        let jpeg = frame.jpeg
        let held = Unmanaged.passRetained(SnapshotHold(server: self, frame: frame)).toOpaque()
        let r = MHD_create_response_from_buffer_with_free_callback_cls(
            jpeg.count, UnsafeMutableRawPointer(mutating: jpeg.baseAddress),
            serverFrameFreed, held)
        addCommonHeaders(r, type: "image/jpeg")
        HTTP.addHeader(r, "X-Timestamp", ServedFrame.seconds(frame.timestamp))
        HTTP.addHeader(r, "X-Sequence", String(frame.cameraSequence))
        HTTP.queue(c, 200, r)
    }
}

/// A snapshot answer's hold on its frame (the answer is sent from the frame's bytes).
final class SnapshotHold: @unchecked Sendable {
    let server: CaptureStreamServer
    /// Held until the answer is sent (or dropped).
    var frame: ServedFrame? {
        didSet {
            oldValue?.letGo()
            frame?.hold()
        }
    }
    init(server: CaptureStreamServer, frame: ServedFrame) {
        self.server = server
        self.frame = frame
        frame.hold()
    }

    deinit { frame?.letGo() }
}
