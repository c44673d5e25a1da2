// capture-full, the tool with every command, and how `capture` hands a command over to it (as git
// does with the programs in its libexec folder): `capture` links the core alone, so it starts in
// milliseconds, and replaces itself with capture-full (execv, the same arguments) only for a
// command that needs FFmpeg, SDL2, libmicrohttpd, GStreamer, OpenCV or zxing.
import CaptureSystem
import Foundation

package enum FullTool {
    /// The program's name: built beside `capture`, installed in PREFIX/libexec/capture.
    package static let name = "capture-full"

    /// What needs capture-full in `command` with `args`, for the line said when it is missing; nil
    /// when `capture` runs it itself. A `file:` camera reads pictures and movies with its libraries.
    package static func reason(_ command: Command, _ args: Arguments) -> String? {
        if command.run == nil { return command.name }
        if args.values["device"]?.hasPrefix("file:") == true { return command.name + " --device file:" }
        return nil
    }

    /// Where capture-full may be for the program at `exe`, in order: beside it (the build folder),
    /// then ../libexec/capture (an installed prefix: bin/capture, libexec/capture/capture-full).
    package static func places(besides exe: String) -> [String] {
        let folder = URL(fileURLWithPath: exe).deletingLastPathComponent()
        return [
            folder.appendingPathComponent(name).path,
            folder.deletingLastPathComponent().appendingPathComponent("libexec/capture/" + name).standardizedFileURL.path,
        ]
    }

    /// Replaces this process with capture-full running `argv`. Returns only by exiting 1, with one
    /// line saying what to install when capture-full is in neither place or cannot start.
    package static func handOver(_ argv: [String], for reason: String) -> Never {
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? argv[0]
        let places = places(besides: exe)
        guard let path = places.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            report(
                ToolError(
                    message:
                        "\(reason) needs \(name), which is in neither \(places.joined(separator: " nor ")): install both programs (scripts/install) or build it (swift build --product \(name))"
                ))
            exit(1)
        }
        // The C strings live until execv returns, which it does only on failure.
        let cArgs = argv.map { strdup($0) } + [nil]
        let result = Syscall.run("execv", mock: nil, failure: Int32(-1)) { execv(path, cArgs) }
        if case .failure(let errno) = result {
            report(ToolError(message: "cannot start \(path) for \(reason): \(errno.description); reinstall capture (scripts/install)"))
        }
        exit(1)
    }
}
