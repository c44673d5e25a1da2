// Finds ALSA capture PCMs: the "default" device first (when it can capture), then every
// card/device pair that has a capture substream.
internal import CALSA

enum ALSADiscovery {
    /// Every capture device now present, `default` first. Formats are probed by opening each
    /// device briefly; a busy device is listed with `formats == nil`.
    static func captureDevices(probeFormats: Bool = true) -> [AudioDeviceInfo] {
        ALSA.quietLibrary()
        var found: [AudioDeviceInfo] = []
        var cardIndex: Int32 = -1
        while snd_card_next(&cardIndex) >= 0, cardIndex >= 0 {
            guard let card = ALSA.card(Int(cardIndex)) else { continue }
            found += devices(of: card, probeFormats: probeFormats)
        }
        // "default" exists in every alsa-lib configuration; it is only worth listing when it can
        // open (with no cards, or a playback-only card, it cannot).
        if !found.isEmpty || defaultCanCapture() {
            if let source = try? ALSAAudioSource(name: "default", info: defaultInfo) {
                let formats = probeFormats ? try? source.formats() : nil
                found.insert(AudioDeviceInfo(info: defaultInfo, card: nil, device: nil, subdeviceCount: 1, formats: formats), at: 0)
            }
        }
        return found
    }

    static let defaultInfo = SourceInfo(uniqueID: "default", name: "Default audio input", driver: "alsa", busInfo: "",
                                        path: "default", position: .unspecified)

    private static func defaultCanCapture() -> Bool {
        var pcm: OpaquePointer?
        guard snd_pcm_open(&pcm, "default", SND_PCM_STREAM_CAPTURE, SND_PCM_NONBLOCK) >= 0, let pcm else { return false }
        snd_pcm_close(pcm)
        return true
    }

    /// The identity discovery gives card `card`'s PCM device `device`.
    static func info(card: ALSA.Card, device: Int, pcmName: String, path: String? = nil) -> SourceInfo {
        SourceInfo(uniqueID: "hw:CARD=\(card.id),DEV=\(device)",
                   name: pcmName.isEmpty || pcmName == card.name ? "\(card.name) (device \(device))" : "\(card.name): \(pcmName)",
                   driver: card.driver, busInfo: card.longName, path: path ?? "hw:\(card.index),\(device)",
                   position: .unspecified)
    }

    private static func devices(of card: ALSA.Card, probeFormats: Bool) -> [AudioDeviceInfo] {
        var ctl: OpaquePointer?
        guard snd_ctl_open(&ctl, "hw:\(card.index)", 0) >= 0, let ctl else { return [] }
        defer { snd_ctl_close(ctl) }
        var pinfoPtr: OpaquePointer?
        guard snd_pcm_info_malloc(&pinfoPtr) >= 0, let pinfo = pinfoPtr else { return [] }
        defer { snd_pcm_info_free(pinfo) }
        var result: [AudioDeviceInfo] = []
        var dev: Int32 = -1
        while snd_ctl_pcm_next_device(ctl, &dev) >= 0, dev >= 0 {
            snd_pcm_info_set_device(pinfo, UInt32(dev))
            snd_pcm_info_set_subdevice(pinfo, 0)
            snd_pcm_info_set_stream(pinfo, SND_PCM_STREAM_CAPTURE)
            // Fails (ENOENT) for a device without a capture stream.
            guard snd_ctl_pcm_info(ctl, pinfo) >= 0 else { continue }
            let info = info(card: card, device: Int(dev), pcmName: ALSA.string(snd_pcm_info_get_name(pinfo)))
            let subdevices = Int(snd_pcm_info_get_subdevices_count(pinfo))
            var formats: AudioFormatRange?
            if probeFormats, let source = try? ALSAAudioSource(name: info.uniqueID, info: info) {
                formats = try? source.formats()
            }
            result.append(AudioDeviceInfo(info: info, card: card.index, device: Int(dev), subdeviceCount: subdevices,
                                          formats: formats))
        }
        return result
    }

    /// Opens a capture source by discovery ID, plain ALSA name or path. Errors are typed:
    /// `.noSuchDevice`, `.deviceBusy`, `.permissionDenied`.
    static func open(_ name: String) throws(CaptureError) -> ALSAAudioSource {
        guard !name.isEmpty else { throw CaptureError(.noSuchDevice, "an empty ALSA device name was given") }
        if name == "default" { return try ALSAAudioSource(name: name, info: defaultInfo) }
        return try ALSAAudioSource(name: name)
    }
}
