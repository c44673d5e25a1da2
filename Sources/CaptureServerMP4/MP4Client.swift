import Capture
import CaptureCodecs
import CaptureServer

/// One `/stream.mp4` client: the init segment, then its own moof before each shared mdat (a
/// frame's) or AAC packet, placed on its own time line (`MP4Timeline`), with the stage's packet
/// of silence where its audio would have a hole. Its state is guarded by the routes' lock;
/// `read` runs on the server's daemon thread.
final class MP4Client: RouteStream, @unchecked Sendable {
    enum Next {
        case initSegment([UInt8])
        /// An entry held for the client.
        case entry(MP4Entry)
        case wait
        case end
    }

    /// What follows the client's moof.
    private enum Body {
        case none
        /// A frame's mdat (header included).
        case video(MP4Fragment)
        /// An audio packet's bytes (the mdat header is the client's).
        case audio(AudioPacket)
        /// The stage's packet of silence.
        case silence(AudioStreamFormat)
    }

    let id: Int
    let routes: FragmentedMP4Routes
    // Guarded by `routes.lock`.
    /// The init segment it belongs to (0: not sent yet), and that segment's audio.
    var generation = 0
    var audio: AudioStreamFormat?
    /// The serial of the next entry it may send.
    var next: UInt64
    /// It waits for a key frame (it starts, or fell behind).
    var needsKey = true
    /// Frames, audio packets and packets of silence sent; frames skipped; bytes.
    var sent = 0
    var audioSent = 0
    var silenceSent = 0
    var skipped = 0
    var bytes = 0
    /// What it sends now: the init segment, or its head (moof, and an audio packet's mdat header) and a body.
    private var initBytes: [UInt8]?
    private var body = Body.none
    private var head = [UInt8](repeating: 0, count: MP4Boxes.audioHeadSize)
    private var headCount = 0
    private var offset = 0
    /// Its moof sequence number, where its samples go, and packets of silence to send before
    /// `pending`, the entry that waits for them.
    private var sequence: UInt32 = 0
    private var timeline = MP4Timeline()
    private var silenceLeft = 0
    private var pending: MP4Entry?
    private var isEnded = false

    /// When it joined (capture clock, seconds): its average rate is `bytes` since then.
    private let joined = CaptureTime.now().seconds

    /// A client whose socket holds more than `unsentSeconds` of its stream (at its average rate)
    /// that it has not taken, and more than `unsentFloor` bytes, has stopped reading: it is ended
    /// between fragments. Measured in time, since a still picture's H.264 is a few KB a second
    /// and a busy one megabytes; the floor lets a start-up's key frame and init segment be.
    static let unsentSeconds = 3.0
    static let unsentFloor = 16 * 1024

    init(id: Int, routes: FragmentedMP4Routes, startAfter serial: UInt64) {
        self.id = id
        self.routes = routes
        next = serial + 1
    }

    /// Whether it has stopped taking what it is sent. Under `routes.lock`, on the daemon's thread.
    private func stoppedReading(_ waker: RouteWaker) -> Bool {
        guard let unsent = waker.unsentBytes, unsent > Self.unsentFloor else { return false }
        let rate = Double(bytes) / max(1, CaptureTime.now().seconds - joined)
        return Double(unsent) > rate * Self.unsentSeconds
    }

    /// Skips `count` entries (frames counted once it has started).
    func skip(_ count: Int = 1, counted: Bool = true) {
        next += UInt64(count)
        if sent > 0, counted { skipped += count }
    }

