extension CaptureDevice {
    /// ALSA capture devices, the default first. Filled in by the audio layer (`Audio/`).
    static func audioDevices() -> [CaptureDevice] {
        []
    }
}
