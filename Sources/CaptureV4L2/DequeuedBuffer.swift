// What one dequeued buffer is: its format, its defects, and the buffer itself until it goes back.
import CaptureBackend
import CaptureSystem
#if canImport(Glibc)
import Glibc
#endif
internal import CV4L2Shim

/// Why a dequeued buffer must not be delivered.
package enum V4L2BufferDefect: UInt8, Sendable {
    case none
    /// `V4L2_BUF_FLAG_ERROR`.
    case errorFlag
    /// `bytesused` is 0.
    case empty
    /// `bytesused` is larger than the mapped length.
    case overrun
    /// `data_offset` is beyond `bytesused`.
    case badDataOffset
    /// Fewer bytes than the format's `sizeimage` for an uncompressed format.
    case truncated

    package var reason: String {
        switch self {
        case .none: "none"
        case .errorFlag: "the driver flagged the buffer as damaged (V4L2_BUF_FLAG_ERROR)"
        case .empty: "the driver returned an empty buffer (bytesused 0)"
        case .overrun: "bytesused is larger than the buffer"
        case .badDataOffset: "data_offset is beyond bytesused"
        case .truncated: "the frame is shorter than the format's image size"
        }
    }
}

/// The format snapshot a pool streams with: what each frame's `ImageBuffer` says.
package struct V4L2StreamFormat: Sendable {
    package var pixelFormat: PixelFormat
    package var width: Int
    package var height: Int
    package var colorRange: ColorRange
    package var planeCount: Int
    package var bytesPerLine: (Int, Int, Int)
    package var sizeImage: (Int, Int, Int)
    package var isCompressed: Bool

    package init(_ f: ActiveFormat) {
        pixelFormat = f.pixelFormat
        width = f.width
        height = f.height
        colorRange = f.colorRange
        planeCount = max(1, min(3, f.planes.count))
        func at(_ i: Int) -> PlaneFormat { i < f.planes.count ? f.planes[i] : PlaneFormat(bytesPerLine: 0, sizeImage: 0) }
        bytesPerLine = (at(0).bytesPerLine, at(1).bytesPerLine, at(2).bytesPerLine)
        sizeImage = (at(0).sizeImage, at(1).sizeImage, at(2).sizeImage)
        isCompressed = f.pixelFormat.isCompressed
    }
}

/// A buffer taken from the driver by `DQBUF`. It goes back exactly once: turned into a
/// `FrameBuffer` (which requeues when released) or requeued when this value is dropped.
package struct DequeuedBuffer: ~Copyable {
    package let index: Int
    package let sequence: UInt32
    package let timestamp: CaptureTime
    package let timestampClock: V4L2TimestampClock
    package let flags: V4L2BufferFlags
    package let field: V4L2Field
    /// Why the pixels must not be delivered, or `.none`.
    package let defect: V4L2BufferDefect
    package let planeCount: Int
    /// Valid data per plane (after `data_offset`), inside the mapping.
    package let plane0: PlaneView
    package let plane1: PlaneView
    package let plane2: PlaneView
    // Retained; trivially destructible so `discard self` can hand it to a FrameBuffer.
    private let pool: Unmanaged<V4L2BufferPool>

    init(
        index: Int, sequence: UInt32, timestamp: CaptureTime, flags: V4L2BufferFlags, field: V4L2Field,
        defect: V4L2BufferDefect, planeCount: Int, planes: (PlaneView, PlaneView, PlaneView),
        pool: V4L2BufferPool
    ) {
        self.index = index
        self.sequence = sequence
        self.timestamp = timestamp
        self.timestampClock = flags.timestampClock
        self.flags = flags
        self.field = field
        self.defect = defect
        self.planeCount = planeCount
        (plane0, plane1, plane2) = planes
        self.pool = Unmanaged.passRetained(pool)
    }

    deinit {
        let p = pool.takeRetainedValue()
        p.recycle(index: index)
    }

    package var metadata: FrameMetadata { FrameMetadata(sequence: sequence, timestamp: timestamp, bufferIndex: index) }

    /// Hands the buffer to a `FrameBuffer` that views the mapping (no copy) and requeues it
    /// when its last reference goes away.
    consuming func frameBuffer() -> FrameBuffer {
        let p = pool.takeRetainedValue()
        let f = p.format
        var image = ImageBuffer(
            pixelFormat: f.pixelFormat, width: f.width, height: f.height, colorRange: f.colorRange,
            plane0: plane0)
        image.planeCount = planeCount
        image.plane1 = plane1
        image.plane2 = plane2
        let frame = FrameBuffer(image: image, metadata: metadata, pool: p)
        discard self
        return frame
    }

    /// Gives the buffer back to the driver now (what dropping it does too).
    consuming func requeue() {}
}
