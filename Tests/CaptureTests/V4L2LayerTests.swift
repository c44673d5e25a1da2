// Host tests of the V4L2 layer: the parts that need no device.
import CaptureV4L2
import CaptureBackend
import CaptureSystem
import Testing
import Glibc
import Foundation
@testable import Capture
import CV4L2Shim

@Suite struct V4L2ArithmeticTests {
    @Test func fourCCMatchesKernelConstants() {
        // Values of V4L2_PIX_FMT_* (v4l2_fourcc is a macro Swift cannot import).
        #expect(PixelFormat.yuyv.rawValue == 0x5659_5559)
        #expect(PixelFormat.mjpeg.rawValue == 0x4750_4A4D)
        #expect(PixelFormat.nv12m.rawValue == 0x3231_4D4E)
        #expect(PixelFormat(rawValue: 0x3231_4D4E).description == "NM12")
        #expect(PixelFormat(rawValue: 0x3231_4D4E | 0x8000_0000).fourCC == "NM12-BE")
    }

    @Test func defaultQuantizationDependsOnFormat() {
        #expect(colorRange(quantization: 0, colorspace: 8, pixelFormat: .yuyv) == .limited)  // SRGB, YUV
        #expect(colorRange(quantization: 0, colorspace: 8, pixelFormat: .rgb24) == .full)
        #expect(colorRange(quantization: 0, colorspace: 8, pixelFormat: .xbgr32) == .full)
        #expect(colorRange(quantization: 0, colorspace: 8, pixelFormat: .mjpeg) == .full)
        #expect(colorRange(quantization: 0, colorspace: 7, pixelFormat: .yuyv) == .full)  // V4L2_COLORSPACE_JPEG
        #expect(colorRange(quantization: 1, colorspace: 8, pixelFormat: .nv12) == .full)
        #expect(colorRange(quantization: 2, colorspace: 8, pixelFormat: .rgb24) == .limited)
        #expect(colorRange(quantization: 0, colorspace: 0, pixelFormat: PixelFormat(fourCC: "BA81")!) == .full)  // Bayer
    }

    @Test func frameIntervalFromFraction() {
        let f = FrameInterval(v4l2_fract(numerator: 1001, denominator: 30000))
        #expect(f.numerator == 1001 && f.denominator == 30000)
        #expect(abs(f.framesPerSecond - 29.97) < 0.001)
        #expect(f.v4l2.numerator == 1001)
        #expect(FrameInterval(numerator: 1000, denominator: 30000).reduced == FrameInterval(numerator: 1, denominator: 30))
        #expect(FrameInterval(numerator: 2, denominator: 60).isEquivalent(to: FrameInterval(numerator: 1, denominator: 30)))
        #expect(!FrameInterval(numerator: 1, denominator: 30).isEquivalent(to: FrameInterval(numerator: 1, denominator: 25)))
    }

