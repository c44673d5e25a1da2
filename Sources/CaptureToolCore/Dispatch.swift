// The entry of `capture` and of capture-full: reads the command line, prints help, runs the command,
// or (in `capture`) hands it over to capture-full when its libraries are not linked here
// (FullTool.swift). Each command (its usage, options and work) is declared in its own file, the
// command line is parsed in Arguments.swift, help is in Help.swift. Exit status: 0 done, 1 a
// run-time failure, 2 a usage error (`UsageError`).
import Foundation

/// Runs the tool on `argv` with `commands` and exits with its status. `handsOver`: this program
/// links the core alone and gives capture-full what needs more.
@MainActor
package func toolMain(_ argv: [String], commands: [Command], handsOver: Bool) -> Never {
    // No command: a usage error (status 2), with the short summary.
    guard argv.count >= 2 else {
        FileHandle.standardError.write(Data((Help.summary(commands) + "\n").utf8))
        exit(2)
    }
    let name = argv[1]
    let rest = argv.dropFirst(2)
    // `capture help [COMMAND]`, `capture --help`, and `capture COMMAND --help|-h`: usage, exit 0.
    if ["help", "-h", "--help"].contains(name) { exit(Help.run(rest, commands: commands)) }
    // `capture --version` is `capture version`.
    guard let command = commands.first(where: { $0.name == (name == "--version" ? "version" : name) }) else {
        let what = name.hasPrefix("-") ? "option" : "command"
        report(UsageError("unknown \(what) '\(name)'; commands: \(Help.names(commands)) (capture help COMMAND)"))
        exit(2)
    }
    if rest.contains(where: { $0 == "--help" || $0 == "-h" }) {
        print(command.usage)
        exit(0)
    }
    do {
        let args = try Arguments(rest, command.options)
        // The camera's options are checked for form before the command touches any device (or
        // is handed over).
        _ = try SessionOptions(args)
        if handsOver, let reason = FullTool.reason(command, args) { FullTool.handOver(argv, for: reason) }
        guard let run = command.run else { throw ToolError(message: "capture \(command.name) is not linked into this program") }
        try run(args)
    } catch let error as UsageError {
        report(error)
        exit(2)
    } catch {
        report(error)
        exit(1)
    }
    exit(0)
}
