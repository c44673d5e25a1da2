import Capture
import CaptureCodecs
import CaptureServer
import Foundation

/// `/stream.mp4`: the session's H.264 (the one shared stage: a recording at the same settings
/// shares its encoder) and, when the session has a microphone, its AAC (the shared audio stage,
/// likewise) as fragmented MP4 over HTTP, playable by `<video src>`, MSE, ffplay and VLC. Each
/// frame becomes one mdat for every client, each audio packet is sent as the stage made it; each
/// client gets the init segment, then from a key frame (asked of the stage when it joins) one
/// moof + mdat per frame and per packet, with its own decode times from 0 (audio placed by its
/// capture time on the video's time line). A client that falls behind skips to the next key frame
/// (counted), its audio with it; it never slows capture or the other clients, and what it holds
/// is bounded by the shared ring. The encoders run only while someone watches (they stop a few
/// seconds after the last leaves).
///
/// Thread-safe: `consume` runs on the H.264 stage's thread, `consumeAudio` on the audio stage's,
/// `respond` and the clients' reads on the server's daemon thread, the rest on any thread;
/// everything shared is under `lock`.
final class FragmentedMP4Routes: ServerRoutes, H264Consumer, @unchecked Sendable {
    static let path = "/stream.mp4"
    let routes = [ServerRoute(path, methods: ["GET", "HEAD"])]
    let settings: H264Settings
    /// The audio stage's settings: AAC as a recording takes it (64 kb/s per channel, the
    /// microphone's rate and channels), so that both share one encode.
    static let audioSettings = AudioEncoderSettings(codec: .aac)
    /// Entries kept for clients: about two seconds of frames at 30 fps and of AAC at 48 kHz.
    static let ringSize = 160
    /// Frames a client may be behind before it skips to a key frame.
    static let maxLag = 30
    /// Frames the first init segment waits for the microphone's first packet; without one by
    /// then the stream goes without audio (until its encoder changes).
    static let audioWait = 45

    let lock = NSLock()
    private var port: FrameConsumerPort?
    private let audioFeed = MP4AudioFeed()
    /// The microphone's port (nil: the stream is video only, as asked).
    private var audioPort: FrameConsumerPort?
    private let control = DispatchQueue(label: "swift-capture.server.mp4")
    // Guarded by `lock`.
    private var session: CaptureSession?
    private var maxClients = 20
    private var ring = [MP4Entry](repeating: MP4Entry(), count: ringSize)
    private var pool = MP4FragmentPool(limit: ringSize + 32)
    /// The newest entry's serial (0: none yet).
    private(set) var newestSerial: UInt64 = 0
    /// Frames published.
    private var frames: UInt64 = 0
    private var audioPackets = 0
    /// The init segment of the encoders now, and what it was made of.
    private(set) var initSegment: [UInt8]?
    private(set) var generation = 0
    private var parameterSets = Data()
    private var videoSets: (sps: [UInt8], pps: [UInt8])?
    private var dimensions = VideoDimensions(width: 0, height: 0)
    private(set) var codec = ""
    private var failure: H264StageError?
    /// The init segment's audio (nil: video only), and the audio stage's format now.
    private(set) var audioFormat: AudioStreamFormat?
    private var stageAudioFormat: AudioStreamFormat?
    /// The session had a microphone when the encoders started: the init segment waits for its format.
    private var audioExpected = false
    private var audioFailure: AudioStageError?
    /// The stage's packets are not what the stream can carry.
    private var audioRefused = false
    /// Frames that came while the init segment waited for the microphone.
    private var framesWaitingForAudio = 0
    private var clients: [Int: MP4Client] = [:]
    /// Clients ended because they stopped reading.
    private var droppedClients = 0
    private var nextClientID = 1
    private var refused = 0
    /// Clients waiting for a fragment, woken by the next (reused: waking allocates nothing).
    private var waiting: [RouteWaker] = []
    private var toWake: [RouteWaker] = []
    private var idleCheck = 0

    init(settings: H264Settings, audio: Bool) {
        self.settings = settings
        waiting.reserveCapacity(64)
        toWake.reserveCapacity(64)
        port = FrameConsumerPort(encodedFor: self, keepsEveryFrame: false)
        if audio { audioPort = FrameConsumerPort(audioEncodedFor: audioFeed) }
        audioFeed.routes = self
    }

    // MARK: Server (start/stop thread)

    func serverWillStart(_ server: CaptureStreamServer) throws(CaptureServerError) {
        guard let port else { return }
        guard server.session.addFrameConsumer(port) else {
            throw CaptureServerError(.startFailed, "the session takes no more outputs: /stream.mp4 cannot be served")
        }
        if let audioPort { server.session.addFrameConsumer(audioPort) }
        lock.withLock {
            session = server.session
            maxClients = server.configuration.maxClients
            failure = nil
            audioFailure = nil
            audioRefused = false
        }
    }

