import Capture
import Foundation

/// Seed 004's audio side: the microphone next to the camera, delivered to the same receiver on
/// its own serial queue.
enum LiveAudio {
    static func attach(to session: CaptureSession, device name: String?, receiver: Receiver) {
        guard let name else { return }
        do {
            if name == "virtual", VirtualMicrophone.installed.isEmpty { VirtualMicrophone.install(VirtualMicrophone()) }
            let device =
                name == "virtual"
                ? CaptureDevice.devices(for: .audio).first { $0.virtualMicrophone != nil }
                : try CaptureDevice.audioDevice(named: name)
            guard let device else { print("audio: no such device \(name)"); return }
            let input = try CaptureDeviceInput(device: device)
            let output = CaptureAudioDataOutput()
            output.setSampleBufferDelegate(receiver, queue: DispatchQueue(label: "Audio Capture Queue"))
            if session.canAddInput(input) { session.addInput(input) }
            if session.canAddOutput(output) { session.addOutput(output) }
            print("audio: \(device.localizedName)")
        } catch {
            print("audio: \(error)")
        }
    }
}

extension Receiver: CaptureAudioDataOutputSampleBufferDelegate {}
