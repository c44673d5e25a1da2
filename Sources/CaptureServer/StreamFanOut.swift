// Frames in and out: each frame the session delivers is published once, suspended stream clients
// and waiting snapshots are woken for it, and each stream client's multipart reader takes the
// newest part.
import CMicroHTTPD
import Capture
import Foundation

extension CaptureStreamServer {
    // MARK: Frames (from the session, on a JPEG stage's encoder thread or the capture thread)

    func publish(_ sample: SampleBuffer) {
        guard sample.pixelFormat == .jpeg, let dims = sample.dimensions else { return }
        let seq = sample.sequenceNumber, time = sample.presentationTimeStamp
        sample.withUnsafeBytes { jpeg in
            lock.withLock {
                guard daemon != nil, !stopping else { return }
                if offline, let wentAt, time <= wentAt {
                    dropped[.frameWasLate, default: 0] += 1
                    return
                }
                serial += 1
                received += 1
                offline = false
                lastFrameTime = .now()
                newest = pool.take(jpeg: jpeg, serial: serial, sequence: seq, timestamp: time, dimensions: dims)
                resumeWaitingLocked(now: .now(), force: false)
            }
        }
    }

    /// Resumes suspended stream clients (they take the newest frame, or end when stopping or
    /// offline) and answers snapshot requests that have a new frame or ran out of time. Under `lock`.
    func resumeWaitingLocked(now: CaptureTime, force: Bool) {
        for c in clients.values where c.isSuspended {
            c.isSuspended = false
            MHD_resume_connection(c.connection)
        }
        guard !waitingSnapshots.isEmpty else { return }
        var still: [(connection: HTTP.Connection, after: UInt64, deadline: CaptureTime)] = []
        for w in waitingSnapshots {
            if let f = newest, f.serial > w.after, !stopping {
                queueSnapshot(w.connection, f)
            } else if force || stopping || now > w.deadline {
                queueText(w.connection, 503, "no frame from the camera: check that it is connected and the session runs\n")
            } else {
                still.append(w)
                continue
            }
            MHD_resume_connection(w.connection)
        }
        waitingSnapshots = still
    }

    // MARK: Stream

    func startStream(_ c: HTTP.Connection, headOnly: Bool) -> MHD_Result {
        let client: StreamClient? = lock.withLock {
            guard !stopping, !offline else { return nil }
            guard clients.count < configuration.maxClients else { refused += 1; return nil }
            let client = StreamClient(id: nextClientID, connection: c, server: self)
            nextClientID += 1
            // The first part is the newest frame there is.
            client.lastSerial = (newest?.serial ?? 1) - 1
            if !headOnly { clients[client.id] = client }
            return client
        }
        guard let client else {
            let (isOffline, full) = lock.withLock { (offline || stopping, clients.count >= configuration.maxClients) }
            if full && !isOffline {
                return queueText(c, 503, "too many clients (limit \(configuration.maxClients)): try again later\n")
            }
            return queueText(c, 503, "the camera is offline: check that it is connected\n")
        }
        let r: OpaquePointer?
        if headOnly {
            r = HTTP.response("")
        } else {
            r = MHD_create_response_from_callback(
                UInt64.max, 32 * 1024, serverStreamReader,
                Unmanaged.passRetained(client).toOpaque(), serverStreamFreed)
        }
        addCommonHeaders(r, type: MultipartStream.contentType)
        HTTP.addHeader(r, "Pragma", "no-cache")
        HTTP.addHeader(r, "Expires", "Mon, 3 Jan 2000 12:34:56 GMT")
        return HTTP.queue(c, 200, r)
    }

    /// The next bytes for `client` into `buffer`: the rest of its part, or the newest frame's part
    /// when it has sent one; suspends it when there is no newer frame. On the daemon's thread.
    func read(_ client: StreamClient, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        lock.withLock {
            if client.frame == nil || client.offset >= client.frame!.count {
                client.frame = nil
                if stopping || offline { return closeStream(client, into: buffer) }
                guard let f = newest, f.serial > client.lastSerial else {
                    client.isSuspended = true
                    MHD_suspend_connection(client.connection)
                    return 0
                }
                if client.sent > 0 { client.skipped += Int(f.serial - client.lastSerial - 1) }
                client.frame = f
                client.offset = 0
                client.lastSerial = f.serial
                client.sent += 1
            }
            let f = client.frame!
            let n = min(buffer.count, f.count - client.offset)
            buffer.baseAddress!.copyMemory(from: f.part.baseAddress! + client.offset, byteCount: n)
            client.offset += n
            return n
        }
    }

    /// Ends `client`'s stream after a whole part: the multipart close delimiter, then the end of
    /// the response (a final chunk, or the close for HTTP/1.0). Under `lock`.
    private func closeStream(_ client: StreamClient, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        let rest = MultipartStream.closeDelimiter.count - client.closeOffset
        guard rest > 0 else { return -1 }  // MHD_CONTENT_READER_END_OF_STREAM
        let n = min(rest, buffer.count)
        MultipartStream.closeDelimiter.withUnsafeBytes {
            buffer.baseAddress!.copyMemory(from: $0.baseAddress! + client.closeOffset, byteCount: n)
        }
        client.closeOffset += n
        return n
    }

    func streamEnded(_ client: StreamClient) {
        lock.withLock {
            client.frame = nil
            clients[client.id] = nil
        }
    }
}

/// One stream client: the part it sends now and its counts. Guarded by the server's lock.
final class StreamClient: @unchecked Sendable {
    let id: Int
    let connection: HTTP.Connection
    let server: CaptureStreamServer
    /// The part being sent, held until the client moves on.
    var frame: ServedFrame? {
        didSet {
            oldValue?.letGo()
            frame?.hold()
        }
    }
    var offset = 0
    /// Bytes of the close delimiter sent (the stream is ending).
    var closeOffset = 0
    var lastSerial: UInt64 = 0
    var sent = 0
    var sentAtTick = 0
    var skipped = 0
    var fps = 0.0
    var isSuspended = false

    init(id: Int, connection: HTTP.Connection, server: CaptureStreamServer) {
        self.id = id
        self.connection = connection
        self.server = server
    }

    deinit { frame?.letGo() }
}
