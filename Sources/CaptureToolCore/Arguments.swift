// The command line's shared parser: `--name value` (or `--name=value`) options, their one-letter
// short forms (`-d value`, `-dvalue`), `--name` flags, options that exclude each other and, for a
// command that takes them, words that are not options. Each command declares what it takes
// (`Options`); every mistake is a `UsageError` (exit status 2).

/// The options one command takes.
package struct Options: Sendable {
    /// Options followed by a value: `--size 640x480`.
    package var valued: Set<String>
    /// Flags, given or not: `--json`.
    package var boolean: Set<String> = []
    /// Groups of options of which one at most may be given (`--preset` or `--size`).
    package var exclusive: [[String]] = []
    /// Whether words that are not options are taken (record's OUTPUT); otherwise each is an error.
    package var takesWords = false

    /// The one-letter options, as uStreamer, fswebcam and rpicam-apps take the common ones: each
    /// letter stands for the first of its long options the command takes (`-n` is `--frames`
    /// where there are frames to count, `--count` in snap; `-r` is `--fps`, or audio's `--rate`).
    static let short: [Character: [String]] = [
        "a": ["audio"], "d": ["device"], "f": ["format"], "n": ["frames", "count"], "o": ["output"], "p": ["port"],
        "q": ["quality"], "r": ["fps", "rate"], "s": ["size"], "t": ["seconds"],
    ]

    /// The long option `-letter` stands for in this command, if any.
    func long(forShort letter: Character) -> String? {
        Self.short[letter]?.first { valued.contains($0) || boolean.contains($0) }
    }
}

/// A command's arguments, parsed: the options' values, the flags given and the other words.
package struct Arguments {
    package var values: [String: String] = [:]
    package var flags: Set<String> = []
    package var words: [String] = []

    package init(_ args: ArraySlice<String>, _ options: Options) throws {
        var it = args.makeIterator()
        var optionsEnded = false
        while let a = it.next() {
            // A word: not an option, a lone "-", or anything after "--".
            guard !optionsEnded, a.count > 1, a.hasPrefix("-") else {
                guard options.takesWords else { throw UsageError("unexpected argument '\(a)'") }
                words.append(a)
                continue
            }
            if a == "--" {
                optionsEnded = true
                continue
            }
            // The option's long name, its value when joined to it, and how it was typed (for errors).
            let name: String, inline: String?, typed: String
            if a.hasPrefix("--") {
                // `--name=value` is `--name value`.
                let option = a.dropFirst(2)
                let equals = option.firstIndex(of: "=")
                name = String(option[..<(equals ?? option.endIndex)])
                inline = equals.map { String(option[option.index(after: $0)...]) }
                typed = "--" + name
            } else {
                // `-d value`, or `-dvalue` as getopt reads it.
                let letter = a[a.index(after: a.startIndex)]
                guard let long = options.long(forShort: letter) else { throw UsageError("unknown option -\(letter)") }
                let rest = a.dropFirst(2)
                name = long
                inline = rest.isEmpty ? nil : String(rest)
                typed = "-\(letter) (--\(long))"
            }
            if options.boolean.contains(name) {
                guard inline == nil else { throw UsageError("\(typed) takes no value") }
                flags.insert(name)
                continue
            }
            guard options.valued.contains(name) else { throw UsageError("unknown option --\(name)") }
            guard let v = inline ?? it.next() else { throw UsageError("\(typed) needs a value") }
            values[name] = v
        }
        for group in options.exclusive {
            let given = group.filter { values[$0] != nil || flags.contains($0) }
            guard given.count > 1 else { continue }
            throw UsageError("give \(given.map { "--" + $0 }.joined(separator: " or ")), not both")
        }
    }

    /// The whole number `--name` gives, `d` when it is absent.
    package func int(_ name: String, default d: Int, range: ClosedRange<Int>) throws -> Int {
        guard let s = values[name] else { return d }
        guard let v = Int(s), range.contains(v) else {
            throw UsageError("--\(name) must be a whole number in \(range.lowerBound)...\(range.upperBound), not '\(s)'")
        }
        return v
    }
}
