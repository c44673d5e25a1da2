import CaptureBackend

// Assigning a device setting (`device.focusMode = .locked`), as AVFoundation's settable
// properties: a broken rule is a programming error, so it traps with a message naming the rule,
// where AVFoundation raises NSGenericException (no lock) or NSInvalidArgumentException /
// NSRangeException (a value the device cannot take). A fault of the device itself (unplugged,
// the driver refusing) is not a programming error: it never traps; the setting stays as it was.
// The throwing `set…` methods are the same change for code that wants every failure thrown.

extension CaptureDevice {
    /// "call lockForConfiguration() before setting focusMode"
    package static func lockRuleMessage(_ property: String) -> String {
        "call lockForConfiguration() before setting \(property)"
    }

    /// "focusMode .continuousAutoFocus is not supported by NAME: check isFocusModeSupported first"
    package static func supportRuleMessage(_ property: String, _ value: String, device: String, check: String) -> String {
        "\(property) \(value) is not supported by \(device): check \(check) first"
    }

    /// Runs an assignment: traps when it breaks a rule, else makes the change with `set` (the
    /// throwing setter). `readable` says whether the device answered the question `supported`
    /// asks (a device that cannot be read is a fault, not an unsupported value). A fault thrown
    /// by `set` leaves the setting as it was; with `reportsFault`, a session the device is in
    /// gets it as `.configurationRejected` (format and frame rate changes go through the
    /// session, which reports its own refusals).
    func assign(
        _ property: String, _ value: String, readable: Bool = true, supported: @autoclosure () -> Bool, check: String,
        reportsFault: Bool = true, _ set: () throws(CaptureError) -> Void
    ) {
        if !state.withLock({ $0.lockCount > 0 }) { fatalError(Self.lockRuleMessage(property)) }
        if readable, !supported() {
            fatalError(Self.supportRuleMessage(property, value, device: localizedName, check: check))
        }
        do {
            try set()
        } catch {
            if reportsFault, let session = owner { session.hub.post(.configurationRejected(error)) }
        }
    }

    /// Whether the device's controls can be read now (false: unplugged or failing).
    var controlsReadable: Bool { (try? controls()) != nil }
}
