// What every `capture` command is to the dispatcher (Dispatch.swift) and to help: a name, a line for
// the summary, its usage, the options it takes, and what it does.

/// One `capture` command; each is declared in its own file, beside the code that runs it (or, for
/// the commands capture-full runs, with only its usage and options).
package struct Command: Sendable {
    package var name: String
    /// One line, for the summary `capture` alone prints.
    package var summary: String
    /// What `capture help COMMAND` and `capture COMMAND --help` print.
    package var usage: String
    package var options: Options
    /// Runs the command on its parsed arguments; a thrown error becomes the one line printed.
    /// Nil for a command whose libraries only capture-full links: `capture` hands it over.
    package var run: (@MainActor @Sendable (Arguments) throws -> Void)?

    /// The commands, in the order help lists them.
    package static let all: [Command] = [.devices, .snap, .stream, .record, .audio, .preview, .serve, .metadata, .version]
}
