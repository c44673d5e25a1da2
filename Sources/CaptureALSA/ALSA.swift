// The typed ALSA layer: every alsa-lib call that can fail goes through `ALSA.check`, which turns
// alsa-lib's negative errno into a `BackendError` naming the call and the device (the object
// model's mapper puts it into words). alsa-lib's own stderr messages are silenced: the errors
// carry the same facts.
import CaptureBackend
import CaptureSystem
import Foundation
#if canImport(Glibc)
import Glibc
#endif
internal import CALSA
internal import CALSAShim

extension BackendError {
    /// A condition found on the ALSA device `name` (by `operation`, if a call found it).
    static func audio(_ failure: Failure, _ name: String, operation: String? = nil) -> BackendError {
        BackendError(failure, device: name, kind: .audio, operation: operation)
    }
}

package enum ALSA {
    /// alsa-lib's result (a negative errno) for `operation` on `device`, as the failed call.
    /// `snd_pcm_open` is the opening call: the mapper reads a missing card there as no such
    /// device, later the same errno as the device gone.
    package static func error(
        _ result: Int32, operation: String, device: String,
        soundNodes: String = "/dev/snd"
    ) -> BackendError {
        var e = Errno(rawValue: result < 0 ? -result : result)
        // alsa-lib resolves card names by opening each card's control device and reports a card
        // it may not open as missing (ENODEV/ENOENT): if sound devices exist that this user may
        // not open, that is the real reason.
        if operation == "snd_pcm_open", e == .noSuchDevice || e == .noSuchFileOrDirectory, soundNodesDenied(soundNodes) {
            e = .permissionDenied
        }
        return BackendError(SystemCallError(operation: operation, errno: e), device: device, kind: .audio)
    }

    /// Whether `dir` holds ALSA device nodes (controlC*, pcmC*) that this user may not open.
    package static func soundNodesDenied(_ dir: String) -> Bool {
        guard let entries = try? FileSystem.names(in: dir).get() else { return false }
        let nodes = entries.filter { $0.hasPrefix("controlC") || $0.hasPrefix("pcmC") }
        return !nodes.isEmpty
            && nodes.allSatisfy { node in
                Syscall.run("access", mock: nil, failure: -1, { access("\(dir)/\(node)", R_OK | W_OK) }) == .failure(.permissionDenied)
            }
    }

    /// Returns `result` when it is not negative; throws the typed error otherwise.
    @discardableResult
    package static func check(_ result: Int32, _ operation: String, device: String) throws(BackendError) -> Int32 {
        if result < 0 { throw error(result, operation: operation, device: device) }
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
        return Card(
            index: index, id: string(snd_ctl_card_info_get_id(info)), name: string(snd_ctl_card_info_get_name(info)),
            longName: string(snd_ctl_card_info_get_longname(info)), driver: string(snd_ctl_card_info_get_driver(info)))
    }

    package static func string(_ p: UnsafePointer<CChar>?) -> String { p.map { String(cString: $0) } ?? "" }

    /// What an opened PCM accepts for interleaved capture: sample formats, rate and channel ranges.
    package static func formatRange(of pcm: OpaquePointer, device: String) throws(BackendError) -> AudioFormatRange {
        var hwp: OpaquePointer?
        try check(snd_pcm_hw_params_malloc(&hwp), "snd_pcm_hw_params_malloc", device: device)
        guard let hw = hwp else { throw error(-ENOMEM, operation: "snd_pcm_hw_params_malloc", device: device) }
        defer { snd_pcm_hw_params_free(hw) }
        try check(snd_pcm_hw_params_any(pcm, hw), "snd_pcm_hw_params_any", device: device)
        guard snd_pcm_hw_params_set_access(pcm, hw, SND_PCM_ACCESS_RW_INTERLEAVED) >= 0 else {
            throw BackendError.audio(.noInterleavedAccess, device, operation: "snd_pcm_hw_params_set_access")
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
        return AudioFormatRange(
            sampleFormats: formats, sampleRates: lowRate...highRate, standardSampleRates: standard,
            channelCounts: lowCh...highCh)
    }
}