    @Test func stepwiseIntervalsExpandExactly() {
        let steps = FrameInterval.steps(
            min: FrameInterval(numerator: 1, denominator: 30),
            max: FrameInterval(numerator: 1, denominator: 10),
            step: FrameInterval(numerator: 1, denominator: 30))
        #expect(
            steps == [
                FrameInterval(numerator: 1, denominator: 30), FrameInterval(numerator: 1, denominator: 15),
                FrameInterval(numerator: 1, denominator: 10),
            ])
        let capped = FrameInterval.steps(
            min: FrameInterval(numerator: 1, denominator: 1000),
            max: FrameInterval(numerator: 1, denominator: 1),
            step: FrameInterval(numerator: 1, denominator: 1000), limit: 5)
        #expect(capped.count == 5)
        let noStep = FrameInterval.steps(
            min: FrameInterval(numerator: 1, denominator: 60),
            max: FrameInterval(numerator: 1, denominator: 5),
            step: FrameInterval(numerator: 0, denominator: 1))
        #expect(noStep == [FrameInterval(numerator: 1, denominator: 60), FrameInterval(numerator: 1, denominator: 5)])
    }

    @Test func timestampsWrapWithoutTrapping() {
        // 64-bit wrap (vivid wrap_timestamp=1 starts 16 s before 2^63 ns).
        let beforeNs = Int64.max - 500_000_000
        let before = CaptureTime(timeval(tv_sec: Int(beforeNs / 1_000_000_000), tv_usec: Int(beforeNs % 1_000_000_000 / 1000)))
        // 1 s later the signed nanosecond count has wrapped; the kernel's timeval has a negative second.
        let afterNs = beforeNs &+ 1_000_000_000
        var sec = afterNs / 1_000_000_000, rem = afterNs % 1_000_000_000
        if rem < 0 { sec -= 1; rem += 1_000_000_000 }
        let after = CaptureTime(timeval(tv_sec: Int(sec), tv_usec: Int(rem / 1000)))
        // timeval has microseconds: each side loses under 1 µs.
        #expect(abs(after - before - 1_000_000_000) < 1000)
        #expect(Int64(bitPattern: after.nanoseconds) < 0, "the signed nanosecond count did wrap")
        // 32-bit seconds wrap (wrap_timestamp=2).
        let a = CaptureTime(timeval(tv_sec: Int(Int32.max), tv_usec: 999_000))
        let b = CaptureTime(timeval(tv_sec: Int(Int32.max) + 1, tv_usec: 33_000))
        #expect(b - a == 34_000_000)
    }

    @Test func sequenceGapsUseWrappingMath() {
        #expect(V4L2Sequence.framesSkipped(from: 10, to: 11) == 0)
        #expect(V4L2Sequence.framesSkipped(from: 10, to: 14) == 3)
        #expect(V4L2Sequence.framesSkipped(from: UInt32.max, to: 0) == 0)
        #expect(V4L2Sequence.framesSkipped(from: UInt32.max - 1, to: 1) == 2)
    }

    @Test func planeValidationRejectsBadBytesUsed() {
        typealias P = V4L2BufferPool
        #expect(P.planeDefect(used: 460_800, offset: 0, length: 460_800, sizeImage: 460_800, isCompressed: false) == .none)
        #expect(P.planeDefect(used: 0, offset: 0, length: 460_800, sizeImage: 460_800, isCompressed: false) == .empty)
        #expect(P.planeDefect(used: 460_801, offset: 0, length: 460_800, sizeImage: 460_800, isCompressed: false) == .overrun)
        #expect(P.planeDefect(used: 100, offset: 200, length: 460_800, sizeImage: 0, isCompressed: true) == .badDataOffset)
        #expect(P.planeDefect(used: 1000, offset: 0, length: 460_800, sizeImage: 460_800, isCompressed: false) == .truncated)
        // Compressed frames vary in size.
        #expect(P.planeDefect(used: 1000, offset: 0, length: 460_800, sizeImage: 460_800, isCompressed: true) == .none)
    }

    @Test func capabilitiesClassifyNodes() {
        // device_caps of vivid's nodes, read in the VM: capture, output, metadata, mplane capture.
        #expect(V4L2Capabilities(rawValue: 0x0523_0005).isCamera)
        #expect(!V4L2Capabilities(rawValue: 0x0522_0002).isCamera)
        #expect(!V4L2Capabilities(rawValue: 0x05a3_0000).isCamera)
        #expect(!V4L2Capabilities(rawValue: 0x0d22_0000).isCamera)
        #expect(V4L2Capabilities(rawValue: 0x0523_1000).isCamera)
        // A memory-to-memory codec has capture bits too but is not a camera.
        #expect(!V4L2Capabilities(rawValue: 0x0420_4000 | 0x1000).isCamera)
        var c = v4l2_capability()
        c.capabilities = 0x8000_0000 | 0x1000 | 0x1
        c.device_caps = 0x1000
        #expect(V4L2Capability(c).captureBufferType == .videoCaptureMultiplanar)
        c.capabilities = 0x1  // no DEVICE_CAPS: capabilities describe the node
        #expect(V4L2Capability(c).captureBufferType == .videoCapture)
    }

    @Test func controlShortNamesMatchV4L2Ctl() {
        #expect(V4L2Device.shortName("Test Pattern") == "test_pattern")
        #expect(V4L2Device.shortName("Inject V4L2 Buffer Error") == "inject_v4l2_buffer_error")
        #expect(V4L2Device.shortName("Percentage of Dropped Buffers") == "percentage_of_dropped_buffers")
        #expect(V4L2Device.shortName("  White Balance, Automatic") == "white_balance_automatic")
    }

    @Test func discoveryIDsAndPositions() {
        func info(_ path: String) -> SourceInfo {
            SourceInfo(
                uniqueID: "v4l2:uvcvideo:usb-0000:00:14.0-1:Cam", name: "Cam", driver: "uvcvideo",
                busInfo: "usb-0000:00:14.0-1", path: path, position: .external)
        }
        let ids = V4L2Discovery.disambiguated([info("/dev/video0"), info("/dev/video2"), info("/dev/video4")]).map(\.uniqueID)
        #expect(
            ids == [
                "v4l2:uvcvideo:usb-0000:00:14.0-1:Cam", "v4l2:uvcvideo:usb-0000:00:14.0-1:Cam:2",
                "v4l2:uvcvideo:usb-0000:00:14.0-1:Cam:3",
            ])
        #expect(V4L2Discovery.position(orientation: nil, busInfo: "usb-0000:00:14.0-1") == .external)
        #expect(V4L2Discovery.position(orientation: nil, busInfo: "platform:vivid-000") == .unspecified)
        #expect(V4L2Discovery.position(orientation: .back, busInfo: "usb-1") == .back)
    }
}

