// `capture`: list cameras, take stills, measure a stream, record, preview and serve a camera,
// through the Capture library. This file only dispatches: each command (its usage, options and
// work) is declared in its own file, the command line is parsed in Arguments.swift, help is in
// Help.swift.
import Foundation

/// The commands, in the order help lists them.
let commands: [Command] = [.devices, .snap, .stream, .record, .audio, .preview, .serve, .metadata]

let argv = CommandLine.arguments
// No command: a usage error (status 2), with the short summary.
guard argv.count >= 2 else {
    FileHandle.standardError.write(Data((Help.summary(commands) + "\n").utf8))
    exit(2)
}
let name = argv[1]
let rest = argv.dropFirst(2)
// `capture help [COMMAND]`, `capture --help`, and `capture COMMAND --help|-h`: usage, exit 0.
if ["help", "-h", "--help"].contains(name) { exit(Help.run(rest, commands: commands)) }
guard let command = commands.first(where: { $0.name == name }) else {
    report(ToolError(message: "unknown command '\(name)'; commands: \(Help.names(commands)) (capture help COMMAND)"))
    exit(1)
}
if rest.contains(where: { $0 == "--help" || $0 == "-h" }) {
    print(command.usage)
    exit(0)
}
do {
    try command.run(try Arguments(rest, command.options))
} catch {
    report(error)
    exit(1)
}
