// Audio devices in the object model: ALSA capture PCMs found by `ALSADiscovery` (payload: their
// `AudioDeviceInfo`), then installed virtual microphones (payload: the `VirtualMicrophone`).
import CaptureVirtual
import CaptureALSA
import CaptureBackend

extension CaptureDevice {
    /// ALSA capture devices, the default first, then installed virtual microphones.
    static func audioDevices() -> [CaptureDevice] {
        let alsa = ALSADiscovery.captureDevices().map { d in
            canonical { CaptureDevice(audioInfo: d.info, payload: d) }
        }
        let virtual = VirtualMicrophone.installed.map { mic in
            canonical { CaptureDevice(audioInfo: mic.info, payload: mic) }
        }
        return alsa + virtual
    }

    /// The audio device with a discovery ID (`hw:CARD=Loopback,DEV=1`, `default`), its plain
    /// ALSA name (`hw:1,1`), or any other ALSA capture name (`hw:Loopback,1,0`, `plughw:0`),
    /// which is opened once to check that it exists.
    ///
    /// Throws `.noSuchDevice` when there is no such capture device, `.deviceBusy` when it exists
    /// but another stream holds it, `.permissionDenied` when the user may not open it.
    public static func audioDevice(named name: String) throws(CaptureError) -> CaptureDevice {
        if let d = audioDevices().first(where: { $0.uniqueID == name || $0.path == name }) { return d }
        let source = try fromBackend { () throws(BackendError) in try ALSADiscovery.open(name) }
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
        if payload is VirtualMicrophone { return VirtualMicrophone.formatRange }
        return (payload as? AudioDeviceInfo)?.formats
    }

    /// The virtual microphone behind this device, if it is one.
    public var virtualMicrophone: VirtualMicrophone? { payload as? VirtualMicrophone }

    /// The ALSA name the audio layer opens for this device; nil for video and virtual devices.
    var alsaName: String? {
        guard mediaType == .audio, !(payload is VirtualMicrophone) else { return nil }
        return (payload as? AudioDeviceInfo)?.info.uniqueID ?? uniqueID
    }

    /// Opens the device's audio source (ALSA or virtual). Typed errors as `audioDevice(named:)`.
    func openAudioSource() throws(CaptureError) -> any AudioSource {
        if let mic = payload as? VirtualMicrophone { return try mic.makeSource() }
        guard let name = alsaName else {
            throw CaptureError(.notACaptureDevice, "\(localizedName) is not an audio device")
        }
        return try fromBackend { () throws(BackendError) in try ALSADiscovery.open(name) }
    }
}