    func serverDidStop(_ server: CaptureStreamServer) {
        guard let port else { return }
        port.encodedProduct = nil
        server.session.removeFrameConsumer(port)
        if let audioPort {
            audioPort.encodedProduct = nil
            server.session.removeFrameConsumer(audioPort)
        }
        lock.withLock {
            for i in ring.indices {
                ring[i].letGo()
                ring[i] = MP4Entry()
            }
            waiting.removeAll(keepingCapacity: true)
            session = nil
            initSegment = nil
            parameterSets = Data()
            videoSets = nil
            stageAudioFormat = nil
        }
    }

    func state() -> (name: String, value: [String: Any])? {
        lock.withLock {
            var stats: [String: Any] = [:]
            for c in clients.values {
                stats[String(c.id)] = [
                    "fragments": c.sent, "audio_packets": c.audioSent, "silence_packets": c.silenceSent, "skipped": c.skipped,
                    "bytes": c.bytes,
                ]
            }
            return (
                "mp4",
                [
                    "path": Self.path, "codec": codec, "encoding": port?.encodedProduct != nil, "clients": clients.count,
                    "clients_stat": stats, "clients_refused": refused, "clients_dropped": droppedClients, "fragments": frames,
                    "audio": audioFormat.map(MP4Boxes.audioCodec) ?? NSNull(), "audio_packets": audioPackets,
                    "audio_error": audioFailure?.message ?? NSNull(), "error": failure?.message ?? NSNull(),
                ]
            )
        }
    }

    // MARK: Requests (daemon thread)

    func respond(to request: RouteRequest, with responder: RouteResponder) {
        let headers: [(name: String, value: String)] = [
            ("Content-Type", "video/mp4"), ("X-Content-Type-Options", "nosniff"),
        ]
        let client: MP4Client? = lock.withLock {
            if failure != nil { return nil }
            guard request.method == "GET" else { return nil }
            guard clients.count < maxClients else {
                refused += 1
                return nil
            }
            let c = MP4Client(id: nextClientID, routes: self, startAfter: newestSerial)
            nextClientID += 1
            clients[c.id] = c
            // An idle check pending from before is void.
            idleCheck += 1
            return c
        }
        guard let client else {
            let (failure, limit) = lock.withLock { (self.failure, maxClients) }
            if let failure { return responder.answer(.text(503, "H.264 is not available: \(failure.message)\n")) }
            if request.method == "HEAD" { return responder.answer(RouteResponse(status: 200, headers: headers)) }
            return responder.answer(.text(503, "too many clients (limit \(limit)): try again later\n"))
        }
        // The stream starts at a key frame: ask for one now rather than waiting for the next.
        port?.requestKeyFrame()
        watch()
        responder.answer(RouteResponse(status: 200, headers: headers, body: .stream(client)))
    }

    /// Turns the encoders on for the clients (off the daemon's thread: it changes the session's
    /// routes); the microphone's only when the session has one.
    private func watch() {
        control.async { [self] in
            guard let port, port.encodedProduct == nil else { return }
            let session = lock.withLock { self.session }
            let microphone = audioPort != nil && (session?.inputs.contains { $0.mediaTypes.contains(.audio) } ?? false)
            lock.withLock { audioExpected = microphone }
            if microphone { audioPort?.encodedProduct = Self.audioSettings.product }
            port.encodedProduct = settings.product
            port.requestKeyFrame()
        }
    }

    /// A client that stopped reading was ended (`/state`'s `clients_dropped`). Under `lock`.
    func droppedLocked() { droppedClients += 1 }

    /// A client left: the encoder stops when nobody has watched for a few seconds.
    func clientEnded(_ client: MP4Client) {
        let check: Int? = lock.withLock {
            clients[client.id] = nil
            guard clients.isEmpty else { return nil }
            idleCheck += 1
            return idleCheck
        }
        guard let check else { return }
        control.asyncAfter(deadline: .now() + 3) { [self] in
            let idle = lock.withLock { clients.isEmpty && idleCheck == check }
            if idle {
                port?.encodedProduct = nil
                audioPort?.encodedProduct = nil
            }
        }
    }

    // MARK: Units (the stage's encoder thread: return quickly)

    func consume(_ unit: H264AccessUnit, from connection: CaptureConnection) {
        lock.withLock {
            guard session != nil else { return }
            if unit.parameterSets != parameterSets || unit.dimensions != dimensions { newEncoder(unit) }
            if initSegment == nil {
                framesWaitingForAudio += 1
                makeInitSegment()
            }
            guard initSegment != nil else { return }
            frames += 1
            publish(MP4Entry(video: pool.take(unit)))
        }
        wakeClients()
    }

