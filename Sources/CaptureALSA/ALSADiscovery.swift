// Finds ALSA capture PCMs: the "default" device first (when it can capture), then every
// card/device pair that has a capture substream.
import CaptureBackend
import CaptureSystem
import Foundation
internal import CALSA

package enum ALSADiscovery {
    /// Every capture device now present, `default` first. Formats are probed by opening each
    /// device briefly; a busy device is listed with `formats == nil`.
    package static func captureDevices(probeFormats: Bool = true) -> [AudioDeviceInfo] {
        ALSA.quietLibrary()
        var found: [AudioDeviceInfo] = []
        for index in cardIndices() {
            if let card = ALSA.card(index) {
                found += devices(of: card, probeFormats: probeFormats)
            } else {
                // The control device would not open (no permission): list what /proc tells, so
                // the user sees the device and is told it may not open it when it tries.
                found += procDevices(card: index)
            }
        }
        // "default" exists in every alsa-lib configuration; it is listed when it can capture:
        // it opens, or is only busy (our own session may hold it) or forbidden to this user.
        do {
            let source = try ALSAAudioSource(name: "default", info: defaultInfo)
            let formats = probeFormats ? try? source.formats() : nil
            found.insert(AudioDeviceInfo(info: defaultInfo, card: nil, device: nil, subdeviceCount: 1, formats: formats), at: 0)
        } catch  where [.resourceBusy, .permissionDenied, .notPermitted].contains(error.errno) {
            found.insert(AudioDeviceInfo(info: defaultInfo, card: nil, device: nil, subdeviceCount: 1, formats: nil), at: 0)
        } catch {
            // No capture behind "default" (no card, or a playback-only one).
        }
        return found
    }

    /// Card numbers from alsa-lib and from /proc/asound (alsa-lib skips cards whose control
    /// device this user may not open).
    package static func cardIndices(proc root: String = "/proc/asound") -> [Int] {
        var indices = Set<Int>()
        var cardIndex: Int32 = -1
        while snd_card_next(&cardIndex) >= 0, cardIndex >= 0 { indices.insert(Int(cardIndex)) }
        for e in (try? FileSystem.names(in: root).get()) ?? [] where e.hasPrefix("card") {
            if let n = Int(e.dropFirst(4)) { indices.insert(n) }
        }
        return indices.sorted()
    }

    package static let defaultInfo = SourceInfo(
        uniqueID: "default", name: "Default audio input", driver: "alsa", busInfo: "",
        path: "default", position: .unspecified)

    /// The identity discovery gives card `card`'s PCM device `device`.
    package static func info(card: ALSA.Card, device: Int, pcmName: String, path: String? = nil) -> SourceInfo {
        SourceInfo(
            uniqueID: "hw:CARD=\(card.id),DEV=\(device)",
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
            result.append(
                AudioDeviceInfo(
                    info: info, card: card.index, device: Int(dev), subdeviceCount: subdevices,
                    formats: formats))
        }
        return distinctNames(result)
    }

    /// Cards often give every PCM the same name (snd-aloop: "Loopback PCM" twice): number those.
    package static func distinctNames(_ list: [AudioDeviceInfo]) -> [AudioDeviceInfo] {
        let counts = Dictionary(list.map { ($0.info.name, 1) }, uniquingKeysWith: +)
        return list.map { d in
            var d = d
            if counts[d.info.name, default: 0] > 1, let dev = d.device { d.info.name += " (device \(dev))" }
            return d
        }
    }

    /// A card's capture devices as /proc/asound describes them (readable by everyone).
    package static func procDevices(card index: Int, root: String = "/proc/asound") -> [AudioDeviceInfo] {
        let dir = "\(root)/card\(index)"
        func read(_ path: String) -> String? { try? String(contentsOfFile: path, encoding: .utf8) }
        guard let id = read("\(dir)/id")?.trimmingCharacters(in: .whitespacesAndNewlines), !id.isEmpty else { return [] }
        // /proc/asound/cards: " 1 [Loopback       ]: Loopback - Loopback" then the long name.
        var name = id, longName = ""
        if let cards = read("\(root)/cards") {
            let lines = cards.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            for (i, line) in lines.enumerated() where line.trimmingCharacters(in: .whitespaces).hasPrefix("\(index) [") {
                if let dash = line.range(of: " - ") { name = String(line[dash.upperBound...]).trimmingCharacters(in: .whitespaces) }
                if i + 1 < lines.count { longName = lines[i + 1].trimmingCharacters(in: .whitespaces) }
            }
        }
        let card = ALSA.Card(index: index, id: id, name: name, longName: longName, driver: "")
        let entries = (try? FileSystem.names(in: dir).get()) ?? []
        let devices = entries.compactMap { e -> Int? in
            guard e.hasPrefix("pcm"), e.hasSuffix("c") else { return nil }
            return Int(e.dropFirst(3).dropLast())
        }.sorted()
        return distinctNames(
            devices.map { dev in
                var fields: [String: String] = [:]
                for line in (read("\(dir)/pcm\(dev)c/info") ?? "").split(separator: "\n") {
                    let parts = line.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
                    if parts.count == 2 { fields[parts[0]] = parts[1] }
                }
                return AudioDeviceInfo(
                    info: info(card: card, device: dev, pcmName: fields["name"] ?? ""), card: index, device: dev,
                    subdeviceCount: Int(fields["subdevices_count"] ?? "") ?? 1, formats: nil)
            })
    }

    /// Opens a capture source by discovery ID, plain ALSA name or path. Throws the failed
    /// `snd_pcm_open` (ENOENT, ENODEV, EBUSY, EACCES, EINVAL for a malformed name) or
    /// `.emptyDeviceName`.
    package static func open(_ name: String) throws(BackendError) -> ALSAAudioSource {
        guard !name.isEmpty else { throw BackendError.audio(.emptyDeviceName, name) }
        if name == "default" { return try ALSAAudioSource(name: name, info: defaultInfo) }
        return try ALSAAudioSource(name: name)
    }
}
