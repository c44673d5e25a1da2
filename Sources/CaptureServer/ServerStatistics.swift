// The server's figures: `statistics`, the drops the session reports and the once-a-second tick
// that turns counts into rates.
import Capture
import Foundation

extension CaptureStreamServer {
    /// One stream client's figures.
    public struct ClientStatistics: Sendable, Hashable {
        /// The client's number, unique for the server's life.
        public var id: Int
        /// Parts sent (wholly or in part).
        public var framesSent: Int
        /// Frames the client skipped because it was still sending an older one.
        public var framesSkipped: Int
        /// Parts per second over the last second.
        public var fps: Double
    }

    /// The server's figures.
    public struct Statistics: Sendable, Hashable {
        /// Frames received from the session (each encoded once for every client).
        public var framesReceived: Int
        /// Frames the session lost before they reached the server, by reason.
        public var framesDropped: [DropReason: Int]
        /// Frames received per second over the last second.
        public var capturedFPS: Double
        /// The stream clients now.
        public var clients: [ClientStatistics]
        /// Stream clients refused for the client limit.
        public var clientsRefused: Int
        /// The newest frame's size.
        public var dimensions: VideoDimensions?
        /// Whether frames arrive (the camera is connected and running).
        public var isOnline: Bool
    }

    /// The server's figures now.
    public var statistics: Statistics {
        lock.withLock {
            Statistics(
                framesReceived: received, framesDropped: dropped, capturedFPS: capturedFPS,
                clients: clients.values.sorted { $0.id < $1.id }.map {
                    ClientStatistics(id: $0.id, framesSent: $0.sent, framesSkipped: $0.skipped, fps: $0.fps)
                },
                clientsRefused: refused, dimensions: newest?.dimensions, isOnline: isOnlineLocked(now: .now()))
        }
    }

    func noteDrop(_ drop: DroppedFrames) {
        lock.withLock { dropped[drop.reason, default: 0] += drop.count }
    }

    func tick() {
        connectionGuard.sweep(now: .now())
        lock.withLock {
            let now = CaptureTime.now()
            let seconds = max(Double(now - lastTick) / 1e9, 0.001)
            capturedFPS = (Double(received - receivedAtTick) / seconds * 10).rounded() / 10
            receivedAtTick = received
            for c in clients.values {
                c.fps = (Double(c.sent - c.sentAtTick) / seconds * 10).rounded() / 10
                c.sentAtTick = c.sent
            }
            lastTick = now
            resumeWaitingLocked(now: now, force: false)
            expirePendingAnswersLocked(now: now.seconds, stopping: false)
        }
    }

    func isOnlineLocked(now: CaptureTime) -> Bool {
        guard !offline, let t = lastFrameTime else { return false }
        return now - t < 2_000_000_000
    }
}
