// capture-bench startup: how fast `capture help`, `capture devices` and `capture snap` start and how
// much memory they take, beside capture-full and v4l2-ctl: Benchmarks/startup_bench.py (processes
// timed under GNU time), run here with the `capture` built beside this program.

func startupBench(_ a: Arguments) {
    runPythonBench("startup_bench.py", a.values["runs"].map { ["--runs", $0] } ?? [])
}
