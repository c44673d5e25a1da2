// What the D-Bus client and the camera portal throw: the facts of a failure and no words for the
// user; the object model words them (`AuthorizationCheck.advice`).

/// A failed talk with the session bus or the desktop portal. Immutable; any thread.
package enum PortalError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `libdbus-1.so.3` (or a function of it) could not be loaded; dlerror's text.
    case libraryMissing(String)
    /// Neither `DBUS_SESSION_BUS_ADDRESS` nor `$XDG_RUNTIME_DIR/bus` names a session bus.
    case noSessionBus
    /// Connecting to (or saying Hello on) the bus at `address` failed with the D-Bus error `name`.
    case connectionFailed(address: String, name: String, message: String)
    /// `method` was answered with the D-Bus error `name` (`org.freedesktop.DBus.Error.ServiceUnknown`:
    /// nobody owns the destination).
    case callFailed(method: String, name: String, message: String)
    /// `method`'s reply did not carry the arguments its interface promises.
    case unexpectedReply(method: String)
    /// Nothing answered `what` within `seconds`.
    case timedOut(what: String, seconds: Double)
    /// The bus closed the connection while an answer was awaited.
    case disconnected

    /// Whether the failure says the portal (or its camera interface) is not there: nobody owns the
    /// name, or the object lacks the interface or method.
    package var portalMissing: Bool {
        switch self {
        case .callFailed(_, let name, _):
            return [
                "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner",
                "org.freedesktop.DBus.Error.UnknownInterface", "org.freedesktop.DBus.Error.UnknownMethod",
                "org.freedesktop.DBus.Error.UnknownObject", "org.freedesktop.DBus.Error.UnknownProperty",
                // What a GDBus object answers a property Get on an interface it does not export.
                "org.freedesktop.DBus.Error.InvalidArgs",
            ].contains(name)
        case .noSessionBus: return true
        default: return false
        }
    }

    /// Whether the portal refused by policy (`org.freedesktop.portal.Error.NotAllowed`: the
    /// desktop's lockdown setting disables the camera, or OpenPipeWireRemote without a grant).
    package var notAllowed: Bool {
        if case .callFailed(_, "org.freedesktop.portal.Error.NotAllowed", _) = self { true } else { false }
    }

    /// One technical line for logs.
    package var description: String {
        switch self {
        case .libraryMissing(let why): "libdbus-1 not loaded: \(why)"
        case .noSessionBus: "no session bus (DBUS_SESSION_BUS_ADDRESS unset, no $XDG_RUNTIME_DIR/bus)"
        case .connectionFailed(let address, let name, let message): "connecting to \(address): \(name): \(message)"
        case .callFailed(let method, let name, let message): "\(method): \(name): \(message)"
        case .unexpectedReply(let method): "\(method): unexpected reply"
        case .timedOut(let what, let seconds): "\(what): no answer within \(seconds) s"
        case .disconnected: "the session bus closed the connection"
        }
    }
}
