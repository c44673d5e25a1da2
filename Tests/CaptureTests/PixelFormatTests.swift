import CaptureVirtual
import CaptureImaging
import CaptureV4L2
import CaptureALSA
import CaptureBackend
import CaptureSystem
import Testing
@testable import Capture

@Suite struct PixelFormatTests {
    @Test func fourCCRoundTrip() {
        #expect(PixelFormat(fourCC: "YUYV")?.rawValue == 0x5659_5559)
        #expect(PixelFormat.mjpeg.description == "MJPG")
        #expect(PixelFormat(fourCC: "TOOLONG") == nil)
    }
}
