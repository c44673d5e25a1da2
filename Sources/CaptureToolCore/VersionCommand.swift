// `capture version` and `capture --version`: the release this tool was built from.
import Capture

extension Command {
    package static let version = Command(
        name: "version", summary: "print the version of swift-capture this tool was built from",
        usage: """
            usage: capture version    (or: capture --version; prints "capture (swift-capture) VERSION", the VERSION /state reports)
            """,
        options: Options(valued: []),
        run: { _ in say("capture (swift-capture) \(captureVersion)") })
}
