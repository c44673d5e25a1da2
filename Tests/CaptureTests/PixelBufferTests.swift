// Sample buffers seen as CoreMedia code sees them: the pixel buffer's planes (NV12 two, I420
// and YV12 three, packed formats none), the format description, the duration and the sample
// count, on the virtual camera and microphone through the data outputs.
import CaptureVirtual
import CaptureBackend
import CaptureSystem
import CaptureTestSupport
import Foundation
import Testing
@testable import Capture

@Suite(.timeLimit(.minutes(2))) struct PixelBufferTests {
    /// The first frame a session delivers from a camera with one mode, kept (so its buffer stays).
    static func firstFrame(
        _ format: PixelFormat, _ w: Int, _ h: Int, fps: Double = 30, asking wanted: PixelFormat? = nil
    ) throws -> SampleBuffer {
        let rig = try VirtualSessionRig(
            "Planes \(format)", modes: [.init(format, width: w, height: h, frameRates: [fps])], position: .external,
            videoSettings: .init(pixelFormat: wanted))
        defer { rig.uninstall() }
        let first = Locked<SampleBuffer?>(nil)
        rig.collector.onFrame = { s in first.withLock { if $0 == nil { $0 = s } } }
        try rig.session.start()
        defer { rig.session.stopRunning() }
        #expect(rig.collector.wait(for: 1, timeout: 20))
        return try #require(first.withLock { $0 })
    }

    /// A byte of a plane at (x, y) in that plane's samples, `component` bytes into the sample.
    static func byte(_ p: PixelBuffer, plane: Int, x: Int, y: Int, bytesPerSample: Int = 1, component: Int = 0) -> UInt8? {
        guard let base = p.baseAddressOfPlane(plane) else { return nil }
        return base.load(fromByteOffset: y * p.bytesPerRowOfPlane(plane) + x * bytesPerSample + component, as: UInt8.self)
    }

    // The yellow bar (second of eight) at three quarters of the height: Y'CbCr 161, 44, 142
    // (limited range, as vivid's 75 % bars).
    static let yellow = (y: 161, cb: 44, cr: 142)

    @Test(arguments: [(PixelFormat.nv12, false), (.nv21, true), (.nv16, false), (.nv61, true)])
    func semiPlanarFramesHaveTwoPlanes(format: PixelFormat, crFirst: Bool) throws {
        let (w, h) = (640, 480)
        let sample = try Self.firstFrame(format, w, h)
        let p = try #require(sample.imageBuffer)
        let chromaRows = format == .nv12 || format == .nv21 ? h / 2 : h
        #expect(p.isPlanar && p.planeCount == 2)
        #expect(p.widthOfPlane(0) == w && p.heightOfPlane(0) == h && p.bytesPerRowOfPlane(0) == w)
        #expect(p.widthOfPlane(1) == w / 2 && p.heightOfPlane(1) == chromaRows && p.bytesPerRowOfPlane(1) == w)
        #expect(p.widthOfPlane(2) == 0 && p.baseAddressOfPlane(2) == nil)
        let y0 = try #require(p.baseAddressOfPlane(0)), y1 = try #require(p.baseAddressOfPlane(1))
        #expect(y1 - y0 == w * h, "the chroma plane starts after the luma plane")
        #expect(p.dataSize == w * h + w * chromaRows)
        let x = 3 * w / 16, y = 3 * h / 4, cy = chromaRows == h ? y : y / 2
        #expect(Self.byte(p, plane: 0, x: x, y: y).map(Int.init) == Self.yellow.y)
        let first = Self.byte(p, plane: 1, x: x / 2, y: cy, bytesPerSample: 2, component: 0).map(Int.init)
        let second = Self.byte(p, plane: 1, x: x / 2, y: cy, bytesPerSample: 2, component: 1).map(Int.init)
        #expect((crFirst ? (second, first) : (first, second)) == (Self.yellow.cb, Self.yellow.cr))
        p.withUnsafeBytes(ofPlane: 1) { #expect($0.count == w * chromaRows) }
    }

    /// I420 and YV12 (whose memory has Cr first) both give luma, Cb, Cr; 4:2:2 planar too.
    @Test(arguments: [PixelFormat.yuv420, .yvu420, .yuv422p])
    func planarFramesHaveThreePlanesInYCbCrOrder(format: PixelFormat) throws {
        let (w, h) = (320, 240)
        let sample = try Self.firstFrame(format, w, h)
        let p = try #require(sample.imageBuffer)
        let chromaRows = format == .yuv422p ? h : h / 2
        #expect(p.isPlanar && p.planeCount == 3)
        #expect(p.widthOfPlane(0) == w && p.heightOfPlane(0) == h && p.bytesPerRowOfPlane(0) == w)
        for i in 1...2 {
            #expect(p.widthOfPlane(i) == w / 2 && p.heightOfPlane(i) == chromaRows && p.bytesPerRowOfPlane(i) == w / 2)
        }
        let x = 3 * w / 16, y = 3 * h / 4, cy = chromaRows == h ? y : y / 2
        #expect(Self.byte(p, plane: 0, x: x, y: y).map(Int.init) == Self.yellow.y)
        #expect(Self.byte(p, plane: 1, x: x / 2, y: cy).map(Int.init) == Self.yellow.cb)
        #expect(Self.byte(p, plane: 2, x: x / 2, y: cy).map(Int.init) == Self.yellow.cr)
        #expect(p.dataSize == w * h + 2 * (w / 2) * chromaRows)
    }

    /// Packed formats are one picture, not planar (CoreVideo's plane count 0).
    @Test(arguments: [(PixelFormat.yuyv, 2), (.rgb24, 3), (.grey, 1)])
    func packedFramesAreNotPlanar(format: PixelFormat, bytesPerPixel: Int) throws {
        let (w, h) = (320, 180)
        let sample = try Self.firstFrame(format, w, h)
        let p = try #require(sample.imageBuffer)
        #expect(!p.isPlanar && p.planeCount == 0 && p.planes.count == 1)
        #expect(p.width == w && p.height == h && p.bytesPerRow == w * bytesPerPixel && p.pixelFormat == format)
        #expect(p.baseAddressOfPlane(0) == p.baseAddress && p.baseAddressOfPlane(1) == nil)
        #expect(p.dataSize == w * h * bytesPerPixel)
        sample.withUnsafeBytes { bytes in #expect(bytes.baseAddress == p.baseAddress) }
    }

    /// The sample's own plane accessors (`planeCount`, `bytesPerRow(plane:)`,
    /// `withUnsafeBytes(plane:)`) give the pixel buffer's planes: the same count, addresses,
    /// lengths and row bytes for every planar format, the whole picture as one plane for a packed one.
    @Test(arguments: [PixelFormat.nv12, .nv21, .nv16, .nv61, .yuv420, .yvu420, .yuv422p, .yuyv, .rgb24, .grey])
    func sampleAccessorsAgreeWithThePixelBuffer(format: PixelFormat) throws {
        let sample = try Self.firstFrame(format, 320, 240)
        let p = try #require(sample.imageBuffer)
        #expect(sample.planeCount == max(p.planeCount, 1))
        for i in 0..<p.planes.count {
            #expect(sample.bytesPerRow(plane: i) == p.bytesPerRowOfPlane(i), "plane \(i)")
            let ours = sample.withUnsafeBytes(plane: i) { ($0.baseAddress, $0.count) }
            let theirs = p.withUnsafeBytes(ofPlane: i) { ($0.baseAddress, $0.count) }
            #expect(ours.0 == theirs.0 && ours.1 == theirs.1, "plane \(i): \(ours) against \(theirs)")
        }
        let past = p.planes.count
        #expect(sample.bytesPerRow(plane: past) == 0 && sample.withUnsafeBytes(plane: past) { $0.count } == 0)
    }

    /// MJPEG has no pixel buffer (its bytes are the JPEG); its description says MJPG.
    @Test func compressedFramesHaveNoPixelBuffer() throws {
        let sample = try Self.firstFrame(.mjpeg, 320, 240)
        #expect(sample.imageBuffer == nil)
        #expect(sample.formatDescription?.mediaSubType == "MJPG")
        #expect(sample.formatDescription?.dimensions == VideoDimensions(width: 320, height: 240))
    }

    /// The description, duration and count of a video frame: one sample lasting the interval the
    /// camera runs at; a converted frame (NV12 asked of a YUYV camera) has its own planes.
    @Test(arguments: [15.0, 30.0])
    func videoFramesDescribeThemselves(fps: Double) throws {
        let sample = try Self.firstFrame(.yuyv, 320, 240, fps: fps, asking: .nv12)
        let d = try #require(sample.formatDescription)
        #expect(d.mediaType == .video && d.mediaSubType == "NV12" && d.pixelFormat == .nv12 && d.audioFormat == nil)
        #expect(d.dimensions == VideoDimensions(width: 320, height: 240))
        #expect(sample.numSamples == 1)
        #expect(sample.duration == .nanoseconds(Int64(1e9 / fps)))
        let p = try #require(sample.imageBuffer)
        #expect(p.planeCount == 2 && p.heightOfPlane(1) == 120)
    }

    /// An audio buffer: lpcm with its format, as many samples as frames, lasting frames / rate,
    /// and no pixels.
    @Test func audioBuffersDescribeThemselves() throws {
        let mic = VirtualMicrophone(name: "Planes Mic \(UUID().uuidString.prefix(6))")
        VirtualMicrophone.install(mic)
        defer { VirtualMicrophone.uninstall(mic) }
        let device = try #require(CaptureDevice.devices(for: .audio).first { $0.uniqueID == mic.uniqueID })
        let session = CaptureSession()
        session.addInput(try CaptureDeviceInput(device: device))
        let output = CaptureAudioDataOutput()
        let collector = AudioCollector()
        output.setSampleBufferDelegate(collector, queue: collector.audioQueue)
        session.addOutput(output)
        try session.start()
        defer { session.stopRunning() }
        #expect(collector.wait(audio: 2, timeout: 20))
        for (sample, _, _) in collector.audio.prefix(2) {
            let audio = try #require(sample.audioBuffer)
            let d = try #require(sample.formatDescription)
            #expect(d.mediaType == .audio && d.mediaSubType == "lpcm" && d.audioFormat == audio.format && d.dimensions == nil)
            #expect(sample.numSamples == audio.frameCount && audio.frameCount > 0)
            #expect(sample.duration == .nanoseconds(Int64(audio.frameCount) * 1_000_000_000 / Int64(audio.format.sampleRate)))
            #expect(sample.imageBuffer == nil)
        }
    }
}
