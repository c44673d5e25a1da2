import Capture
import CaptureCodecs
import CaptureSystem
import Foundation

/// A frame as the recorder writes it: a JPEG (an MJPEG recording's) or a unit of the session's
/// shared H.264 stage.
enum RecordedFrame {
    case sample(SampleBuffer)
    case unit(H264AccessUnit)

    /// The format a unit stands for in the recorder's checks (no camera delivers it).
    static let h264 = MovieWriter.VideoFormat.h264

    var presentationTimeStamp: CaptureTime {
        switch self {
        case .sample(let s): s.presentationTimeStamp
        case .unit(let u): u.presentationTimeStamp
        }
    }
    var sequenceNumber: UInt64 {
        switch self {
        case .sample(let s): s.sequenceNumber
        case .unit(let u): u.sequenceNumber
        }
    }
    var format: (PixelFormat, VideoDimensions)? {
        switch self {
        case .sample(let s): s.pixelFormat.flatMap { f in s.dimensions.map { (f, $0) } }
        case .unit(let u): (Self.h264, u.dimensions)
        }
    }
    /// A unit's stage's SPS and PPS (a file's header takes them).
    var parameterSets: Data? {
        if case .unit(let u) = self { return u.parameterSets }
        return nil
    }
    /// False for a unit that is not a key frame (a file, or its part after a loss, starts at one).
    var isKeyFrame: Bool {
        if case .unit(let u) = self { return u.isKeyFrame }
        return true
    }
}

// On the recording queue: the frames, audio and drops the session hands the output.
extension CaptureMovieFileOutput {
    /// What the ports brought, in order: the microphone's buffers, then units, JPEG frames, drops,
    /// a stage's failure.
    func drainFeed() {
        while let packet = feed.nextAudio() {
            handleAudio(packet)
            packet.letGo()
        }
        while let entry = feed.next() {
            active?.lastVideo = .now()
            switch entry {
            case .unit(let u):
                if let connection = port.connection(with: .video) { handle(.unit(u), connection: connection) }
                u.letGo()
            case .frame(let s, let isCopy):
                if let connection = port.connection(with: .video) { handle(.sample(s), connection: connection) }
                feed.done(s, isCopy: isCopy)
            case .drop(let d):
                handleDrop(d)
            case .failed(let e):
                if active != nil {
                    finish(error: RecordingError(e.code == .unsupportedCodec ? .unsupportedCodec : .encoderFailed, e.message))
                } else {
                    // (A recording started now reports it from the stage again.)
                    standby?.failed = true
                }
            case .audioFailed(let e):
                // (Pre-record keeps its video: a recording started from it hears of it again.)
                if let rec = active, rec.settings.recordsAudio {
                    finish(error: RecordingError(e.code == .unsupportedCodec ? .unsupportedCodec : .encoderFailed, e.message))
                }
            }
        }
    }

