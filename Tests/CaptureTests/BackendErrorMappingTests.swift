import CaptureALSA
import CaptureBackend
import CaptureSystem
import CaptureV4L2
import Foundation
import Glibc
import Testing
@testable import Capture

/// The one mapper from backend failures to `CaptureError`: one table for cameras and
/// microphones, words chosen by the device kind, and typed one-line errors through the public API.
@Suite struct BackendErrorMappingTests {
    private func mapped(_ errno: Errno, _ operation: String, _ kind: BackendError.DeviceKind) -> CaptureError {
        let device = kind == .video ? "/dev/video7" : "hw:7,0"
        return CaptureError(BackendError(SystemCallError(operation: operation, errno: errno), device: device, kind: kind))
    }

    private func isOneLine(_ e: CaptureError) -> Bool { !e.message.isEmpty && !e.message.contains("\n") }

    @Test func sameErrnoGivesTheSameCodeForCamerasAndMicrophones() {
        // (errno, a camera's call, a microphone's call, the code both must give)
        let cases: [(Errno, String, String, CaptureError.Code)] = [
            (.ioError, "VIDIOC_DQBUF", "snd_pcm_readi", .driverError),
            (.permissionDenied, "open", "snd_pcm_open", .permissionDenied),
            (.notPermitted, "open", "snd_pcm_open", .permissionDenied),
            (.noSuchFileOrDirectory, "open", "snd_pcm_open", .noSuchDevice),
            (.noSuchDevice, "open", "snd_pcm_open", .noSuchDevice),
            (.noSuchDevice, "VIDIOC_DQBUF", "snd_pcm_readi", .disconnected),
            (.noSuchDeviceOrAddress, "VIDIOC_QBUF", "snd_pcm_start", .disconnected),
            (.resourceBusy, "open", "snd_pcm_open", .deviceBusy),
            (.noMemory, "VIDIOC_REQBUFS", "snd_pcm_hw_params_malloc", .driverError),
            (.tooManyOpenFiles, "eventfd", "eventfd", .ioError),
            (.noData, "VIDIOC_G_FMT", "snd_pcm_prepare", .ioError),  // an errno without its own words
        ]
        for (errno, videoCall, audioCall, code) in cases {
            let video = mapped(errno, videoCall, .video), audio = mapped(errno, audioCall, .audio)
            #expect(video.code == code, "\(errno) in \(videoCall): \(video)")
            #expect(audio.code == code, "\(errno) in \(audioCall): \(audio)")
            // Each names its device and its call, and carries the errno.
            #expect(video.message.contains("/dev/video7") && audio.message.contains("hw:7,0"), "\(video) / \(audio)")
            #expect(video.errno == errno.rawValue && audio.errno == errno.rawValue)
            #expect(video.operation == videoCall && audio.operation == audioCall)
            #expect(isOneLine(video) && isOneLine(audio), "\(video) / \(audio)")
        }
    }

    @Test func permissionDeniedNamesTheGroupOfTheKind() {
        let video = mapped(.permissionDenied, "open", .video), audio = mapped(.permissionDenied, "snd_pcm_open", .audio)
        #expect(video.message.contains("'video'") && !video.message.contains("'audio'"), "\(video)")
        #expect(audio.message.contains("'audio'") && !audio.message.contains("'video'"), "\(audio)")
    }

    @Test func theCallPicksTheWordsWhereTheErrnoIsAmbiguous() {
        #expect(mapped(.invalidArgument, "VIDIOC_S_FMT", .video).code == .unsupportedFormat)
        #expect(mapped(.invalidArgument, "VIDIOC_REQBUFS", .video).code == .driverError)
        #expect(mapped(.invalidArgument, "snd_pcm_hw_params_set_rate_near", .audio).code == .unsupportedFormat)
        #expect(mapped(.invalidArgument, "snd_pcm_open", .audio).code == .noSuchDevice)  // a malformed ALSA name
        #expect(mapped(.permissionDenied, "VIDIOC_S_EXT_CTRLS", .video).code == .invalidArgument)  // read-only control
        #expect(mapped(.noSpace, "VIDIOC_STREAMON", .video).message.contains("USB bandwidth"))
        #expect(mapped(.brokenPipe, "snd_pcm_prepare", .audio).code == .driverError)
        #expect(mapped(.badState, "snd_pcm_start", .audio).code == .invalidState)
        let poll = mapped(.noMemory, "poll", .audio)
        #expect(poll.code == .driverError && poll.message.contains("audio"), "\(poll)")
    }

