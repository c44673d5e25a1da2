// The AAC track of `/stream.mp4`'s init segment (ISO/IEC 14496-12 and 14496-14): an mp4a sample
// entry whose esds carries the encoder's AudioSpecificConfig, in the sample rate's timescale.
import CaptureCodecs
import Foundation

extension MP4Boxes {
    /// The MIME codec of an AAC track: `mp4a.40.` and the AudioSpecificConfig's object type
    /// (2: AAC-LC, what FFmpeg's `aac` makes).
    static func audioCodec(_ format: AudioStreamFormat) -> String {
        "mp4a.40.\(format.extradata.first.map { $0 >> 3 } ?? 2)"
    }

    /// Whether `/stream.mp4` can carry packets of `format`: AAC with its AudioSpecificConfig, at
    /// a rate the sample entry can say (16 bits of Hz).
    static func carries(_ format: AudioStreamFormat) -> Bool {
        format.codec == .aac && !format.extradata.isEmpty && format.sampleRate > 0 && format.sampleRate < 65_536
    }

    /// trak 2: the microphone's AAC.
    static func audioTrak(_ w: inout BoxWriter, _ audio: AudioStreamFormat) {
        w.box("trak") { w in
            w.fullBox("tkhd", version: 0, flags: 3) {
                $0.u32(0)
                $0.u32(0)
                $0.u32(audioTrack)
                $0.u32(0)
                $0.u32(0)  // duration
                $0.zeros(8)
                $0.u16(0)  // layer
                $0.u16(1)  // alternate group (audio)
                $0.u16(0x0100)  // volume 1.0
                $0.u16(0)
                $0.matrix()
                $0.u32(0)  // width, height: none
                $0.u32(0)
            }
            w.box("mdia") { w in
                // One tick per sample.
                w.mediaHeader(timescale: UInt32(audio.sampleRate), handler: "soun", name: "SoundHandler")
                w.box("minf") { w in
                    w.fullBox("smhd", version: 0, flags: 0) { $0.u32(0) }  // balance, reserved
                    w.samples { w in
                        w.box("mp4a") { w in
                            w.zeros(6)
                            w.u16(1)  // data reference index
                            w.zeros(8)
                            w.u16(UInt16(audio.channels))
                            w.u16(16)  // sample size
                            w.u32(0)  // pre-defined, reserved
                            w.u32(UInt32(audio.sampleRate) << 16)
                            w.fullBox("esds", version: 0, flags: 0) { esds(&$0, audio) }
                        }
                    }
                }
            }
        }
    }

    /// The ES descriptor (ISO/IEC 14496-1): MPEG-4 audio with the AudioSpecificConfig.
    private static func esds(_ w: inout BoxWriter, _ audio: AudioStreamFormat) {
        let config = [UInt8](audio.extradata)
        let decoderSpecific = [0x05, UInt8(config.count)] + config
        let bitRate = UInt32(max(0, audio.bitRate))
        var decoderConfig: [UInt8] = [0x40, 0x15, 0, 0, 0]  // MPEG-4 audio, an audio stream; buffer size 0
        for v in [bitRate, bitRate] { decoderConfig += [UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)] }
        decoderConfig += decoderSpecific
        let sl: [UInt8] = [0x06, 0x01, 0x02]
        let es: [UInt8] = [0, 0, 0] + [0x04, UInt8(decoderConfig.count)] + decoderConfig + sl  // ES_ID 0, no flags
        w.bytes([0x03, UInt8(es.count)] + es)
    }

    /// Bytes a client writes before an audio packet: its moof and the mdat's header.
    static let audioHeadSize = moofSize + mdatHeaderSize

    /// The mdat header for a payload of `size` bytes, at `offset` of `out`.
    static func writeMdatHeader(into out: UnsafeMutableRawBufferPointer, at offset: Int, size: Int) {
        out.storeBytes(of: UInt32(size + mdatHeaderSize).bigEndian, toByteOffset: offset, as: UInt32.self)
        out.storeBytes(of: UInt32(0x6D64_6174).bigEndian, toByteOffset: offset + 4, as: UInt32.self)  // "mdat"
    }
}
