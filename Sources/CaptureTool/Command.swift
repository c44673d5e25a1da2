// What every `capture` command is to the dispatcher (main.swift) and to help: a name, a line for
// the summary, its usage, the options it takes, and what it does.

/// One `capture` command; each is declared in its own file, beside the code that runs it.
struct Command: Sendable {
    var name: String
    /// One line, for the summary `capture` alone prints.
    var summary: String
    /// What `capture help COMMAND` and `capture COMMAND --help` print.
    var usage: String
    var options: Options
    /// Runs the command on its parsed arguments; a thrown error becomes the one line printed.
    var run: @MainActor @Sendable (Arguments) throws -> Void
}
