// The typed ALSA layer: every alsa-lib call that can fail goes through `ALSA.check`, which turns
// alsa-lib's negative errno into a `CaptureError` naming the call and the device. alsa-lib's own
// stderr messages are silenced: the errors carry the same facts.
import CaptureBackend
import Foundation
#if canImport(Glibc)
import Glibc
#endif
internal import CALSA
internal import CV4L2Shim

package enum ALSA {
    /// Maps alsa-lib's result (a negative errno) for `operation` on `device` to a typed error.
    /// `opening` says the call tried to open the device: there a missing card reads as
    /// `.noSuchDevice`; later the same errno means the device went away.
    package static func error(_ result: Int32, operation: String, device: String, opening: Bool = false,
                      soundNodes: String = "/dev/snd") -> CaptureError {
        var e = result < 0 ? -result : result
        // alsa-lib resolves card names by opening each card's control device and reports a card
        // it may not open as missing (ENODEV/ENOENT): if sound devices exist that this user may
        // not open, that is the real reason.
        if opening, e == ENODEV || e == ENOENT, soundNodesDenied(soundNodes) { e = EACCES }
        let what = "\(operation) on ALSA device '\(device)'"
        switch e {
        case ENOENT, ENXIO:
            return CaptureError(.noSuchDevice, "no ALSA capture device '\(device)': list them with `capture devices`",
                                errno: e, operation: operation)
        case ENODEV:
            return opening
                ? CaptureError(.noSuchDevice, "no ALSA capture device '\(device)': list them with `capture devices`",
                               errno: e, operation: operation)
                : CaptureError(.disconnected, "ALSA device '\(device)' went away", errno: e, operation: operation)
        case EBUSY:
            return CaptureError(.deviceBusy, "ALSA device '\(device)' is in use by another stream; close it or pick another subdevice",
                                errno: e, operation: operation)
        case EACCES, EPERM:
            return CaptureError(.permissionDenied,
                                "no permission to open ALSA device '\(device)': add the user to the 'audio' group",
                                errno: e, operation: operation)
        case EINVAL where opening:
            return CaptureError(.noSuchDevice, "'\(device)' is not an ALSA capture device name (e.g. hw:CARD=Loopback,DEV=1 or hw:1,0)",
                                errno: e, operation: operation)
        case EINVAL:
            return CaptureError(.unsupportedFormat, "\(what) was refused", errno: e, operation: operation)
        case EIO:
            // As for V4L2: a device's I/O error is the driver failing; the stream must restart.
            return CaptureError(.driverError, "\(what) failed with an I/O error: stop and start the session again",
                                errno: e, operation: operation)
        case EPIPE:
            return CaptureError(.driverError, "\(what): overrun (xrun)", errno: e, operation: operation)
        case ESTRPIPE:
            return CaptureError(.driverError, "\(what): device suspended", errno: e, operation: operation)
        case EBADFD:
            return CaptureError(.invalidState, "\(what): the stream is in the wrong state", errno: e, operation: operation)
        default:
            return CaptureError(.driverError, "\(what) failed", errno: e, operation: operation)
        }
    }

    /// Whether `dir` holds ALSA device nodes (controlC*, pcmC*) that this user may not open.
    package static func soundNodesDenied(_ dir: String) -> Bool {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: dir) else { return false }
        let nodes = entries.filter { $0.hasPrefix("controlC") || $0.hasPrefix("pcmC") }
        return !nodes.isEmpty && nodes.allSatisfy { access("\(dir)/\($0)", R_OK | W_OK) != 0 && errno == EACCES }
    }

    /// Returns `result` when it is not negative; throws the typed error otherwise.
    @discardableResult
    package static func check(_ result: Int32, _ operation: String, device: String, opening: Bool = false) throws(CaptureError) -> Int32 {
        if result < 0 { throw error(result, operation: operation, device: device, opening: opening) }
        return result
    }

    /// Silences alsa-lib's stderr messages, once per process.
    package static func quietLibrary() { _ = silenced }
    private static let silenced: Bool = {
        cv4l2_alsa_silence_errors()
        return true
    }()

    static func pcmFormat(_ f: AudioFormat.SampleFormat) -> snd_pcm_format_t {
        switch f {
        case .s16: SND_PCM_FORMAT_S16_LE
        case .s32: SND_PCM_FORMAT_S32_LE
        case .float32: SND_PCM_FORMAT_FLOAT_LE
        }
    }

    /// Sample formats in the order the library prefers them.
    package static var preferredFormats: [AudioFormat.SampleFormat] { AudioFormat.SampleFormat.preferred }

    /// Card identity from the card's control interface.
    package struct Card: Sendable, Hashable {
        package var index: Int
        /// Short stable name, e.g. `Loopback` (what `hw:CARD=...` takes).
        package var id: String
        package var name: String
        package var longName: String
        package var driver: String
    }

    package static func card(_ index: Int) -> Card? {
        var ctl: OpaquePointer?
        guard snd_ctl_open(&ctl, "hw:\(index)", 0) >= 0, let ctl else { return nil }
        defer { snd_ctl_close(ctl) }
        var info: OpaquePointer?
        guard snd_ctl_card_info_malloc(&info) >= 0, let info else { return nil }
        defer { snd_ctl_card_info_free(info) }
        guard snd_ctl_card_info(ctl, info) >= 0 else { return nil }
        return Card(index: index, id: string(snd_ctl_card_info_get_id(info)), name: string(snd_ctl_card_info_get_name(info)),
                    longName: string(snd_ctl_card_info_get_longname(info)), driver: string(snd_ctl_card_info_get_driver(info)))
    }

    package static func string(_ p: UnsafePointer<CChar>?) -> String { p.map { String(cString: $0) } ?? "" }

    /// What an opened PCM accepts for interleaved capture: sample formats, rate and channel ranges.
    package static func formatRange(of pcm: OpaquePointer, device: String) throws(CaptureError) -> AudioFormatRange {
        var hwp: OpaquePointer?
        try check(snd_pcm_hw_params_malloc(&hwp), "snd_pcm_hw_params_malloc", device: device)
        guard let hw = hwp else { throw CaptureError(.driverError, "out of memory for ALSA hw params") }
        defer { snd_pcm_hw_params_free(hw) }
        try check(snd_pcm_hw_params_any(pcm, hw), "snd_pcm_hw_params_any", device: device)
        guard snd_pcm_hw_params_set_access(pcm, hw, SND_PCM_ACCESS_RW_INTERLEAVED) >= 0 else {
            throw CaptureError(.unsupportedFormat, "ALSA device '\(device)' offers no interleaved read access")
        }
        let formats = preferredFormats.filter { snd_pcm_hw_params_test_format(pcm, hw, pcmFormat($0)) == 0 }
        var dir: Int32 = 0
        var rmin: UInt32 = 0, rmax: UInt32 = 0, cmin: UInt32 = 0, cmax: UInt32 = 0
        try check(snd_pcm_hw_params_get_rate_min(hw, &rmin, &dir), "snd_pcm_hw_params_get_rate_min", device: device)
        try check(snd_pcm_hw_params_get_rate_max(hw, &rmax, &dir), "snd_pcm_hw_params_get_rate_max", device: device)
        try check(snd_pcm_hw_params_get_channels_min(hw, &cmin), "snd_pcm_hw_params_get_channels_min", device: device)
        try check(snd_pcm_hw_params_get_channels_max(hw, &cmax), "snd_pcm_hw_params_get_channels_max", device: device)
        // Plugins (plug, default) state near-unbounded ranges; keep them to numbers people use.
        let lowRate = Int(min(rmin, 768_000)), highRate = max(lowRate, Int(min(rmax, 768_000)))
        let lowCh = Int(max(1, min(cmin, 256))), highCh = max(lowCh, Int(min(cmax, 256)))
        let standard = AudioFormatRange.commonSampleRates.filter {
            $0 >= lowRate && $0 <= highRate && snd_pcm_hw_params_test_rate(pcm, hw, UInt32($0), 0) == 0
        }
        return AudioFormatRange(sampleFormats: formats, sampleRates: lowRate...highRate, standardSampleRates: standard,
                                channelCounts: lowCh...highCh)
    }
}
