import CaptureBackend
import CaptureSystem
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Writes captured audio to a RIFF/WAVE file as it arrives.
///
/// The header is written at once with zero sizes; `close()` fills in the real sizes, so a file
/// whose writer was never closed still holds every sample written (with a header that says 0).
/// 16- and 32-bit integers are written as PCM (format 1), floats as IEEE float (format 3).
/// One owner at a time: not safe to call from several threads at once.
public final class WAVFileWriter {
    /// The format every buffer must have.
    public let format: AudioFormat
    /// Where the file is.
    public let path: String
    /// Frames written so far.
    public private(set) var framesWritten = 0

    private var fd: Int32
    private var dataBytes: UInt64 = 0
    private let headerSize: Int
    // RIFF sizes are 32-bit: 4 GiB minus the header.
    private static let maxDataBytes: UInt64 = 0xFFFF_FFFF - 64

    /// Creates (or truncates) the file at `path` and writes the header.
    /// Throws `.permissionDenied`, `.readOnlyFileSystem`, `.diskFull` or `.ioError`.
    public init(path: String, format: AudioFormat) throws(CaptureError) {
        guard format.isInterleaved, format.channelCount > 0, format.channelCount <= 0xFFFF, format.sampleRate > 0 else {
            throw CaptureError(.invalidArgument, "WAV needs an interleaved format with 1-65535 channels and a positive rate, not \(format)")
        }
        self.format = format
        self.path = path
        let opened = Syscall.run("open", mock: nil, failure: -1) { Glibc.open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644) }
        let fd: Int32
        switch opened {
        case .success(let d): fd = d
        case .failure(let e): throw WAVFileWriter.error(e.rawValue, "open", path)
        }
        self.fd = fd
        let header = WAVFileWriter.header(format: format, dataBytes: 0)
        headerSize = header.count
        do {
            try writeAll(header)
        } catch {
            WAVFileWriter.close(fd)
            self.fd = -1
            throw error
        }
    }

    /// Convenience for a file URL.
    public convenience init(url: URL, format: AudioFormat) throws(CaptureError) {
        try self.init(path: url.path, format: format)
    }

    deinit {
        if fd >= 0 { try? close() }
    }

    /// Appends the samples of `buffer`, which must be in `format`.
    public func write(_ buffer: AudioPCMBuffer) throws(CaptureError) {
        guard buffer.format == format else {
            throw CaptureError(.invalidArgument, "buffer is \(buffer.format), the WAV file is \(format)")
        }
        let bytes = min(buffer.data.count, buffer.frameCount * format.bytesPerFrame)
        try write(buffer.data.prefix(bytes))
    }

    /// Appends raw interleaved sample bytes in `format` (a whole number of frames).
    public func write(_ samples: Data) throws(CaptureError) {
        guard fd >= 0 else { throw CaptureError(.invalidState, "the WAV file \(path) is closed") }
        guard samples.count % format.bytesPerFrame == 0 else {
            throw CaptureError(.invalidArgument, "\(samples.count) bytes is not a whole number of \(format.bytesPerFrame)-byte frames")
        }
        guard dataBytes + UInt64(samples.count) <= WAVFileWriter.maxDataBytes else {
            throw CaptureError(.invalidState, "a WAV file holds at most 4 GiB of samples; start a new file")
        }
        try writeAll(samples)
        dataBytes += UInt64(samples.count)
        framesWritten += samples.count / format.bytesPerFrame
    }

    /// Writes the final sizes into the header and closes the file. Further writes throw.
    public func close() throws(CaptureError) {
        guard fd >= 0 else { return }
        defer {
            WAVFileWriter.close(fd)
            fd = -1
        }
        let header = WAVFileWriter.header(format: format, dataBytes: dataBytes)
        let wrote = header.withUnsafeBytes { raw in
            Syscall.run("pwrite", mock: nil, failure: -1, { pwrite(fd, raw.baseAddress, raw.count, 0) })
        }
        switch wrote {
        case .failure(let e): throw WAVFileWriter.error(e.rawValue, "pwrite", path)
        case .success(let n) where n != header.count: throw WAVFileWriter.error(EIO, "pwrite", path)
        case .success: break
        }
        // Flush so that a full disk shows up here, not silently after exit.
        if case .failure(let e) = Syscall.run("fsync", mock: nil, failure: -1, { fsync(fd) }), e.rawValue != EINVAL, e.rawValue != EROFS {
            throw WAVFileWriter.error(e.rawValue, "fsync", path)
        }
    }

    /// Closes the descriptor; its result is not looked at (the header and fsync said what matters).
    private static func close(_ fd: Int32) {
        _ = Syscall.run("close", mock: nil, failure: -1, retryOnInterrupt: false, { Glibc.close(fd) })
    }

    private func writeAll(_ data: Data) throws(CaptureError) {
        var failure: Int32 = 0
        data.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                switch Syscall.run("write", mock: nil, failure: -1, { Glibc.write(fd, raw.baseAddress! + offset, raw.count - offset) }) {
                case .failure(let e):
                    failure = e.rawValue
                    return
                case .success(0):
                    failure = ENOSPC
                    return
                case .success(let r):
                    offset += r
                }
            }
        }
        if failure != 0 { throw WAVFileWriter.error(failure, "write", path) }
    }

    static func error(_ e: Int32, _ operation: String, _ path: String) -> CaptureError {
        switch e {
        case ENOSPC, EDQUOT:
            return CaptureError(.diskFull, "the disk holding \(path) is full", errno: e, operation: operation)
        case EROFS:
            return CaptureError(.readOnlyFileSystem, "\(path) is on a read-only file system", errno: e, operation: operation)
        case EACCES, EPERM:
            return CaptureError(.permissionDenied, "no permission to write \(path)", errno: e, operation: operation)
        case ENOENT, ENOTDIR:
            return CaptureError(.invalidArgument, "the folder for \(path) does not exist", errno: e, operation: operation)
        case EISDIR:
            return CaptureError(.invalidArgument, "\(path) is a folder", errno: e, operation: operation)
        default:
            return CaptureError(.ioError, "writing \(path) failed", errno: e, operation: operation)
        }
    }

    /// The RIFF header for `dataBytes` bytes of samples.
    static func header(format: AudioFormat, dataBytes: UInt64) -> Data {
        let isFloat = format.sampleFormat == .float32
        var h = Data()
        func u32(_ v: UInt32) { withUnsafeBytes(of: v.littleEndian) { h.append(contentsOf: $0) } }
        func u16(_ v: UInt16) { withUnsafeBytes(of: v.littleEndian) { h.append(contentsOf: $0) } }
        let data32 = UInt32(clamping: dataBytes)
        // Float files carry an 18-byte fmt chunk (cbSize) and a fact chunk, as the format requires.
        let fmtSize: UInt32 = isFloat ? 18 : 16
        let factSize: UInt32 = isFloat ? 12 : 0
        h.append(contentsOf: Array("RIFF".utf8))
        u32(4 + (8 + fmtSize) + factSize + 8 &+ data32)
        h.append(contentsOf: Array("WAVE".utf8))
        h.append(contentsOf: Array("fmt ".utf8))
        u32(fmtSize)
        u16(isFloat ? 3 : 1)
        u16(UInt16(format.channelCount))
        u32(UInt32(format.sampleRate))
        u32(UInt32(format.sampleRate * format.bytesPerFrame))
        u16(UInt16(format.bytesPerFrame))
        u16(UInt16(format.sampleFormat.bytesPerSample * 8))
        if isFloat {
            u16(0)
            h.append(contentsOf: Array("fact".utf8))
            u32(4)
            u32(UInt32(clamping: dataBytes / UInt64(format.bytesPerFrame)))
        }
        h.append(contentsOf: Array("data".utf8))
        u32(data32)
        return h
    }
}
