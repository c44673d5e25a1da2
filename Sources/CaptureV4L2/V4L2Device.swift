// An open V4L2 node and its queries: capabilities, formats, sizes, intervals, format setting,
// streaming parameters, inputs and controls. No streaming here (see V4L2Stream.swift).
import CaptureBackend
import CaptureSystem
#if canImport(Glibc)
import Glibc
#endif
internal import CV4L2Shim

/// One entry of `VIDIOC_ENUM_FMT`.
package struct V4L2FormatDescription: Sendable, Hashable {
    package var pixelFormat: PixelFormat
    package var description: String
    package var isCompressed: Bool
    /// Converted in software by libv4l or the driver (`V4L2_FMT_FLAG_EMULATED`).
    package var isEmulated: Bool
}

/// One entry of `VIDIOC_ENUM_FRAMESIZES`.
package enum V4L2FrameSize: Sendable, Hashable {
    case discrete(width: Int, height: Int)
    case stepwise(minWidth: Int, maxWidth: Int, stepWidth: Int, minHeight: Int, maxHeight: Int, stepHeight: Int)
    case continuous(minWidth: Int, maxWidth: Int, minHeight: Int, maxHeight: Int)
}

/// One entry of `VIDIOC_ENUMINPUT`.
package struct V4L2Input: Sendable, Hashable {
    package var index: Int
    package var name: String
    /// `V4L2_INPUT_TYPE_CAMERA` (2) or `_TUNER` (1).
    package var type: UInt32
    package var isCamera: Bool { type == 2 }
}

