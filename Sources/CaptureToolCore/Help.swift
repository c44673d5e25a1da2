// `capture help [COMMAND]`, `capture --help` and `capture -h`: the usages the commands declare;
// and the short summary `capture` alone prints.
import Foundation

enum Help {
    /// Help's own usage, listed after the commands'.
    static let usage = """
        usage: capture help [COMMAND]    (or: capture COMMAND --help, capture COMMAND -h)
        """

    /// Every command's usage, then help's: what `capture help` prints (the man page and the
    /// shell completions are read from it).
    static func all(_ commands: [Command]) -> String { (commands.map(\.usage) + [usage]).joined(separator: "\n") }

    /// What `capture` alone prints (on standard error, exiting 2): the commands, one line each,
    /// and how to get their options.
    static func summary(_ commands: [Command]) -> String {
        let width = commands.map(\.name.count).max() ?? 0
        let lines = commands.map { "  " + $0.name.padding(toLength: width + 2, withPad: " ", startingAt: 0) + $0.summary }
        return
            (["usage: capture COMMAND [OPTIONS]"] + lines + [
                "capture help COMMAND (or capture COMMAND --help) prints its options; capture help prints them all"
            ]).joined(separator: "\n")
    }

    /// Prints the usage `rest` asks about; returns the exit status.
    static func run(_ rest: ArraySlice<String>, commands: [Command]) -> Int32 {
        guard let topic = rest.first else {
            print(all(commands))
            return 0
        }
        // `help --help` and `help -h` ask about help itself.
        if ["help", "--help", "-h"].contains(topic) {
            print(usage)
            return 0
        }
        guard let command = commands.first(where: { $0.name == topic }) else {
            report(ToolError(message: "no command '\(topic)'; commands: \(names(commands))"))
            return 2
        }
        print(command.usage)
        return 0
    }

    /// The commands' names, for the lines that refuse an unknown one.
    static func names(_ commands: [Command]) -> String { (commands.map(\.name) + ["help"]).joined(separator: ", ") }
}
