import Testing

/// Runs `scenario` until it could check everything it states (it returns nil), at most
/// `attempts` times. A scenario that a loaded machine kept from running (it returns why, as a
/// start-up too slow or frames dropped where the claim needs every frame) is tried again, and
/// recorded as a failure after the last attempt: such a test never passes without its checks.
public func retrying(_ attempts: Int = 3, sourceLocation: SourceLocation = #_sourceLocation, _ scenario: () throws -> String?) rethrows {
    var reasons: [String] = []
    for _ in 0..<attempts {
        guard let why = try scenario() else { return }
        reasons.append(why)
    }
    Issue.record(
        "the scenario could not run its checks in \(attempts) attempts: \(reasons.joined(separator: "; "))", sourceLocation: sourceLocation)
}
