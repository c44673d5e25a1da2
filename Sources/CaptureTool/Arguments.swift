// The command line's shared parser: `--name value` (or `--name=value`) options, `--name` flags,
// options that exclude each other and, for a command that takes them, words that are not options.
// Each command declares what it takes (`Options`).

/// The options one command takes.
struct Options: Sendable {
    /// Options followed by a value: `--size 640x480`.
    var valued: Set<String>
    /// Flags, given or not: `--json`.
    var boolean: Set<String> = []
    /// Groups of options of which one at most may be given (`--preset` or `--size`).
    var exclusive: [[String]] = []
    /// Whether words that are not options are taken (record's OUTPUT); otherwise each is an error.
    var takesWords = false
}

/// A command's arguments, parsed: the options' values, the flags given and the other words.
struct Arguments {
    var values: [String: String] = [:]
    var flags: Set<String> = []
    var words: [String] = []

    init(_ args: ArraySlice<String>, _ options: Options) throws {
        var it = args.makeIterator()
        while let a = it.next() {
            guard a.hasPrefix("--") else {
                guard options.takesWords else { throw ToolError(message: "unexpected argument '\(a)'") }
                words.append(a)
                continue
            }
            // `--name=value` is `--name value`.
            let option = a.dropFirst(2)
            let equals = option.firstIndex(of: "=")
            let name = String(option[..<(equals ?? option.endIndex)])
            let inline = equals.map { String(option[option.index(after: $0)...]) }
            if options.boolean.contains(name) {
                guard inline == nil else { throw ToolError(message: "--\(name) takes no value") }
                flags.insert(name)
                continue
            }
            guard options.valued.contains(name) else { throw ToolError(message: "unknown option --\(name)") }
            guard let v = inline ?? it.next() else { throw ToolError(message: "--\(name) needs a value") }
            values[name] = v
        }
        for group in options.exclusive {
            let given = group.filter { values[$0] != nil || flags.contains($0) }
            guard given.count > 1 else { continue }
            throw ToolError(message: "give \(given.map { "--" + $0 }.joined(separator: " or ")), not both")
        }
    }

    /// The whole number `--name` gives, `d` when it is absent.
    func int(_ name: String, default d: Int, range: ClosedRange<Int>) throws -> Int {
        guard let s = values[name] else { return d }
        guard let v = Int(s), range.contains(v) else {
            throw ToolError(message: "--\(name) must be a whole number in \(range.lowerBound)...\(range.upperBound), not '\(s)'")
        }
        return v
    }
}
