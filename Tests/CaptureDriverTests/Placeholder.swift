import CaptureVirtual
import CaptureImaging
import CaptureV4L2
import CaptureALSA
import CaptureBackend
import CaptureSystem
import Testing
@testable import Capture

