// Audio devices in the object model: ALSA capture PCMs found by `ALSADiscovery`, each a
// `CaptureDevice` whose payload is its `AudioDeviceInfo`.

extension CaptureDevice {
    /// ALSA capture devices, the default first.
    static func audioDevices() -> [CaptureDevice] {
        ALSADiscovery.captureDevices().map { d in
            canonical { CaptureDevice(audioInfo: d.info, payload: d) }
        }
    }

    /// The audio device with a discovery ID (`hw:CARD=Loopback,DEV=1`, `default`), its plain
    /// ALSA name (`hw:1,1`), or any other ALSA capture name (`hw:Loopback,1,0`, `plughw:0`),
    /// which is opened once to check that it exists.
    ///
    /// Throws `.noSuchDevice` when there is no such capture device, `.deviceBusy` when it exists
    /// but another stream holds it, `.permissionDenied` when the user may not open it.
    public static func audioDevice(named name: String) throws(CaptureError) -> CaptureDevice {
        if let d = audioDevices().first(where: { $0.uniqueID == name || $0.path == name }) { return d }
        let source = try ALSADiscovery.open(name)
        var info = source.info
        // Keyed by the name given: `hw:Loopback,1,0` (one subdevice) is not `hw:CARD=Loopback,DEV=1`.
        info.uniqueID = name
        info.path = name
        let formats = try? source.formats()
        let descriptor = AudioDeviceInfo(info: info, card: nil, device: nil, subdeviceCount: 1, formats: formats)
        return canonical { CaptureDevice(audioInfo: info, payload: descriptor) }
    }

    /// What an audio device accepts (sample formats, rates, channel counts); nil for video
    /// devices and for an audio device that was busy when it was found.
    public var audioFormats: AudioFormatRange? {
        (payload as? AudioDeviceInfo)?.formats
    }

    /// The ALSA name the audio layer opens for this device.
    var alsaName: String? {
        guard mediaType == .audio else { return nil }
        return (payload as? AudioDeviceInfo)?.info.uniqueID ?? uniqueID
    }
}
