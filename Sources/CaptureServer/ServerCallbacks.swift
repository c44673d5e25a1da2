// How the session and libmicrohttpd call into the server.
import CMicroHTTPD
import Capture

// The session hands the server each JPEG directly (on an encoder thread, under the input's
// route lock): it is copied into the served frame and the waiting clients are woken.
extension CaptureStreamServer: FrameConsumer {
    package func consume(_ sample: SampleBuffer, from connection: CaptureConnection) { publish(sample) }
    package func consumeDrop(_ drop: DroppedFrames, from connection: CaptureConnection) { noteDrop(drop) }
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
    // A request of an added route that reads its body (see `startRouteRequest`).
    if let context = state?.pointee {
        let body = Unmanaged<RouteBody>.fromOpaque(context).takeUnretainedValue()
        return server.continueRouteRequest(connection, body, data: uploadData, size: uploadSize)
    }
    // A body (the server's own routes take none) is read and dropped.
    if let uploadSize, uploadSize.pointee != 0 {
        uploadSize.pointee = 0
        return MHD_Result.YES
    }
    return server.handle(connection, url: String(cString: url), method: String(cString: method), state: state)
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
    // Let go under the lock, where the frame pool looks at the holds.
    hold.server.lock.withLock { hold.frame = nil }
}
