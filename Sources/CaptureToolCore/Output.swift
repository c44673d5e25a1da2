// What the tool writes to standard output: lines at once, and JSON as every command prints it.
import Foundation

/// Writes a line to standard output at once (print buffers when the output is a pipe).
package func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

/// `value` as the tool's JSON: indented, keys sorted, slashes as they are.
package func jsonString(_ value: some Encodable) throws -> String {
    let enc = JSONEncoder()
    enc.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    return String(decoding: try enc.encode(value), as: UTF8.self)
}
