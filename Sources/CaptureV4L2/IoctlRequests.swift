internal import CV4L2Shim
import CaptureSystem

// The V4L2 requests the backend issues through the funnel.
extension IoctlRequest {
    package static let queryCapability = IoctlRequest(code: CV4L2_VIDIOC_QUERYCAP, name: "VIDIOC_QUERYCAP")
    package static let enumerateFormat = IoctlRequest(code: CV4L2_VIDIOC_ENUM_FMT, name: "VIDIOC_ENUM_FMT")
    package static let getFormat = IoctlRequest(code: CV4L2_VIDIOC_G_FMT, name: "VIDIOC_G_FMT")
    package static let setFormat = IoctlRequest(code: CV4L2_VIDIOC_S_FMT, name: "VIDIOC_S_FMT")
    package static let tryFormat = IoctlRequest(code: CV4L2_VIDIOC_TRY_FMT, name: "VIDIOC_TRY_FMT")
    package static let enumerateFrameSizes = IoctlRequest(code: CV4L2_VIDIOC_ENUM_FRAMESIZES, name: "VIDIOC_ENUM_FRAMESIZES")
    package static let enumerateFrameIntervals = IoctlRequest(
        code: CV4L2_VIDIOC_ENUM_FRAMEINTERVALS, name: "VIDIOC_ENUM_FRAMEINTERVALS")
    package static let getParameters = IoctlRequest(code: CV4L2_VIDIOC_G_PARM, name: "VIDIOC_G_PARM")
    package static let setParameters = IoctlRequest(code: CV4L2_VIDIOC_S_PARM, name: "VIDIOC_S_PARM")
    package static let enumerateInput = IoctlRequest(code: CV4L2_VIDIOC_ENUMINPUT, name: "VIDIOC_ENUMINPUT")
    package static let getInput = IoctlRequest(code: CV4L2_VIDIOC_G_INPUT, name: "VIDIOC_G_INPUT")
    package static let setInput = IoctlRequest(code: CV4L2_VIDIOC_S_INPUT, name: "VIDIOC_S_INPUT")
    package static let queryExtendedControl = IoctlRequest(code: CV4L2_VIDIOC_QUERY_EXT_CTRL, name: "VIDIOC_QUERY_EXT_CTRL")
    package static let queryMenu = IoctlRequest(code: CV4L2_VIDIOC_QUERYMENU, name: "VIDIOC_QUERYMENU")
    package static let requestBuffers = IoctlRequest(code: CV4L2_VIDIOC_REQBUFS, name: "VIDIOC_REQBUFS")
    package static let queryBuffer = IoctlRequest(code: CV4L2_VIDIOC_QUERYBUF, name: "VIDIOC_QUERYBUF")
    package static let queueBuffer = IoctlRequest(code: CV4L2_VIDIOC_QBUF, name: "VIDIOC_QBUF")
    package static let dequeueBuffer = IoctlRequest(code: CV4L2_VIDIOC_DQBUF, name: "VIDIOC_DQBUF")
    package static let streamOn = IoctlRequest(code: CV4L2_VIDIOC_STREAMON, name: "VIDIOC_STREAMON")
    package static let streamOff = IoctlRequest(code: CV4L2_VIDIOC_STREAMOFF, name: "VIDIOC_STREAMOFF")
}