/// An open video4linux node. All queries go through the syscall funnel.
///
/// Thread-safe: it holds no mutable state; the kernel serialises calls on the descriptor.
package final class V4L2Device: Sendable {
    package let fd: FileDescriptor
    package let capability: V4L2Capability
    /// Capture buffer type of this node; nil for nodes that cannot capture video.
    package let bufferType: V4L2BufferType?
    package var path: String { fd.path }

    private init(fd: FileDescriptor, capability: V4L2Capability) {
        self.fd = fd
        self.capability = capability
        self.bufferType = capability.captureBufferType
    }

    /// Opens any V4L2 node (capture or not) and reads its capabilities.
    package static func openNode(_ path: String) throws(BackendError) -> V4L2Device {
        let fd = try FileDescriptor.open(path)
        guard try fd.isCharacterDevice() else {
            throw BackendError.video(.notADeviceNode, path, operation: "open")
        }
        var caps = v4l2_capability()
        try fd.ioctl(.queryCapability, &caps)
        return V4L2Device(fd: fd, capability: V4L2Capability(caps))
    }

    /// Opens a node and checks that it is a camera (video capture, single- or multi-planar).
    package static func open(_ path: String) throws(BackendError) -> V4L2Device {
        let device = try openNode(path)
        guard device.bufferType != nil else {
            throw BackendError.video(
                .notACamera(card: device.capability.card, nodeKind: device.capability.nodeKind), path,
                operation: "VIDIOC_QUERYCAP")
        }
        return device
    }

    private var type: V4L2BufferType { bufferType ?? .videoCapture }

    // MARK: Formats

    /// `VIDIOC_ENUM_FMT` for the node's capture type.
    package func formatDescriptions() throws(BackendError) -> [V4L2FormatDescription] {
        var out: [V4L2FormatDescription] = []
        var index: UInt32 = 0
        while true {
            var d = v4l2_fmtdesc()
            d.index = index
            d.type = type.rawValue
            if let e = withUnsafeMutablePointer(to: &d, { fd.ioctlErrno(.enumerateFormat, $0) }) {
                if e == .invalidArgument { break }  // end of the list
                throw BackendError.video(e, "VIDIOC_ENUM_FMT", path)
            }
            out.append(
                V4L2FormatDescription(
                    pixelFormat: PixelFormat(rawValue: d.pixelformat), description: String(v4l2Chars: d.description),
                    isCompressed: d.flags & UInt32(V4L2_FMT_FLAG_COMPRESSED) != 0,
                    isEmulated: d.flags & UInt32(V4L2_FMT_FLAG_EMULATED) != 0))
            index += 1
        }
        return out
    }

    /// `VIDIOC_ENUM_FRAMESIZES`. Empty when the driver does not enumerate sizes (ENOTTY).
    package func frameSizes(_ pixelFormat: PixelFormat) throws(BackendError) -> [V4L2FrameSize] {
        var out: [V4L2FrameSize] = []
        var index: UInt32 = 0
        while true {
            var s = v4l2_frmsizeenum()
            s.index = index
            s.pixel_format = pixelFormat.rawValue
            if let e = withUnsafeMutablePointer(to: &s, { fd.ioctlErrno(.enumerateFrameSizes, $0) }) {
                if e == .invalidArgument || e == .inappropriateIoctl { break }
                throw BackendError.video(e, "VIDIOC_ENUM_FRAMESIZES", path)
            }
            switch s.type {
            case V4L2_FRMSIZE_TYPE_DISCRETE.rawValue:
                out.append(.discrete(width: Int(s.discrete.width), height: Int(s.discrete.height)))
            case V4L2_FRMSIZE_TYPE_STEPWISE.rawValue:
                let w = s.stepwise
                out.append(
                    .stepwise(
                        minWidth: Int(w.min_width), maxWidth: Int(w.max_width), stepWidth: Int(w.step_width),
                        minHeight: Int(w.min_height), maxHeight: Int(w.max_height), stepHeight: Int(w.step_height)))
                return out  // stepwise and continuous have exactly one entry
            default:
                let w = s.stepwise
                out.append(
                    .continuous(
                        minWidth: Int(w.min_width), maxWidth: Int(w.max_width),
                        minHeight: Int(w.min_height), maxHeight: Int(w.max_height)))
                return out
            }
            index += 1
        }
        return out
    }

    /// `VIDIOC_ENUM_FRAMEINTERVALS`. nil when the driver does not enumerate intervals.
    package func frameIntervals(_ pixelFormat: PixelFormat, width: Int, height: Int) throws(BackendError) -> FrameIntervalSet? {
        var discrete: [FrameInterval] = []
        var index: UInt32 = 0
        while true {
            var f = v4l2_frmivalenum()
            f.index = index
            f.pixel_format = pixelFormat.rawValue
            f.width = UInt32(clamping: width)
            f.height = UInt32(clamping: height)
            if let e = withUnsafeMutablePointer(to: &f, { fd.ioctlErrno(.enumerateFrameIntervals, $0) }) {
                if e == .invalidArgument || e == .inappropriateIoctl { break }
                throw BackendError.video(e, "VIDIOC_ENUM_FRAMEINTERVALS", path)
            }
            switch f.type {
            case V4L2_FRMIVAL_TYPE_DISCRETE.rawValue:
                discrete.append(FrameInterval(f.discrete))
            case V4L2_FRMIVAL_TYPE_STEPWISE.rawValue:
                return FrameIntervalSet(
                    kind: .stepwise(
                        min: FrameInterval(f.stepwise.min), max: FrameInterval(f.stepwise.max),
                        step: FrameInterval(f.stepwise.step)))
            default:
                return FrameIntervalSet(kind: .continuous(min: FrameInterval(f.stepwise.min), max: FrameInterval(f.stepwise.max)))
            }
            index += 1
        }
        return discrete.isEmpty ? nil : FrameIntervalSet(kind: .discrete(discrete))
    }

    /// Every (format, size, intervals). Stepwise and continuous size ranges appear as their
    /// smallest and largest size.
    package func sourceFormats() throws(BackendError) -> [SourceFormat] {
        var out: [SourceFormat] = []
        for d in try formatDescriptions() {
            var sizes: [(Int, Int)] = []
            for s in try frameSizes(d.pixelFormat) {
                switch s {
                case .discrete(let w, let h): sizes.append((w, h))
                case .stepwise(let w0, let w1, _, let h0, let h1, _), .continuous(let w0, let w1, let h0, let h1):
                    sizes.append((w0, h0))
                    if w1 != w0 || h1 != h0 { sizes.append((w1, h1)) }
                }
            }
            if sizes.isEmpty, let current = try? format(), current.pixelFormat == d.pixelFormat {
                sizes.append((current.width, current.height))
            }
            for (w, h) in sizes {
                let intervals = try frameIntervals(d.pixelFormat, width: w, height: h) ?? FrameIntervalSet(kind: .discrete([]))
                out.append(
                    SourceFormat(
                        pixelFormat: d.pixelFormat, description: d.description, width: w, height: h,
                        intervals: intervals, isCompressed: d.isCompressed, isEmulated: d.isEmulated))
            }
        }
        return out
    }

    /// `VIDIOC_G_FMT`.
    package func format() throws(BackendError) -> ActiveFormat {
        var f = v4l2_format()
        f.type = type.rawValue
        try fd.ioctl(.getFormat, &f)
        return activeFormat(f)
    }

    /// `VIDIOC_S_FMT`: returns what the driver applied; the size may differ from the request
    /// (the driver picks the nearest it can do). A pixel format the node does not list is
    /// refused with `.unsupportedFormat` before the device is touched (drivers would silently
    /// substitute another).
    package func setFormat(_ pixelFormat: PixelFormat, width: Int, height: Int) throws(BackendError) -> ActiveFormat {
        try requireOffered(pixelFormat, operation: "VIDIOC_S_FMT")
        var f = request(pixelFormat, width: width, height: height)
        try fd.ioctl(.setFormat, &f)
        return activeFormat(f)
    }

    /// `VIDIOC_TRY_FMT`: what `setFormat` would apply.
    package func tryFormat(_ pixelFormat: PixelFormat, width: Int, height: Int) throws(BackendError) -> ActiveFormat {
        try requireOffered(pixelFormat, operation: "VIDIOC_TRY_FMT")
        var f = request(pixelFormat, width: width, height: height)
        try fd.ioctl(.tryFormat, &f)
        return activeFormat(f)
    }

    private func requireOffered(_ pixelFormat: PixelFormat, operation: String) throws(BackendError) {
        let offered = try formatDescriptions().map(\.pixelFormat)
        guard offered.contains(pixelFormat) else {
            throw BackendError.video(.formatNotOffered(pixelFormat, offered: offered), path, operation: operation)
        }
    }

    private func request(_ pixelFormat: PixelFormat, width: Int, height: Int) -> v4l2_format {
        var f = v4l2_format()
        f.type = type.rawValue
        if type.isMultiplanar {
            f.fmt.pix_mp.width = UInt32(clamping: width)
            f.fmt.pix_mp.height = UInt32(clamping: height)
            f.fmt.pix_mp.pixelformat = pixelFormat.rawValue
            f.fmt.pix_mp.field = V4L2Field.none.rawValue
        } else {
            f.fmt.pix.width = UInt32(clamping: width)
            f.fmt.pix.height = UInt32(clamping: height)
            f.fmt.pix.pixelformat = pixelFormat.rawValue
            f.fmt.pix.field = V4L2Field.none.rawValue
        }
        return f
    }

    private func activeFormat(_ f: v4l2_format) -> ActiveFormat {
        if type.isMultiplanar {
            let p = f.fmt.pix_mp
            let pf = PixelFormat(rawValue: p.pixelformat)
            let count = Int(min(p.num_planes, 8))
            let planes = withUnsafeBytes(of: p.plane_fmt) { raw in
                (0..<count).map { i in
                    let pl = raw.loadUnaligned(
                        fromByteOffset: i * MemoryLayout<v4l2_plane_pix_format>.stride,
                        as: v4l2_plane_pix_format.self)
                    return PlaneFormat(bytesPerLine: Int(pl.bytesperline), sizeImage: Int(pl.sizeimage))
                }
            }
            return ActiveFormat(
                pixelFormat: pf, width: Int(p.width), height: Int(p.height), planes: planes,
                colorRange: colorRange(
                    quantization: UInt32(p.quantization), colorspace: p.colorspace,
                    pixelFormat: pf))
        }
        let p = f.fmt.pix
        let pf = PixelFormat(rawValue: p.pixelformat)
        return ActiveFormat(
            pixelFormat: pf, width: Int(p.width), height: Int(p.height),
            planes: [PlaneFormat(bytesPerLine: Int(p.bytesperline), sizeImage: Int(p.sizeimage))],
            colorRange: colorRange(quantization: p.quantization, colorspace: p.colorspace, pixelFormat: pf))
    }

    // MARK: Streaming parameters

    /// `VIDIOC_G_PARM`: the current frame interval, or nil when the driver does not report one.
    package func frameInterval() throws(BackendError) -> FrameInterval? {
        var p = v4l2_streamparm()
        p.type = type.rawValue
        if let e = withUnsafeMutablePointer(to: &p, { fd.ioctlErrno(.getParameters, $0) }) {
            if e == .inappropriateIoctl || e == .invalidArgument { return nil }
            throw BackendError.video(e, "VIDIOC_G_PARM", path)
        }
        let t = p.parm.capture.timeperframe
        guard t.numerator != 0, t.denominator != 0 else { return nil }
        return FrameInterval(t)
    }

    /// `VIDIOC_S_PARM`: returns the interval the driver applied.
    package func setFrameInterval(_ interval: FrameInterval) throws(BackendError) -> FrameInterval {
        var p = v4l2_streamparm()
        p.type = type.rawValue
        p.parm.capture.timeperframe = interval.v4l2
        try fd.ioctl(.setParameters, &p)
        guard p.parm.capture.capability & UInt32(V4L2_CAP_TIMEPERFRAME) != 0 else {
            throw BackendError.video(.frameIntervalNotSettable, path, operation: "VIDIOC_S_PARM")
        }
        return FrameInterval(p.parm.capture.timeperframe)
    }

    // MARK: Inputs

    /// `VIDIOC_ENUMINPUT`.
    package func inputs() throws(BackendError) -> [V4L2Input] {
        var out: [V4L2Input] = []
        var index: UInt32 = 0
        while true {
            var i = v4l2_input()
            i.index = index
            if let e = withUnsafeMutablePointer(to: &i, { fd.ioctlErrno(.enumerateInput, $0) }) {
                if e == .invalidArgument || e == .inappropriateIoctl { break }
                throw BackendError.video(e, "VIDIOC_ENUMINPUT", path)
            }
            out.append(V4L2Input(index: Int(i.index), name: String(v4l2Chars: i.name), type: i.type))
            index += 1
        }
        return out
    }

    /// `VIDIOC_G_INPUT`.
    package func currentInput() throws(BackendError) -> Int {
        var i: Int32 = 0
        try fd.ioctl(.getInput, &i)
        return Int(i)
    }

    /// `VIDIOC_S_INPUT`.
    package func selectInput(_ index: Int) throws(BackendError) {
        var i = Int32(clamping: index)
        if let e = withUnsafeMutablePointer(to: &i, { fd.ioctlErrno(.setInput, $0) }) {
            if e == .invalidArgument {
                throw BackendError.video(.noSuchInput(index), path, operation: "VIDIOC_S_INPUT", errno: e)
            }
            throw BackendError.video(e, "VIDIOC_S_INPUT", path)
        }
    }

    // MARK: Controls

    /// Every control, by `VIDIOC_QUERY_EXT_CTRL` with `NEXT_CTRL | NEXT_COMPOUND`; control class
    /// headings and disabled controls are left out; menus carry their items (`VIDIOC_QUERYMENU`).
    package func controls() throws(BackendError) -> [SourceControl] {
        var out: [SourceControl] = []
        let next = UInt32(V4L2_CTRL_FLAG_NEXT_CTRL) | UInt32(V4L2_CTRL_FLAG_NEXT_COMPOUND)
        var id: UInt32 = 0
        while true {
            var q = v4l2_query_ext_ctrl()
            q.id = id | next
            if let e = withUnsafeMutablePointer(to: &q, { fd.ioctlErrno(.queryExtendedControl, $0) }) {
                if e == .invalidArgument || e == .inappropriateIoctl { break }
                throw BackendError.video(e, "VIDIOC_QUERY_EXT_CTRL", path)
            }
            guard q.id > id || id == 0 else { break }  // a driver that does not advance would loop forever
            id = q.id
            if q.type == V4L2_CTRL_TYPE_CTRL_CLASS.rawValue || q.flags & UInt32(V4L2_CTRL_FLAG_DISABLED) != 0 { continue }
            out.append(try control(q))
        }
        return out
    }

    private func control(_ q: v4l2_query_ext_ctrl) throws(BackendError) -> SourceControl {
        let kind: SourceControl.Kind
        switch q.type {
        case V4L2_CTRL_TYPE_INTEGER.rawValue: kind = .integer
        case V4L2_CTRL_TYPE_BOOLEAN.rawValue: kind = .boolean
        case V4L2_CTRL_TYPE_MENU.rawValue: kind = .menu
        case V4L2_CTRL_TYPE_INTEGER_MENU.rawValue: kind = .integerMenu
        case V4L2_CTRL_TYPE_BUTTON.rawValue: kind = .button
        case V4L2_CTRL_TYPE_INTEGER64.rawValue: kind = .integer64
        case V4L2_CTRL_TYPE_STRING.rawValue: kind = .string
        default: kind = .other(q.type)
        }
        var menu: [(value: Int64, name: String)] = []
        if kind == .menu || kind == .integerMenu, q.minimum >= 0, q.maximum >= q.minimum, q.maximum - q.minimum < 1024 {
            for index in q.minimum...q.maximum {
                var m = v4l2_querymenu()
                m.id = q.id
                m.index = UInt32(index)
                if let e = withUnsafeMutablePointer(to: &m, { fd.ioctlErrno(.queryMenu, $0) }) {
                    if e == .invalidArgument { continue }  // a gap in the menu (skip_mask)
                    throw BackendError.video(e, "VIDIOC_QUERYMENU", path)
                }
                menu.append((value: index, name: kind == .menu ? String(v4l2Chars: m.name) : String(m.value)))
            }
        }
        let flags = q.flags
        return SourceControl(
            id: q.id, name: String(v4l2Chars: q.name), kind: kind, minimum: q.minimum, maximum: q.maximum,
            step: q.step, defaultValue: q.default_value, menu: menu,
            isReadOnly: flags & (UInt32(V4L2_CTRL_FLAG_READ_ONLY) | UInt32(V4L2_CTRL_FLAG_GRABBED)) != 0,
            isInactive: flags & UInt32(V4L2_CTRL_FLAG_INACTIVE) != 0)
    }

    /// The control's type, or nil when the device has no such control.
    private func controlType(_ id: UInt32) -> UInt32? {
        var q = v4l2_query_ext_ctrl()
        q.id = id
        if withUnsafeMutablePointer(to: &q, { fd.ioctlErrno(.queryExtendedControl, $0) }) != nil { return nil }
        return q.type
    }

    /// `VIDIOC_G_EXT_CTRLS` for one control (64-bit controls through `value64`).
    package func controlValue(_ id: UInt32) throws(BackendError) -> Int64 {
        var v: Int64 = 0
        let wide = controlType(id) == V4L2_CTRL_TYPE_INTEGER64.rawValue
        let raw = fd.rawValue
        try fd.call("VIDIOC_G_EXT_CTRLS") { wide ? cv4l2_get_ext_ctrl64(raw, id, &v) : cv4l2_get_ext_ctrl(raw, id, &v) }
        return v
    }

    /// `VIDIOC_S_EXT_CTRLS` for one control. Buttons (e.g. vivid's fault injectors) take any value.
    package func setControlValue(_ id: UInt32, _ value: Int64) throws(BackendError) {
        let type = controlType(id)
        guard let type else {
            throw BackendError.video(.noSuchControl(id), path, operation: "VIDIOC_QUERY_EXT_CTRL")
        }
        let raw = fd.rawValue
        if type == V4L2_CTRL_TYPE_INTEGER64.rawValue {
            try fd.call("VIDIOC_S_EXT_CTRLS") { cv4l2_set_ext_ctrl64(raw, id, value) }
        } else {
            guard let v32 = Int32(exactly: value) else {
                throw BackendError.video(.valueOutOfRange(value, control: id), path, operation: "VIDIOC_S_EXT_CTRLS")
            }
            try fd.call("VIDIOC_S_EXT_CTRLS") { cv4l2_set_ext_ctrl(raw, id, Int64(v32)) }
        }
    }

    /// Finds a control by its name as the driver spells it ("Test Pattern", case-insensitive) or
    /// as `v4l2-ctl` prints it ("test_pattern").
    package func controlID(named name: String) throws(BackendError) -> UInt32? {
        let wanted = Self.shortName(name)
        return try controls().first { Self.shortName($0.name) == wanted }?.id
    }

    /// A control name as `v4l2-ctl` spells it: lower case, runs of other characters become one
    /// `_` between words ("Inject V4L2 Buffer Error" becomes "inject_v4l2_buffer_error").
    package static func shortName(_ name: String) -> String {
        var out = ""
        var pendingUnderscore = false
        for c in name.unicodeScalars {
            let isAlnum = c.isASCII && (("a"..."z").contains(c) || ("A"..."Z").contains(c) || ("0"..."9").contains(c))
            if isAlnum {
                if pendingUnderscore { out += "_" }
                pendingUnderscore = false
                out.unicodeScalars.append(contentsOf: String(c).lowercased().unicodeScalars)
            } else if !out.isEmpty {
                pendingUnderscore = true
            }
        }
        return out
    }

    /// Where the camera faces, from `V4L2_CID_CAMERA_ORIENTATION`; nil when the device lacks it.
    package func orientation() -> DevicePosition? {
        let id = UInt32(V4L2_CID_CAMERA_ORIENTATION)
        guard controlType(id) != nil else { return nil }
        var v: Int64 = 0
        let raw = fd.rawValue
        if fd.callErrno("VIDIOC_G_EXT_CTRLS", { cv4l2_get_ext_ctrl(raw, id, &v) }) != nil { return nil }
        switch v {
        case Int64(V4L2_CAMERA_ORIENTATION_FRONT): return .front
        case Int64(V4L2_CAMERA_ORIENTATION_BACK): return .back
        case Int64(V4L2_CAMERA_ORIENTATION_EXTERNAL): return .external
        default: return .unspecified
        }
    }
}