    private func handle(_ frame: RecordedFrame, connection: CaptureConnection) {
        guard let (pixelFormat, dims) = frame.format else { return }
        if let rec = active, let stopAt = locked({ $0.stopAt }), stopAt < frame.presentationTimeStamp {
            // Every frame captured before the stop is in: the recording ends once the audio is
            // too (this frame and those after it are not part of it).
            rec.videoPastStop = true
            if !endStopIfDone(rec, stopAt) { return }
        }
        guard let rec = active else {
            if let sb = standby, !feed(sb, frame, pixelFormat, dims, connection: connection), sb.format != nil,
                sb.format?.0 != pixelFormat || sb.format?.1 != dims, Self.wanted(pixelFormat, sb.settings)
            {
                // The camera's frames changed: the past kept is of another size; start over.
                sb.writer.close()
                standby = nil
                audioRing.removeAll()
                refreshStandby()
                if let fresh = standby { _ = feed(fresh, frame, pixelFormat, dims, connection: connection) }
            }
            return
        }
        if let sb = rec.standby {
            startFromStandby(rec, sb, frame, pixelFormat, dims, connection: connection)
            return
        }
        // Frames asked for before this recording (another product) are not part of it.
        let wanted = Self.wanted(pixelFormat, rec.settings)
        guard wanted, !(frame.presentationTimeStamp < rec.requested) else { return }
        // Captured while paused: not part of the recording, and no loss.
        let pauses = locked { $0.pauses }
        if pauses.contains(frame.presentationTimeStamp) { return }
        if !rec.began {
            // The file starts at a key frame (the stage makes one when the recording joins).
            guard frame.isKeyFrame else { return }
            // With a microphone, the file opens once its format is known (its first buffer),
            // or without audio after a second of video and no audio.
            let wantsAudio = rec.settings.recordsAudio && audioPort.connection(with: .audio) != nil
            // The file starts where the audio does: a frame captured before the audio stage's
            // first packet waits (the stage starts with the recording), and asks for a key frame next.
            let audio = rec.earlyAudio.first
            if wantsAudio, frame.presentationTimeStamp - rec.requested < 1_000_000_000,
                audio.map({ frame.presentationTimeStamp < $0.presentationTimeStamp }) ?? true
            {
                port.requestKeyFrame()
                return
            }
            let interval = connection.device?.activeVideoMinFrameDuration ?? FrameInterval(framesPerSecond: 30)
            rec.frameNanoseconds = Int64(interval.numerator) * 1_000_000_000 / Int64(max(1, interval.denominator))
            do {
                try rec.writer.begin(
                    .init(width: dims.width, height: dims.height, pixelFormat: pixelFormat, frameInterval: interval),
                    audio: wantsAudio ? audio?.format : nil, settings: rec.settings,
                    parameterSets: frame.parameterSets)
            } catch {
                finish(error: error)
                return
            }
            rec.began = true
            rec.format = (pixelFormat, dims)
            rec.firstTime = frame.presentationTimeStamp
            rec.pauseOrigin = frame.presentationTimeStamp
            rec.resumesPassed = pauses.resumes(before: frame.presentationTimeStamp)
            rec.connections = [connection] + (rec.writer.hasAudio ? audioPort.connections : [])
            guard announceStart(rec) else { return }
        } else if rec.format?.0 != pixelFormat || rec.format?.1 != dims {
            finish(
                error: RecordingError(
                    .formatChanged,
                    "the camera's frames changed from \(rec.format!.1) to \(dims) mid-recording; the file ends before the change"))
            return
        }
        let captured = frame.presentationTimeStamp
        var at = captured - rec.firstTime! - pauses.removed(before: captured, after: rec.pauseOrigin ?? rec.firstTime!)
        // The first frame after a pause starts a run of sequence numbers (those in the pause
        // were neither written nor lost) and a keyframe. It comes where the cut puts it: the
        // frame before shows for what the camera saw of it outside the pause, however short,
        // and the frames after keep their captured spacing (as the audio does). At least 1 ms
        // after the last frame all the same (Matroska's tick: times must rise).
        let resumes = pauses.resumes(before: captured)
        let resumed = resumes > rec.resumesPassed
        if resumed { at = Swift.max(at, rec.lastNanoseconds + 1_000_000) }
        if resumed || rec.awaitingKey, !frame.isKeyFrame {
            // The shared encoder's unit after a pause or a loss is not a key frame: lost (the
            // file goes on from the key frame asked for, next frame or so).
            rec.awaitingKey = true
            port.requestKeyFrame()
            rec.drops[.frameWasLate, default: 0] += 1
            return
        }
        if finishAtDurationLimit(rec, frameAt: at) || finishAtFileSizeLimit(rec) { return }
        if resumed { rec.resumesPassed = resumes }
        rec.awaitingKey = false
        do {
            let on = at + (rec.firstTime! - (rec.writerOrigin ?? rec.firstTime!))
            switch frame {
            case .sample(let sample): try rec.writer.write(sample, at: on)
            case .unit(let unit): try rec.writer.write(unit, at: on)
            }
        } catch {
            finish(error: error)
            return
        }
        rec.frames += 1
        rec.lastNanoseconds = at
        rec.noteSequence(frame.sequenceNumber, camera: connection.device?.uniqueID, newRun: resumed)
        let duration = rec.duration, size = rec.writer.fileSize, frames = rec.frames
        locked { s in
            s.duration = duration
            s.fileSize = size
            s.framesWritten = frames
        }
        // After the frame, so that the file ends with it.
        checkFreeSpace(rec, at: at)
    }

    /// The file has its first frame: tells the delegate the recording started, passes on the
    /// pause notices held until then, and writes the audio held until then (within the limit and
    /// the stop). False when that write failed (the recording is then finished with the error).
    /// Recording queue.
    func announceStart(_ rec: Recording) -> Bool {
        rec.delegate.fileOutput(self, didStartRecordingTo: rec.url, from: rec.connections)
        sendHeldNotices(rec)
        let early = rec.earlyAudio
        rec.earlyAudio = HeldAudio()
        let stopAt = locked { $0.stopAt }
        for p in early.packets {
            let at = p.presentationTimeStamp - rec.firstTime!
            // Past the duration limit or captured after a stop: left out, as later packets are
            // (a slow encoder's first frame can come seconds after its capture, with the audio
            // held meanwhile).
            if let max = rec.maxDuration, Duration.nanoseconds(at) >= max { break }
            if let stopAt, stopAt < p.presentationTimeStamp { break }
            do { try rec.writer.writeAudio(p, at: at) } catch {
                finish(error: error)
                return false
            }
        }
        return true
    }

