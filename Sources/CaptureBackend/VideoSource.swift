// The internal contract between the object model (CaptureDevice, CaptureSession, outputs) and the
// backends that produce frames: V4L2 (`V4L2/`) and the virtual camera (`Virtual/`).
// Nothing here is public; the public model never sees V4L2.

/// One plane of an image in memory. Borrowed: valid only while its `FrameBuffer` lives.
package struct PlaneView: @unchecked Sendable {
    package var base: UnsafeRawPointer?
    /// Bytes of valid data (V4L2 `bytesused` minus `data_offset`).
    package var count: Int
    /// Bytes from one row to the next (0 for compressed data).
    package var bytesPerLine: Int
    package static let empty = PlaneView(base: nil, count: 0, bytesPerLine: 0)
    package var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base, count: count) }

    package init(base: UnsafeRawPointer?, count: Int, bytesPerLine: Int) {
        self.base = base
        self.count = count
        self.bytesPerLine = bytesPerLine
    }
}

/// An image laid out in one to three planes, as a driver delivers it. For single-planar V4L2
/// formats that hold several colour planes (NV12, YU12...) all data is in `plane0` and the
/// sub-planes follow V4L2's layout rules (the imaging layer derives them).
package struct ImageBuffer: @unchecked Sendable {
    package var pixelFormat: PixelFormat
    package var width: Int
    package var height: Int
    package var colorRange: ColorRange
    package var planeCount: Int
    package var plane0: PlaneView
    package var plane1: PlaneView = .empty
    package var plane2: PlaneView = .empty

    package init(pixelFormat: PixelFormat, width: Int, height: Int, colorRange: ColorRange, plane0: PlaneView) {
        self.pixelFormat = pixelFormat
        self.width = width
        self.height = height
        self.colorRange = colorRange
        self.planeCount = 1
        self.plane0 = plane0
    }

    package func plane(_ i: Int) -> PlaneView { i == 0 ? plane0 : (i == 1 ? plane1 : plane2) }
}

/// What the device will really deliver after a format was set (the driver may adjust a request).
package struct ActiveFormat: Sendable, Hashable {
    package var pixelFormat: PixelFormat
    package var width: Int
    package var height: Int
    /// Per plane: bytes per line and image size as the driver reports them. One entry for
    /// single-planar formats.
    package var planes: [PlaneFormat]
    package var colorRange: ColorRange
    /// The interval frames come at, when known (set by the session once the device runs).
    package var frameInterval: FrameInterval?
    package var dimensions: VideoDimensions { VideoDimensions(width: width, height: height) }
    /// Total `sizeimage` over all planes.
    package var sizeImage: Int { planes.reduce(0) { $0 + $1.sizeImage } }

    package init(pixelFormat: PixelFormat, width: Int, height: Int, planes: [PlaneFormat], colorRange: ColorRange) {
        self.pixelFormat = pixelFormat
        self.width = width
        self.height = height
        self.planes = planes
        self.colorRange = colorRange
    }
}

package struct PlaneFormat: Sendable, Hashable {
    package var bytesPerLine: Int
    package var sizeImage: Int

    package init(bytesPerLine: Int, sizeImage: Int) {
        self.bytesPerLine = bytesPerLine
        self.sizeImage = sizeImage
    }
}

/// Per-frame facts, apart from the pixels.
package struct FrameMetadata: Sendable, Hashable {
    /// The driver's sequence counter (wraps at 2^32).
    package var sequence: UInt32
    /// When the first byte was captured, on the monotonic clock.
    package var timestamp: CaptureTime
    /// Driver buffer index (for diagnostics).
    package var bufferIndex: Int

    package init(sequence: UInt32, timestamp: CaptureTime, bufferIndex: Int) {
        self.sequence = sequence
        self.timestamp = timestamp
        self.bufferIndex = bufferIndex
    }
}

/// A source's pool of buffers. A `FrameBuffer` hands its buffer back here exactly once.
package protocol BufferPool: AnyObject, Sendable {
    /// Gives buffer `index` back to the device (V4L2: `QBUF`). Called exactly once per frame,
    /// from any thread. After the stream stopped, the pool just marks the buffer free.
    func recycle(index: Int)
}

