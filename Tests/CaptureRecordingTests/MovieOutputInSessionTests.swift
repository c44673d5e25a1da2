import Capture
import CaptureRecording
import CaptureTestSupport
import Testing

/// The movie file output is one of the session's outputs, as `AVCaptureMovieFileOutput` is an
/// `AVCaptureOutput`: added through `CaptureOutput`'s own `canAddOutput`/`addOutput`, listed in
/// `outputs`, connected to the camera and the microphone, and gone again with `removeOutput`.
@Suite struct MovieOutputInSessionTests {
    @Test func theMovieOutputIsOneOfTheSessionsOutputs() throws {
        let camera = try InstalledCamera("movie in outputs")
        defer { camera.uninstall() }
        let microphone = try InstalledMicrophone("movie in outputs mic", frequency: 440)
        defer { microphone.uninstall() }
        let session = CaptureSession()
        session.addInput(try camera.input())
        session.addInput(try microphone.input())
        let still = CaptureStillImageOutput()
        session.addOutput(still)
        let movie = CaptureMovieFileOutput()
        let output: CaptureOutput = movie
        #expect(session.canAddOutput(output))
        session.addOutput(output)
        #expect(session.outputs.count == 2 && session.outputs.contains { $0 === still } && session.outputs.contains { $0 === movie })
        #expect(movie.session === session)
        #expect(movie.connection(with: .video) != nil && movie.connection(with: .audio) != nil, "\(movie.connections)")
        #expect(movie.connections.count == 2)
        // Not twice, not in another session; any number of movie outputs beside it.
        #expect(!session.canAddOutput(movie))
        let other = CaptureSession()
        #expect(!other.canAddOutput(movie))
        #expect(session.canAddOutput(CaptureMovieFileOutput()))
        session.removeOutput(movie)
        #expect(session.outputs.count == 1 && session.outputs.first === still)
        #expect(movie.session == nil && movie.connections.isEmpty)
        #expect(other.canAddOutput(movie))
    }
}