    func read(into buffer: UnsafeMutableRawBufferPointer, waker: RouteWaker) -> RouteStreamRead {
        routes.lock.withLock {
            if isEnded { return .end }
            if initBytes == nil, case .none = body, stoppedReading(waker) {
                isEnded = true
                routes.droppedLocked()
                return .end
            }
            while initBytes == nil, case .none = body {
                if silenceLeft > 0, startSilence() { break }
                let entry: MP4Entry
                if let p = pending {
                    entry = p
                    pending = nil
                } else {
                    switch routes.nextLocked(for: self, waker: waker) {
                    case .wait: return .wait
                    case .end:
                        isEnded = true
                        return .end
                    case .initSegment(let bytes):
                        initBytes = bytes
                        offset = 0
                        continue
                    case .entry(let e): entry = e
                    }
                }
                start(entry)
            }
            let n: Int
            if let initBytes {
                n = min(buffer.count, initBytes.count - offset)
                initBytes.withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress! + offset, byteCount: n) }
                offset += n
                if offset == initBytes.count { self.initBytes = nil }
            } else {
                n = copyFragment(into: buffer)
            }
            bytes += n
            return .bytes(n)
        }
    }

    /// Copies what fits of the head and body at `offset`; lets the body go when all is sent.
    private func copyFragment(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        withBody { b in
            let total = headCount + b.count
            let n = min(buffer.count, total - offset)
            var written = 0
            if offset < headCount {
                let m = min(n, headCount - offset)
                head.withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress! + offset, byteCount: m) }
                written = m
            }
            if written < n, let src = b.baseAddress {
                (buffer.baseAddress! + written).copyMemory(from: src + (offset + written - headCount), byteCount: n - written)
            }
            offset += n
            if offset == total { endBody() }
            return n
        }
    }

    private func withBody<R>(_ use: (UnsafeRawBufferPointer) -> R) -> R {
        switch body {
        case .none: use(UnsafeRawBufferPointer(start: nil, count: 0))
        case .video(let f): f.withUnsafeBytes(use)
        case .audio(let p): p.withUnsafeBytes(use)
        case .silence(let format): format.silence.withUnsafeBytes(use)
        }
    }

    private func endBody() {
        switch body {
        case .video(let f): f.letGo()
        case .audio(let p): p.letGo()
        case .none, .silence: break
        }
        body = .none
    }

    /// Starts sending `entry` (held for the client), or lets it go: audio before the client's
    /// first frame, or ahead of its audio time line. Under `routes.lock`.
    private func start(_ entry: MP4Entry) {
        if let f = entry.video {
            startFrame(f, entry)
        } else if let p = entry.audio {
            startAudio(p, entry)
        }
    }

    private func startFrame(_ f: MP4Fragment, _ entry: MP4Entry) {
        if let audio, !audio.silence.isEmpty {
            let silence = timeline.silenceBeforeFrame(rate: audio.sampleRate, frameSize: audio.frameSize)
            if silence > 0 {
                silenceLeft = silence
                pending = entry
                return
            }
        }
        let (decodeTime, duration) = timeline.placeFrame(at: Int64(bitPattern: f.time.nanoseconds), nominal: Int64(f.duration))
        sequence &+= 1
        sent += 1
        body = .video(f)
        offset = 0
        headCount = MP4Boxes.moofSize
        head.withUnsafeMutableBytes {
            MP4Boxes.writeMoof(
                into: $0, sequence: sequence, decodeTime: UInt64(decodeTime), duration: UInt32(duration), size: UInt32(f.sampleSize),
                isKey: f.isKey)
        }
    }

    private func startAudio(_ p: AudioPacket, _ entry: MP4Entry) {
        guard let audio else {
            p.letGo()
            return
        }
        let place = timeline.placeAudio(
            at: Int64(bitPattern: p.presentationTimeStamp.nanoseconds), duration: p.duration, rate: audio.sampleRate,
            frameSize: audio.frameSize, canFill: !audio.silence.isEmpty)
        switch place {
        case .drop:
            p.letGo()
        case .silenceFirst(let n):
            silenceLeft = n
            pending = entry
        case .at(let decodeTime):
            audioSent += 1
            writeAudioHead(decodeTime: decodeTime, duration: p.duration, size: p.count)
            body = .audio(p)
        }
    }

    /// The next packet of silence; false when there is none to send. Under `routes.lock`.
    private func startSilence() -> Bool {
        guard let audio else {
            silenceLeft = 0
            return false
        }
        silenceLeft -= 1
        silenceSent += 1
        writeAudioHead(decodeTime: timeline.placeSilence(frameSize: audio.frameSize), duration: audio.frameSize, size: audio.silence.count)
        body = .silence(audio)
        return true
    }

    private func writeAudioHead(decodeTime: Int64, duration: Int, size: Int) {
        sequence &+= 1
        offset = 0
        headCount = MP4Boxes.audioHeadSize
        head.withUnsafeMutableBytes {
            MP4Boxes.writeMoof(
                into: $0, track: MP4Boxes.audioTrack, sequence: sequence, decodeTime: UInt64(max(0, decodeTime)),
                duration: UInt32(duration), size: UInt32(size), isKey: true)
            MP4Boxes.writeMdatHeader(into: $0, at: MP4Boxes.moofSize, size: size)
        }
    }

    func ended() {
        routes.lock.withLock {
            isEnded = true
            endBody()
            pending?.letGo()
            pending = nil
            initBytes = nil
        }
        routes.clientEnded(self)
    }
}