/// A frame borrowed from a source's buffer pool: a value with one owner that goes back to the
/// device exactly once, when it is consumed or dropped (deinit). It holds its pool, so the
/// mapping stays readable while the frame lives. Not copyable: to share a frame, wrap it in
/// a `SampleBuffer` (the object model's retained, reusable holder).
package struct FrameBuffer: ~Copyable, @unchecked Sendable {
    package let image: ImageBuffer
    package let metadata: FrameMetadata
    // Strong: keeps the mapping alive as long as anybody can read `image`.
    private let pool: any BufferPool

    package init(image: ImageBuffer, metadata: FrameMetadata, pool: any BufferPool) {
        self.image = image
        self.metadata = metadata
        self.pool = pool
    }

    deinit { pool.recycle(index: metadata.bufferIndex) }
}

/// What one wait for a frame produced.
package enum FrameEvent: ~Copyable, Sendable {
    /// A good frame.
    case frame(FrameBuffer)
    /// The driver flagged a buffer as damaged (`V4L2_BUF_FLAG_ERROR`, bad `bytesused`, truncated
    /// compressed data). The buffer was already requeued; its pixels are not delivered.
    case corrupt(sequence: UInt32, reason: String)
    /// Nothing arrived within the timeout.
    case timeout
    /// `wakeUp()` was called.
    case interrupted
}

extension FrameEvent {
    package var isFrame: Bool {
        switch self {
        case .frame: true
        default: false
        }
    }

    /// One line for logs and test messages.
    package var summary: String {
        switch self {
        case .frame(let f): "frame \(f.metadata.sequence) (buffer \(f.metadata.bufferIndex))"
        case .corrupt(let sequence, let reason): "corrupt frame \(sequence): \(reason)"
        case .timeout: "timeout"
        case .interrupted: "interrupted"
        }
    }
}

/// A frame rate range as the device states it.
package struct FrameIntervalSet: Sendable, Hashable {
    package enum Kind: Sendable, Hashable {
        case discrete([FrameInterval])
        case stepwise(min: FrameInterval, max: FrameInterval, step: FrameInterval)
        case continuous(min: FrameInterval, max: FrameInterval)
    }
    package var kind: Kind

    package init(kind: Kind) {
        self.kind = kind
    }
}

/// One (pixel format, size) pair a device offers, with its frame intervals.
package struct SourceFormat: Sendable, Hashable {
    package var pixelFormat: PixelFormat
    package var description: String
    package var width: Int
    package var height: Int
    package var intervals: FrameIntervalSet
    package var isCompressed: Bool
    package var isEmulated: Bool

    package init(
        pixelFormat: PixelFormat, description: String, width: Int, height: Int, intervals: FrameIntervalSet, isCompressed: Bool,
        isEmulated: Bool
    ) {
        self.pixelFormat = pixelFormat
        self.description = description
        self.width = width
        self.height = height
        self.intervals = intervals
        self.isCompressed = isCompressed
        self.isEmulated = isEmulated
    }
}

/// A control a device offers (V4L2 control or a virtual camera's).
package struct SourceControl: Sendable, Hashable {
    package enum Kind: Sendable, Hashable {
        case integer, boolean, menu, integerMenu, button, integer64, string
        case other(UInt32)
    }
    package var id: UInt32
    package var name: String
    package var kind: Kind
    package var minimum: Int64
    package var maximum: Int64
    package var step: UInt64
    package var defaultValue: Int64
    /// Menu items by value (menus only).
    package var menu: [(value: Int64, name: String)]
    package var isReadOnly: Bool
    package var isInactive: Bool

    package static func == (a: SourceControl, b: SourceControl) -> Bool {
        a.id == b.id && a.name == b.name && a.kind == b.kind && a.minimum == b.minimum && a.maximum == b.maximum
            && a.step == b.step && a.defaultValue == b.defaultValue && a.isReadOnly == b.isReadOnly
            && a.isInactive == b.isInactive && a.menu.map(\.value) == b.menu.map(\.value)
            && a.menu.map(\.name) == b.menu.map(\.name)
    }
    package func hash(into h: inout Hasher) { h.combine(id); h.combine(name) }

    package init(
        id: UInt32, name: String, kind: Kind, minimum: Int64, maximum: Int64, step: UInt64, defaultValue: Int64,
        menu: [(value: Int64, name: String)], isReadOnly: Bool, isInactive: Bool
    ) {
        self.id = id
        self.name = name
        self.kind = kind
        self.minimum = minimum
        self.maximum = maximum
        self.step = step
        self.defaultValue = defaultValue
        self.menu = menu
        self.isReadOnly = isReadOnly
        self.isInactive = isInactive
    }
}