    @Test func everyConditionHasACodeAndOneLine() {
        let video: [(BackendError.Failure, CaptureError.Code)] = [
            (.notADeviceNode, .notACaptureDevice),
            (.notACamera(card: "vivid", nodeKind: "video output"), .notACaptureDevice),
            (.noLongerConnected(name: "Cam", uniqueID: "v4l2:uvc:usb-1:Cam"), .noSuchDevice),
            (.formatNotOffered(.mjpeg, offered: [.yuyv, .nv12]), .unsupportedFormat),
            (.noFrameInterval, .unsupportedFormat),
            (.frameIntervalNotSettable, .unsupportedFormat),
            (.noSuchInput(3), .invalidArgument),
            (.noSuchControl(0x980900), .invalidArgument),
            (.valueOutOfRange(1 << 40, control: 0x980900), .invalidArgument),
            (.alreadyStreaming, .invalidState),
            (.notStreaming, .invalidState),
            (.previousStreamHeld, .deviceBusy),
            (.noBuffersGranted, .driverError),
            (.planeCountMismatch(reported: 1, expected: 2), .driverError),
            (.bufferNotHeld(5), .driverError),
        ]
        let audio: [(BackendError.Failure, CaptureError.Code)] = [
            (.emptyDeviceName, .noSuchDevice),
            (.noHandle, .driverError),
            (.noInterleavedAccess, .unsupportedFormat),
            (.interleavedOnly, .unsupportedFormat),
            (
                .invalidConfiguration(
                    AudioConfiguration(
                        format: AudioFormat(sampleRate: 0, channelCount: 1, sampleFormat: .s16),
                        periodFrames: 0, bufferFrames: 0)), .invalidArgument
            ),
            (.sampleFormatNotOffered(.float32, offered: [.s16]), .unsupportedFormat),
            (.notStreaming, .invalidState),
            (.noPollDescriptors, .driverError),
        ]
        for (kind, list) in [(BackendError.DeviceKind.video, video), (.audio, audio)] {
            for (failure, code) in list {
                let device = kind == .video ? "/dev/video7" : "hw:7,0"
                let e = CaptureError(BackendError(failure, device: device, kind: kind, operation: "call"))
                #expect(e.code == code, "\(failure): \(e)")
                #expect(isOneLine(e), "\(failure): \(e)")
                #expect(e.operation == "call")
            }
        }
        // The data of a condition reaches the words.
        let offer = CaptureError(BackendError(.formatNotOffered(.mjpeg, offered: [.yuyv]), device: "/dev/video7", kind: .video))
        #expect(offer.message.contains("MJPG") && offer.message.contains("YUYV"), "\(offer)")
        let node = CaptureError(BackendError(.notACamera(card: "vivid", nodeKind: "video output"), device: "/dev/video7", kind: .video))
        #expect(node.message.contains("video output"), "\(node)")
    }

    @Test func anInProcessBackendKeepsItsOwnWords() {
        let own = CaptureError(.disconnected, "the virtual camera \"X\" is disconnected; call reconnect() and open it again")
        #expect(CaptureError(BackendError(.described(own), device: "virtual:X", kind: .video)) == own)
    }

    @Test func theBackendErrorItselfIsFactsOnly() {
        let e = BackendError(SystemCallError(operation: "VIDIOC_S_FMT", errno: .invalidArgument), device: "/dev/video7", kind: .video)
        #expect(e.description == "VIDIOC_S_FMT: EINVAL on video device /dev/video7")
        #expect(e.operation == "VIDIOC_S_FMT" && e.errno == .invalidArgument)
    }

    // MARK: Through the public API

    @Test func missingCameraPathIsATypedOneLineError() {
        let path = "/dev/video-missing-\(getpid())"
        do {
            _ = try CaptureDevice.videoDevice(atPath: path)
            Issue.record("opened \(path)")
        } catch {
            #expect(error.code == .noSuchDevice, "\(error)")
            #expect(error.errno == ENOENT && error.operation == "open")
            #expect(error.message.contains(path) && isOneLine(error), "\(error)")
        }
        do {
            _ = try CaptureDevice.videoDevice(atPath: "/dev/null")
            Issue.record("/dev/null opened as a camera")
        } catch {
            #expect(error.code == .notACaptureDevice, "\(error)")
            #expect(isOneLine(error))
        }
    }

    @Test func missingMicrophoneIsATypedOneLineError() {
        for name in ["hw:CARD=NoSuchCard\(getpid()),DEV=0", ""] {
            do {
                _ = try CaptureDevice.audioDevice(named: name)
                Issue.record("opened '\(name)'")
            } catch {
                #expect(error.code == .noSuchDevice, "\(name): \(error)")
                #expect(isOneLine(error), "\(error)")
            }
        }
    }
}