@Suite struct V4L2ErrorMappingTests {
    /// A failed call on a camera, in the object model's words.
    private func mapped(_ e: Errno, _ op: String, path: String = "/dev/video0") -> CaptureError {
        CaptureError(BackendError(SystemCallError(operation: op, errno: e), device: path, kind: .video))
    }
    private func code(_ e: Errno, _ op: String) -> CaptureError.Code { mapped(e, op).code }

    @Test func errnosBecomeTypedErrors() {
        #expect(code(.noSuchFileOrDirectory, "open") == .noSuchDevice)
        #expect(code(.noSuchDevice, "open") == .noSuchDevice)
        #expect(code(.noSuchDeviceOrAddress, "open") == .noSuchDevice)
        #expect(code(.noSuchDevice, "VIDIOC_DQBUF") == .disconnected)
        #expect(code(.noSuchDeviceOrAddress, "VIDIOC_QBUF") == .disconnected)
        #expect(code(.resourceBusy, "VIDIOC_REQBUFS") == .deviceBusy)
        #expect(code(.permissionDenied, "open") == .permissionDenied)
        #expect(code(.notPermitted, "open") == .permissionDenied)
        #expect(code(.invalidArgument, "VIDIOC_S_FMT") == .unsupportedFormat)
        #expect(code(.invalidArgument, "VIDIOC_TRY_FMT") == .unsupportedFormat)
        #expect(code(.invalidArgument, "VIDIOC_REQBUFS") == .driverError)
        #expect(code(.inappropriateIoctl, "VIDIOC_QUERYCAP") == .notACaptureDevice)
        #expect(code(.ioError, "VIDIOC_DQBUF") == .driverError)
        #expect(code(.noSpace, "VIDIOC_STREAMON") == .deviceBusy)
        #expect(code(.outOfRange, "VIDIOC_S_EXT_CTRLS") == .invalidArgument)
        #expect(code(.permissionDenied, "VIDIOC_S_EXT_CTRLS") == .invalidArgument)  // read-only control
        #expect(code(.isDirectory, "open") == .notACaptureDevice)
    }

