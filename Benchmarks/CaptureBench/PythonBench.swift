// The benches whose work is a Python script in Benchmarks/ (a browser, processes timed from outside):
// run with the `capture` built beside capture-bench, its exit status capture-bench's.
import Foundation

/// Runs `Benchmarks/SCRIPT --capture CAPTURE ARGUMENTS` and exits with its status.
func runPythonBench(_ script: String, _ arguments: [String]) -> Never {
    let here = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
    let capture = here.appendingPathComponent("capture").path
    guard FileManager.default.isExecutableFile(atPath: capture) else {
        fail(
            "no `capture` beside capture-bench (\(capture)): build it with the same configuration (swift build -c release --product capture)"
        )
    }
    let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent(script).path
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    p.arguments = ["python3", path, "--capture", capture] + arguments
    do {
        try p.run()
    } catch {
        fail("cannot run \(path): \(error)")
    }
    p.waitUntilExit()
    exit(p.terminationStatus)
}
