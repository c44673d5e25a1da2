// capture-bench latency: glass-to-glass latency in Chromium through MJPEG, fragmented MP4 and
// WebRTC. The browser side (Playwright, the canvas reads of the time code) is Python:
// Benchmarks/latency_bench.py, run here with the `capture` tool built beside this program.
import Foundation

func latencyBench(_ a: Arguments) {
    let here = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
    let capture = here.appendingPathComponent("capture").path
    guard FileManager.default.isExecutableFile(atPath: capture) else {
        fail(
            "no `capture` beside capture-bench (\(capture)): build it with the same configuration (swift build -c release --product capture)"
        )
    }
    let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("latency_bench.py").path
    var args = [script, "--capture", capture]
    for key in ["size", "fps", "seconds", "rounds", "paths", "viewers"] {
        if let v = a.values[key] { args += ["--\(key)", v] }
    }
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    p.arguments = ["python3"] + args
    do {
        try p.run()
    } catch {
        fail("cannot run \(script): \(error)")
    }
    p.waitUntilExit()
    exit(p.terminationStatus)
}