    @Test func errorsNameTheCallAndSayWhatToDo() {
        let e = mapped(.noSpace, "VIDIOC_STREAMON", path: "/dev/video3")
        #expect(e.operation == "VIDIOC_STREAMON")
        #expect(e.errno == ENOSPC)
        #expect(e.message.contains("USB bandwidth"))
        #expect(e.message.contains("/dev/video3"))
        let busy = mapped(.resourceBusy, "VIDIOC_S_FMT")
        #expect(busy.description.contains("VIDIOC_S_FMT"))
        #expect(busy.description.contains("EBUSY") || busy.description.contains("busy"))
        #expect(Errno.resourceBusy.name == "EBUSY")
    }
}

@Suite struct V4L2OpenTests {
    @Test func missingPathIsNoSuchDevice() {
        #expect(throws: BackendError.self) { _ = try V4L2Discovery.open(path: "/dev/video-does-not-exist") }
        do {
            _ = try V4L2Discovery.open(path: "/dev/video-does-not-exist")
        } catch {
            #expect(error.failure == .system(SystemCallError(operation: "open", errno: .noSuchFileOrDirectory)))
            #expect(error.device == "/dev/video-does-not-exist" && error.kind == .video)
            let mapped = CaptureError(error)
            #expect(mapped.code == .noSuchDevice)
            #expect(mapped.operation == "open")
            #expect(mapped.errno == ENOENT)
        }
    }

    @Test func devNullIsNotACaptureDevice() {
        do {
            _ = try V4L2Discovery.open(path: "/dev/null")
            Issue.record("opening /dev/null succeeded")
        } catch {
            let error = CaptureError(error)
            #expect(error.code == .notACaptureDevice)
            #expect(error.operation == "VIDIOC_QUERYCAP")
            #expect(error.errno == ENOTTY)
        }
    }

    @Test func directoryIsNotACaptureDevice() {
        do {
            _ = try V4L2Discovery.open(path: "/dev")
            Issue.record("opening /dev succeeded")
        } catch {
            #expect(CaptureError(error).code == .notACaptureDevice)
        }
    }

    @Test func descriptorsAreNotLeakedByFailedOpens() throws {
        // Counts only descriptors on a file no other test opens: the other suites run in parallel
        // and open and close descriptors of their own meanwhile.
        let path = FileManager.default.temporaryDirectory
            .appendingPathComponent("swift-capture-open-\(getpid())-\(UInt64.random(in: 0...UInt64.max))").path
        #expect(FileManager.default.createFile(atPath: path, contents: Data([0])))
        defer { try? FileManager.default.removeItem(atPath: path) }
        func openCount() throws -> Int {
            try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count { fd in
                (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(fd)")) == path
            }
        }
        // The count sees a descriptor left open.
        let probe = Glibc.open(path, O_RDONLY)
        #expect(try openCount() == 1)
        close(probe)
        #expect(throws: BackendError.self) { _ = try V4L2Discovery.open(path: path) }
        for _ in 0..<50 { _ = try? V4L2Discovery.open(path: path) }
        #expect(try openCount() == 0)
    }
}

#if DEBUG
@Suite struct V4L2FaultInjectorTests {
    @Test func traceShowsTheCallsOfAFailedOpen() {
        let mock = SyscallMock()
        SyscallMock.$current.withValue(mock) {
            #expect(throws: BackendError.self) { _ = try V4L2Device.open("/dev/null") }
        }
        // The descriptor was closed exactly once, after QUERYCAP said ENOTTY.
        #expect(mock.trace == ["open", "fstat", "VIDIOC_QUERYCAP", "close"])
    }