    /// A new encoder (the first, or after a format change): a new init segment; clients of the
    /// old one end their streams. Under `lock`.
    private func newEncoder(_ unit: H264AccessUnit) {
        parameterSets = unit.parameterSets
        dimensions = unit.dimensions
        videoSets = MP4Boxes.parameterSets(Array(unit.parameterSets))
        initSegment = nil
        framesWaitingForAudio = 0
        makeInitSegment()
    }

    /// The init segment, once the video's parameter sets are known and the microphone's format
    /// (when one is expected and has not failed or kept silent too long). Under `lock`.
    private func makeInitSegment() {
        guard initSegment == nil, let sets = videoSets else { return }
        let usable = audioFailure == nil && !audioRefused
        let audio = usable ? stageAudioFormat : nil
        if audio == nil, audioExpected, usable, framesWaitingForAudio < Self.audioWait { return }
        generation += 1
        audioFormat = audio
        initSegment = MP4Boxes.initSegment(
            sps: sets.sps, pps: sets.pps, width: dimensions.width, height: dimensions.height, audio: audio)
        codec = MP4Boxes.codec(sps: sets.sps)
        // Clients start at a key frame: one now (the stage's first went by while this waited).
        port?.requestKeyFrame()
    }

    /// Puts `entry` (with its ring's hold) into the ring. Under `lock`.
    private func publish(_ entry: MP4Entry) {
        newestSerial += 1
        var e = entry
        e.serial = newestSerial
        e.generation = generation
        e.frames = frames
        let slot = Int(newestSerial % UInt64(Self.ringSize))
        ring[slot].letGo()
        e.hold()
        ring[slot] = e
        swap(&waiting, &toWake)
    }

    private func wakeClients() {
        for w in toWake { w.wake() }
        toWake.removeAll(keepingCapacity: true)
    }

    // MARK: Audio (the audio stage's thread: return quickly)

    /// A packet of the microphone's AAC: into the ring when the init segment has this audio.
    func consumeAudio(_ packet: AudioPacket) {
        lock.withLock {
            guard session != nil, let format = packet.format else { return }
            guard MP4Boxes.carries(format) else {
                // (Not AAC, or a rate an mp4a entry cannot say): the stream goes without audio.
                audioRefused = true
                makeInitSegment()
                return
            }
            if !(stageAudioFormat.map { $0.isCompatible(with: format) } ?? false) {
                stageAudioFormat = format
                // Another format than the init segment's: a new one (clients start again).
                if let old = audioFormat, !old.isCompatible(with: format) { initSegment = nil }
                makeInitSegment()
            }
            guard initSegment != nil, let current = audioFormat, current.isCompatible(with: format) else { return }
            audioPackets += 1
            publish(MP4Entry(audio: packet))
        }
        wakeClients()
    }

    func audioStageFailed(_ error: AudioStageError) {
        lock.withLock { audioFailure = error }
    }

    func consumeDrop(_ drop: DroppedFrames, from connection: CaptureConnection) {}

    func h264StageFailed(_ error: H264StageError, from connection: CaptureConnection) {
        lock.withLock {
            failure = error
            swap(&waiting, &toWake)
        }
        wakeClients()
    }

    // MARK: Clients (daemon thread, under `lock`)

    /// What `client` sends next: the init segment, or the next entry it should send (from a key
    /// frame when it starts or fell behind; held for it); nil to wait, after noting its waker.
    func nextLocked(for client: MP4Client, waker: RouteWaker) -> MP4Client.Next {
        if failure != nil || session == nil { return .end }
        if client.generation == 0 {
            guard let initSegment else {
                waiting.append(waker)
                return .wait
            }
            client.generation = generation
            client.audio = audioFormat
            return .initSegment(initSegment)
        }
        if client.generation != generation { return .end }
        let ringSize = UInt64(Self.ringSize)
        if newestSerial >= client.next + ringSize {
            // Past the ring: what it missed is gone (counted at once).
            client.skip(Int(newestSerial - ringSize + 1 - client.next))
            client.needsKey = true
        }
        if client.next <= newestSerial {
            let e = ring[Int(client.next % ringSize)]
            if e.serial == client.next, frames - e.frames >= UInt64(Self.maxLag) {
                // Behind: skip to the next key frame, its audio with it.
                client.needsKey = true
                port?.requestKeyFrame()
            }
        }
        while client.next <= newestSerial {
            let e = ring[Int(client.next % ringSize)]
            guard e.serial == client.next, e.generation == generation else {
                // Gone from the ring already: the client is far behind.
                client.skip()
                client.needsKey = true
                continue
            }
            if client.needsKey && !e.isKey {
                client.skip(counted: e.video != nil)
                continue
            }
            client.needsKey = false
            client.next += 1
            e.hold()
            return .entry(e)
        }
        waiting.append(waker)
        return .wait
    }
}
