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
        while let sample = feed.nextAudio() { handleAudio(sample) }
        while let entry = feed.next() {
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
                audioRing = []
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
            let audio = rec.earlyAudio.first?.audioBuffer?.format
            if wantsAudio, audio == nil, frame.presentationTimeStamp - rec.requested < 1_000_000_000 { return }
            let interval = connection.device?.activeVideoMinFrameDuration ?? FrameInterval(framesPerSecond: 30)
            rec.frameNanoseconds = Int64(interval.numerator) * 1_000_000_000 / Int64(max(1, interval.denominator))
            do {
                try rec.writer.begin(
                    .init(width: dims.width, height: dims.height, pixelFormat: pixelFormat, frameInterval: interval),
                    audio: wantsAudio ? audio : nil, settings: rec.settings, parameterSets: frame.parameterSets)
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

    /// Keeps `buffers` from the one playing at `from` on (the newest half second when nil).
    private static func trimAudio(_ buffers: inout [SampleBuffer], from: CaptureTime?) {
        if let from {
            var drop = 0
            while drop + 1 < buffers.count, !(from < buffers[drop + 1].presentationTimeStamp) { drop += 1 }
            if drop > 0 { buffers.removeFirst(drop) }
            return
        }
        guard let rate = buffers.first?.audioBuffer?.format.sampleRate else { return }
        while buffers.count > 1,
            Double(buffers.dropFirst().reduce(0) { $0 + ($1.audioBuffer?.frameCount ?? 0) }) / Double(max(1, rate)) > 0.5
        {
            buffers.removeFirst()
        }
    }

    /// The file has its first frame: tells the delegate the recording started, passes on the
    /// pause notices held until then, and writes the audio that came before that frame. False
    /// when that write failed (the recording is then finished with the error). Recording queue.
    func announceStart(_ rec: Recording) -> Bool {
        rec.delegate.fileOutput(self, didStartRecordingTo: rec.url, from: rec.connections)
        sendHeldNotices(rec)
        let early = rec.earlyAudio
        rec.earlyAudio = []
        for a in early {
            guard let pcm = a.audioBuffer else { continue }
            do { try rec.writer.writeAudio(pcm, at: a.presentationTimeStamp - rec.firstTime!) } catch {
                finish(error: error)
                return false
            }
        }
        return true
    }

    func handleAudio(_ sample: SampleBuffer) {
        guard let pcm = sample.audioBuffer else { return }
        guard let rec = active else {
            // Pre-record: as far back as the frames kept.
            if let sb = standby, sb.settings.recordsAudio {
                audioRing.append(sample)
                Self.trimAudio(&audioRing, from: sb.keptFrom)
            }
            return
        }
        guard rec.settings.recordsAudio else { return }
        guard rec.began else {
            // Before the first video frame: the newest half second waits for it (with
            // pre-record, all from the oldest frame kept).
            rec.earlyAudio.append(sample)
            Self.trimAudio(&rec.earlyAudio, from: rec.standby?.keptFrom)
            return
        }
        guard rec.writer.hasAudio else { return }
        // Audio captured after a stop is not part of the recording; the buffer the stop falls
        // in is the last (the recording ends once the video has reached the stop too).
        let (stopAt, pauses) = locked { ($0.stopAt, $0.pauses) }
        if let stopAt {
            let rate = Int64(Swift.max(1, pcm.format.sampleRate))
            let end = CaptureTime(
                nanoseconds: sample.presentationTimeStamp.nanoseconds &+ UInt64(Int64(pcm.frameCount) * 1_000_000_000 / rate))
            if stopAt < end { rec.audioPastStop = true }
            if stopAt < sample.presentationTimeStamp {
                endStopIfDone(rec, stopAt)
                return
            }
        }
        defer {
            if rec.audioPastStop, active === rec, let stopAt { endStopIfDone(rec, stopAt) }
        }
        guard !pauses.spans.isEmpty else {
            writeAudio(pcm, captured: sample.presentationTimeStamp, rec, removed: 0)
            return
        }
        // The parts outside the pauses, each moved earlier by the pauses before it.
        let start = sample.presentationTimeStamp
        let rate = Int64(Swift.max(1, pcm.format.sampleRate))
        let length = Int64(pcm.frameCount) * 1_000_000_000 / rate
        for part in pauses.kept(from: start, nanoseconds: length) {
            // (Rounded to the nearest sample; a part that runs to the end keeps the last one.)
            let from = Int((part.lowerBound * rate + 500_000_000) / 1_000_000_000)
            let to = part.upperBound == length ? pcm.frameCount : Int((part.upperBound * rate + 500_000_000) / 1_000_000_000)
            guard to > from else { continue }
            let piece = from == 0 && to >= pcm.frameCount ? pcm : pcm.frames(from..<to)
            let captured = CaptureTime(nanoseconds: start.nanoseconds &+ UInt64(part.lowerBound))
            writeAudio(piece, captured: captured, rec, removed: pauses.removed(before: captured, after: rec.pauseOrigin ?? rec.firstTime!))
            if active !== rec { return }
        }
    }

    /// On the queue: audio captured at `captured`, less the pauses' `removed` nanoseconds, into
    /// the recording's file.
    private func writeAudio(_ pcm: AudioPCMBuffer, captured: CaptureTime, _ rec: Recording, removed: Int64) {
        let at = captured - rec.firstTime! - removed
        if audioPastDurationLimit(rec, at: at) { return }
        do { try rec.writer.writeAudio(pcm, at: at) } catch { finish(error: error) }
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