/// Identity of a device, for discovery and the public `CaptureDevice`.
package struct SourceInfo: Sendable, Hashable {
    /// Stable across reboots where the bus allows (V4L2: driver + bus info + card).
    package var uniqueID: String
    package var name: String
    package var driver: String
    package var busInfo: String
    /// `/dev/videoN`, or `virtual:NAME` for the virtual camera.
    package var path: String
    package var position: DevicePosition

    package init(uniqueID: String, name: String, driver: String, busInfo: String, path: String, position: DevicePosition) {
        self.uniqueID = uniqueID
        self.name = name
        self.driver = driver
        self.busInfo = busInfo
        self.path = path
        self.position = position
    }
}

/// Where a camera faces.
public enum DevicePosition: String, Sendable, Hashable, CaseIterable {
    case unspecified
    /// Faces the user.
    case front
    /// Faces away from the user.
    case back
    /// A camera outside the device (USB webcam...).
    case external
}

/// An opened video device that can stream. Implementations: `V4L2VideoSource`, `VirtualVideoSource`.
/// Failures are `BackendError`s (facts, no words); the object model maps them to `CaptureError`.
///
/// Threading: configuration calls come from the session's configuration lock; `nextFrame` from
/// the one capture thread; `wakeUp` and `FrameBuffer` recycling from any thread.
package protocol VideoSource: AnyObject, Sendable {
    var info: SourceInfo { get }
    /// Every (format, size, intervals) the device offers.
    func formats() throws(BackendError) -> [SourceFormat]
    /// Sets the format; returns what the driver applied (may differ from the request).
    func setFormat(pixelFormat: PixelFormat, width: Int, height: Int) throws(BackendError) -> ActiveFormat
    /// What `setFormat` would apply, without applying it.
    func tryFormat(pixelFormat: PixelFormat, width: Int, height: Int) throws(BackendError) -> ActiveFormat
    func currentFormat() throws(BackendError) -> ActiveFormat
    /// Sets the frame interval; returns the one the driver applied.
    func setFrameInterval(_ interval: FrameInterval) throws(BackendError) -> FrameInterval
    func frameInterval() throws(BackendError) -> FrameInterval
    func controls() throws(BackendError) -> [SourceControl]
    func controlValue(_ id: UInt32) throws(BackendError) -> Int64
    func setControlValue(_ id: UInt32, _ value: Int64) throws(BackendError)
    /// Allocates `bufferCount` buffers (the driver may give more or fewer), queues them and starts.
    /// On failure nothing stays allocated and a later call may succeed.
    func startStreaming(bufferCount: Int) throws(BackendError)
    /// Waits up to `timeout` for the next frame. Throws when the device is gone (V4L2: ENODEV)
    /// or on a fatal stream error (EIO: the stream must be stopped and restarted).
    func nextFrame(timeout: Duration) throws(BackendError) -> FrameEvent
    /// Makes a waiting `nextFrame` return `.interrupted` soon. Any thread.
    func wakeUp()
    /// Stops streaming. Frames still held stay readable; their buffers are freed when released.
    func stopStreaming()
    /// Throws when another process owns the device's stream (V4L2: `REQBUFS` with count 0 fails
    /// with `EBUSY`), without claiming the stream.
    func checkAvailable() throws(BackendError)
    /// Buffers allocated for the running stream (0 when not streaming).
    var bufferCount: Int { get }
    /// Buffers currently handed out as `FrameBuffer`s and not yet recycled. When this equals
    /// `bufferCount` the device has nowhere to write: the session reports "out of buffers".
    var buffersHeldByClients: Int { get }
    /// The sequence number the device will give its next frame, where it can tell (the virtual
    /// camera); nil where only the next delivered frame says (V4L2).
    var nextSequenceNumber: UInt32? { get }
}

extension VideoSource {
    package var nextSequenceNumber: UInt32? { nil }
}

/// The kind of media a device captures or an output accepts.
public enum MediaType: String, Sendable, Hashable, CaseIterable {
    case video
    case audio
}
