import Capture
import CaptureCodecs
internal import CFFmpeg
import Foundation

// Where a writer's bytes go: the file (`Destination`) or RTSP, FFmpeg's I/O callbacks into it,
// and the errors of its writes.

/// The recording error for a failed write (`code` is FFmpeg's, a negative errno for I/O).
func writeError(_ code: Int32, _ what: String, path: String) -> RecordingError {
    switch -code {
    case ENOSPC, EDQUOT:
        return RecordingError(.diskFull, "the disk is full: \(path) ends at the last complete fragment; free some space")
    case EACCES, EPERM, EROFS:
        return RecordingError(.cannotWriteFile, "cannot write \(path) (\(ffMessage(code))): choose a writable folder")
    case EPIPE where !path.hasPrefix("rtsp://"):
        return RecordingError(.cannotWriteFile, "the program reading \(path) went away: the file ends where it stopped reading")
    case ECONNREFUSED, EHOSTUNREACH, ENETUNREACH, ETIMEDOUT, EPIPE, ECONNRESET:
        return RecordingError(
            .publishingFailed, "cannot publish to \(path): \(ffMessage(code)); is the RTSP server running and listening there?")
    case ENOENT, ENOTDIR:
        return RecordingError(.cannotWriteFile, "cannot create \(path): its folder does not exist")
    case EISDIR:
        return RecordingError(.cannotWriteFile, "cannot create \(path): it is a folder")
    default:
        let kind: RecordingError.Code =
            path.hasPrefix("rtsp://") ? .publishingFailed : (code == averrorEOF ? .encoderFailed : .cannotWriteFile)
        return RecordingError(kind, "\(what) failed for \(path): \(ffMessage(code))")
    }
}

/// FFmpeg's write callback: the bytes to the `Destination` in `opaque`.
private func destinationWrite(_ opaque: UnsafeMutableRawPointer?, _ buf: UnsafeMutablePointer<UInt8>?, _ size: Int32) -> Int32 {
    guard let opaque, let buf else { return -EINVAL }
    let dest = Unmanaged<Destination>.fromOpaque(opaque).takeUnretainedValue()
    let r = dest.write(UnsafeRawBufferPointer(start: buf, count: Int(size)))
    return r < 0 ? r : size
}

/// FFmpeg's seek callback (regular files only).
private func destinationSeek(_ opaque: UnsafeMutableRawPointer?, _ offset: Int64, _ whence: Int32) -> Int64 {
    guard let opaque else { return -Int64(EINVAL) }
    return Unmanaged<Destination>.fromOpaque(opaque).takeUnretainedValue().seek(offset, whence: whence)
}

extension MovieWriter {
    /// Creates the file (or, for RTSP, the context that connects in `begin`/`attach`).
    func open(url: URL, container: MovieContainer, fragmentInterval: Duration) throws(RecordingError) {
        // FFmpeg and x264 report to stderr at `info` by default. Their errors reach the caller
        // as typed errors carrying FFmpeg's message, so the library keeps stderr quiet (an app
        // that chose another level keeps it).
        if av_log_get_level() == AV_LOG_INFO { av_log_set_level(AV_LOG_FATAL) }
        path = container == .rtsp ? url.absoluteString : url.path
        self.container = container
        // A standby writer's frames keep going to the ring (and its placeholder stream) until `attach`.
        if ring != nil, placeholder == nil {
            placeholder = format
            format = nil
        }
        var ctx: UnsafeMutablePointer<AVFormatContext>?
        let r = avformat_alloc_output_context2(&ctx, nil, container.muxer, path)
        guard r >= 0, let ctx else { throw RecordingError(.encoderFailed, "FFmpeg has no \(container.muxer) muxer: \(ffMessage(r))") }
        format = ctx
        // RTSP opens its own connection (in `begin`, once the stream is known).
        guard container != .rtsp else { return }
        // The open goes on in the background when it takes longer than this (a FIFO waiting
        // for its reader): frames then wait in the first write, which a stop can give up.
        let dest = Destination(path: path)
        destination = dest
        if let e = dest.waitForOpen(seconds: 0.1), e != 0 {
            close()
            throw failure(-e, "open")
        }
        let size: Int32 = 32768
        guard let buffer = av_malloc(Int(size)),
            let pb = avio_alloc_context(
                buffer.assumingMemoryBound(to: UInt8.self), size, 1, Unmanaged.passUnretained(dest).toOpaque(), nil,
                destinationWrite, destinationSeek)
        else {
            close()
            throw RecordingError(.encoderFailed, "out of memory for the file's buffer")
        }
        // Seekable only when known to be a regular file (Matroska then writes its index at the end).
        pb.pointee.seekable = dest.isRegularFile ? AVIO_SEEKABLE_NORMAL : 0
        ctx.pointee.pb = pb
        // Every packet reaches the file at once (a killed process keeps all complete fragments).
        ctx.pointee.flags |= AVFMT_FLAG_FLUSH_PACKETS
        ctx.pointee.flush_packets = 1
    }

    /// The error for a failed write: the destination's own reason when it gave up, else errno's.
    func failure(_ code: Int32, _ what: String) -> RecordingError {
        destination?.failure ?? writeError(code, what, path: path)
    }

    /// Bytes in the file so far (the muxer's buffered fragment not counted); for RTSP, the
    /// stream's bytes sent.
    package var fileSize: Int64 {
        guard container != .rtsp else { return packetBytes }
        guard let pb = format?.pointee.pb else { return 0 }
        return max(0, avio_tell(pb))
    }

    /// A cleanly finished MP4: its durations into the moov (see `MP4Durations`). A file that
    /// is not a regular one (a pipe) keeps them 0; the fragments say it all the same.
    func writeDurations(videoEnd: Int64) {
        guard let destination, destination.isRegularFile, videoEnd > 0 else { return }
        let audioSeconds =
            audioStarted ? Double(audioWrittenEnd) / Double(max(1, audioRate)) : nil
        let videoSeconds = Double(videoEnd) / 1e9
        // The moov is the file's second box, a few kB (more with audio's codec setup).
        let count = Int(min(fileSize, 1 << 16))
        guard let head = destination.read(count: count, at: 0),
            let patches = MP4Durations.patches(
                head: head, seconds: { handler in handler == "vide" ? videoSeconds : handler == "soun" ? audioSeconds : nil })
        else { return }
        for p in patches { _ = destination.write(p.bytes, at: Int64(p.offset)) }
    }
}