    @Test func interruptedCallsAreRetried() {
        let mock = SyscallMock()
        mock.fail("VIDIOC_QUERYCAP", with: .interrupted, times: 2)
        mock.fail("open", with: .interrupted)
        SyscallMock.$current.withValue(mock) {
            do throws(BackendError) {
                _ = try V4L2Device.open("/dev/null")
            } catch {
                let error = CaptureError(error)
                // The retries reached the real call, whose answer (ENOTTY) is what counts.
                #expect(error.code == .notACaptureDevice)
                #expect(error.errno == ENOTTY)
            }
        }
        #expect(mock.callCount("open") == 2)
        #expect(mock.callCount("VIDIOC_QUERYCAP") == 3)
        #expect(mock.callCount("close") == 1)
    }

    @Test func forcedOpenErrorsAreTyped() {
        for (errno, code) in [
            (Errno.permissionDenied, CaptureError.Code.permissionDenied), (.resourceBusy, .deviceBusy),
            (.noSuchDevice, .noSuchDevice), (.noSuchFileOrDirectory, .noSuchDevice),
        ] {
            let mock = SyscallMock()
            mock.fail("open", with: errno)
            SyscallMock.$current.withValue(mock) {
                do throws(BackendError) {
                    _ = try V4L2Device.open("/dev/null")
                    Issue.record("open succeeded despite forced \(errno)")
                } catch {
                    let error = CaptureError(error)
                    #expect(error.code == code)
                    #expect(error.errno == errno.rawValue)
                }
            }
            // Nothing was opened, so nothing is closed.
            #expect(mock.trace == ["open"])
        }
    }

    @Test func forcedReqbufsErrorIsTypedAndLeavesNothingBehind() throws {
        let mock = SyscallMock()
        mock.fail("VIDIOC_REQBUFS", with: .invalidArgument)
        let format = ActiveFormat(
            pixelFormat: .yuyv, width: 640, height: 360,
            planes: [PlaneFormat(bytesPerLine: 1280, sizeImage: 460_800)], colorRange: .limited)
        try SyscallMock.$current.withValue(mock) {
            let fd = try FileDescriptor.open("/dev/null")
            let queue = V4L2Queue(fd: fd, type: .videoCapture)
            do throws(BackendError) {
                _ = try V4L2BufferPool.start(queue: queue, requestedCount: 4, format: format)
                Issue.record("stream started on /dev/null")
            } catch {
                let error = CaptureError(error)
                #expect(error.code == .driverError)
                #expect(error.operation == "VIDIOC_REQBUFS")
                #expect(error.errno == EINVAL)
            }
            #expect(!queue.isAllocated)
        }
        #expect(mock.trace == ["open", "VIDIOC_REQBUFS", "close"])
    }

    @Test func faultsOnOneDescriptorDoNotReachOthers() throws {
        let mock = SyscallMock()
        mock.fail("VIDIOC_QUERYCAP", with: .ioError, times: 100)
        let bound = try SyscallMock.$current.withValue(mock) { try FileDescriptor.open("/dev/null") }
        let other = try FileDescriptor.open("/dev/null")
        var caps = v4l2_capability()
        #expect(throws: BackendError.self) { try bound.ioctl(.queryCapability, &caps) }
        do { try bound.ioctl(.queryCapability, &caps) } catch {
            #expect(CaptureError(error).code == .driverError && error.errno == .ioError)
        }
        do { try other.ioctl(.queryCapability, &caps) } catch { #expect(error.errno == .inappropriateIoctl) }
    }

    @Test func wakeUpDescriptorSignals() throws {
        let e = try FileDescriptor.eventFD()
        #expect(!e.drain())
        e.signal()
        #expect(try e.poll(events: Int16(POLLIN), other: -1, timeoutMilliseconds: 0).0 & Int16(POLLIN) != 0)
        #expect(e.drain())
        #expect(try e.poll(events: Int16(POLLIN), other: -1, timeoutMilliseconds: 0).0 == 0)
    }
}
#endif
