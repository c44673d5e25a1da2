// How the session and libmicrohttpd call into the server.
import CMicroHTTPD
import Capture

/// The server's frame consumer delegate; calls come on the server's queue.
final class ServerFrameSink: CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
    weak var server: CaptureStreamServer?
    func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
        server?.publish(sampleBuffer)
    }
    func captureOutput(_ output: CaptureOutput, didDrop drop: DroppedFrames, from connection: CaptureConnection) {
        server?.noteDrop(drop)
    }
}

// MARK: libmicrohttpd's callbacks

func serverAccessHandler(
    _ cls: UnsafeMutableRawPointer?, _ connection: OpaquePointer?, _ url: UnsafePointer<CChar>?,
    _ method: UnsafePointer<CChar>?, _ version: UnsafePointer<CChar>?,
    _ uploadData: UnsafePointer<CChar>?, _ uploadSize: UnsafeMutablePointer<Int>?,
    _ state: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> MHD_Result {
    guard let cls, let connection, let url, let method else { return MHD_Result.NO }
    // Answered 414 already (`RequestLimits.refuseLongQuery`): close.
    if state?.pointee == RequestLimits.refused { return MHD_Result.NO }
    let server = Unmanaged<CaptureStreamServer>.fromOpaque(cls).takeUnretainedValue()
    server.connectionGuard.headersReceived(connection)
    // A body (uploads are not used here) is read and dropped.
    if let uploadSize, uploadSize.pointee != 0 {
        uploadSize.pointee = 0
        return MHD_Result.YES
    }
    return server.handle(connection, url: String(cString: url), method: String(cString: method))
}

func serverStreamReader(
    _ cls: UnsafeMutableRawPointer?, _ position: UInt64, _ buffer: UnsafeMutablePointer<CChar>?,
    _ max: Int
) -> Int {
    guard let cls, let buffer else { return -2 }
    let client = Unmanaged<StreamClient>.fromOpaque(cls).takeUnretainedValue()
    return client.server.read(client, into: UnsafeMutableRawBufferPointer(start: buffer, count: max))
}

func serverStreamFreed(_ cls: UnsafeMutableRawPointer?) {
    guard let cls else { return }
    let client = Unmanaged<StreamClient>.fromOpaque(cls).takeRetainedValue()
    client.server.streamEnded(client)
}

func serverFrameFreed(_ cls: UnsafeMutableRawPointer?) {
    guard let cls else { return }
    let hold = Unmanaged<SnapshotHold>.fromOpaque(cls).takeRetainedValue()
    // Let go under the lock: the frame pool judges by reference counts under it.
    hold.server.lock.withLock { hold.frame = nil }
}