    /// A packet of the session's audio stage. It belongs where its first sample lies: kept when
    /// that was captured within the recording (from its first frame, outside the pauses, before
    /// the stop and the duration limit), so that the cuts fall on packet boundaries.
    func handleAudio(_ packet: AudioPacket) {
        guard let rec = active else {
            // Pre-record: as far back as the frames kept.
            if let sb = standby, sb.settings.recordsAudio {
                audioRing.append(packet)
                audioRing.trim(from: sb.keptFrom)
            }
            return
        }
        guard rec.settings.recordsAudio else { return }
        guard rec.began else {
            // Before the first video frame: what came from the request on waits for it (a slow
            // encoder's first frame may come seconds after its capture; with pre-record, all
            // from the oldest frame kept).
            rec.earlyAudio.append(packet)
            rec.earlyAudio.trim(from: rec.standby?.keptFrom ?? rec.requested)
            return
        }
        guard rec.writer.hasAudio else { return }
        rec.lastAudio = .now()
        // Audio captured after a stop is not part of the recording; the packet the stop falls
        // in is the last (the recording ends once the video has reached the stop too).
        let (stopAt, pauses) = locked { ($0.stopAt, $0.pauses) }
        let start = packet.presentationTimeStamp
        if let stopAt {
            if stopAt < packet.endTime { rec.audioPastStop = true }
            if stopAt < start {
                endStopIfDone(rec, stopAt)
                return
            }
        }
        defer {
            if rec.audioPastStop, active === rec, let stopAt { endStopIfDone(rec, stopAt) }
        }
        let origin = rec.pauseOrigin ?? rec.firstTime!
        guard packet.format?.codec == .pcm, !pauses.spans.isEmpty else {
            // Captured while paused: not part of the recording. Those after a pause move earlier by it.
            if pauses.contains(start) { return }
            writeAudio(packet, captured: start, rec, removed: pauses.removed(before: start, after: origin))
            return
        }
        // PCM: the parts outside the pauses, each moved earlier by the pauses before it.
        let rate = Int64(Swift.max(1, packet.format?.sampleRate ?? 1))
        let length = Int64(packet.duration) * 1_000_000_000 / rate
        for part in pauses.kept(from: start, nanoseconds: length) {
            // (Rounded to the nearest sample; a part that runs to the end keeps the last one.)
            let from = Int((part.lowerBound * rate + 500_000_000) / 1_000_000_000)
            let to = part.upperBound == length ? packet.duration : Int((part.upperBound * rate + 500_000_000) / 1_000_000_000)
            guard to > from else { continue }
            let captured = CaptureTime(nanoseconds: start.nanoseconds &+ UInt64(part.lowerBound))
            writeAudio(packet, captured: captured, rec, removed: pauses.removed(before: captured, after: origin), samples: from..<to)
            if active !== rec { return }
        }
    }

    /// On the queue: a packet (PCM: its `samples`) captured at `captured`, less the pauses'
    /// `removed` nanoseconds, into the recording's file.
    private func writeAudio(_ packet: AudioPacket, captured: CaptureTime, _ rec: Recording, removed: Int64, samples: Range<Int>? = nil) {
        let at = captured - rec.firstTime! - removed
        if audioPastDurationLimit(rec, at: at) { return }
        do { try rec.writer.writeAudio(packet, at: at, samples: samples) } catch { finish(error: error) }
    }

    /// Frames lost before the recorder (by the camera, a stage, or the feed).
    func handleDrop(_ drop: DroppedFrames) {
        if let sb = active?.standby ?? (active == nil ? standby : nil) {
            sb.drops.append(drop)
            return
        }
        guard let rec = active, rec.began, !rec.videoPastStop else { return }
        // A frame lost while paused would not have been written: no loss.
        let (pauses, stopAt) = locked { ($0.pauses, $0.stopAt) }
        if pauses.contains(drop.time) { return }
        var count = drop.count
        // A recorder behind learns of frames lost past the duration limit (or the stop) before
        // it reaches the frame that ends the recording: those are not part of it (counted up to
        // the last frame within, from the last frame written at the camera's frame interval).
        var end = lastFrameWithinDurationLimit(rec)
        if let stopAt, let first = rec.firstTime {
            let at = stopAt - first - pauses.removed(before: stopAt, after: rec.pauseOrigin ?? first)
            end = Swift.min(end ?? at, at)
        }
        if let end, let seq = drop.sequenceNumber, let last = rec.lastSequence, rec.frameNanoseconds > 0 {
            let lastWithin = Int64(last) + (end - rec.lastNanoseconds) / rec.frameNanoseconds
            count = Int(min(Int64(count), Swift.max(0, lastWithin - Int64(seq) + 1)))
        }
        if count > 0 { rec.drops[drop.reason, default: 0] += count }
    }
}
