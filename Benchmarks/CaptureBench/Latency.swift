// capture-bench latency: glass-to-glass latency in Chromium through MJPEG, fragmented MP4 and
// WebRTC. The browser side (Playwright, the canvas reads of the time code) is Python:
// Benchmarks/latency_bench.py, run here with the `capture` tool built beside this program.

func latencyBench(_ a: Arguments) {
    var args: [String] = []
    for key in ["size", "fps", "seconds", "rounds", "paths", "viewers", "webapp-starts"] {
        if let v = a.values[key] { args += ["--\(key)", v] }
    }
    runPythonBench("latency_bench.py", args)
}
