import CaptureBackend
import Testing
@testable import Capture

@Suite struct PixelFormatTests {
    @Test func fourCCRoundTrip() {
        #expect(PixelFormat(fourCC: "YUYV")?.rawValue == 0x5659_5559)
        #expect(PixelFormat.mjpeg.description == "MJPG")
        #expect(PixelFormat(fourCC: "TOOLONG") == nil)
    }
}
