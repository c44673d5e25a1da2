import CaptureBackend
import CaptureSystem
import Synchronization

/// What an output takes of its input's frames. Decided when a configuration commits (and again
/// when the output's settings change, see `CaptureOutput.subscriptionChanged()`), so the capture
/// thread and the encoder threads never ask an output per frame.
struct FrameSubscription: Sendable, Equatable {
    /// The JPEG the output wants of raw frames instead of the frames themselves: the input's JPEG
    /// stage makes it once per frame for every output that wants it. nil: raw frames.
    var jpeg: JPEGProduct?
    /// Encoder threads the output would like for `jpeg`.
    var jpegThreads = 1
    /// A still output's pending captures: while one waits, the output takes the newest frame (the
    /// capture thread skips frames queued behind it) and may take a JPEG made for another output.
    var stills: StillDemand?
    /// A product of a package product's stage (H.264) instead of the frames: made once per frame
    /// for every consumer that asks for an equal one.
    var encoded: EncodedProduct?
    /// Takes nothing for now, drops included (a consumer that gets its frames elsewhere meanwhile).
    var off = false

    static func == (a: Self, b: Self) -> Bool {
        a.jpeg == b.jpeg && a.jpegThreads == b.jpegThreads && a.stills === b.stills && a.encoded == b.encoded && a.off == b.off
    }
}

/// Whether a still output has captures waiting; the output sets it whenever its queue of
/// captures changes, the capture thread reads it with one atomic load per frame. Any thread.
final class StillDemand: Sendable {
    private let pending = Atomic<Bool>(false)
    var isPending: Bool { pending.load(ordering: .acquiring) }
    func set(_ value: Bool) { pending.store(value, ordering: .releasing) }
}

/// One connection, its output and what the output takes, as a capture thread calls them. The
/// strong reference keeps the output alive for as long as a call into it may run (a connection
/// holds its output weakly).
struct Route: Sendable {
    let connection: CaptureConnection
    let output: CaptureOutput
    let subscription: FrameSubscription

    /// Whether the output waits for the newest frame now (a pending still).
    var wantsNewestFrame: Bool { subscription.stills?.isPending == true }

    static func of(_ connections: [CaptureConnection]) -> [Route] {
        connections.compactMap { c in c.output.map { Route(connection: c, output: $0, subscription: $0.subscription) } }
    }
}

/// The routes of one running input. Its capture thread calls outputs only inside `withRoutes`,
/// under the table's lock, so when `replace` returns no call into a removed output is running
/// and none starts later. The calls under the lock are the outputs' own short, non-blocking hooks
/// (`handleFrame`, `handleDrop`, `handleAudio`), never app code.
final class RouteTable: Sendable {
    private let routes: Locked<[Route]>
    /// Counts `replace` calls: a stage sees that its consumers may have changed.
    private let replaced = Atomic<UInt64>(0)
    var generation: UInt64 { replaced.load(ordering: .acquiring) }

    init(_ connections: [CaptureConnection]) { routes = Locked(Route.of(connections)) }

    /// Waits for a delivery in progress, then swaps in the new routes (with each output's
    /// subscription as it is now). Never called under this table's lock.
    func replace(with connections: [CaptureConnection]) {
        let new = Route.of(connections)
        let old = routes.withLock { r in
            defer {
                r = new
                replaced.add(1, ordering: .releasing)
            }
            return r
        }
        // A removed output may be freed here, outside the lock.
        _ = consume old
    }

    /// Runs `body` with the current routes; `replace` waits until it returns.
    func withRoutes<R>(_ body: ([Route]) -> R) -> R { routes.withLock { body($0) } }
    /// A copy of the routes, for calls that must not run under the lock (`inputDidStop`).
    var snapshot: [Route] { routes.withLock { $0 } }
}
