// The desktop portal's camera interface (org.freedesktop.portal.Camera, version 1), as a
// sandboxed app uses it: ask whether a camera is present, ask the user for access, and get a
// connection to PipeWire through which the granted cameras are reached.
import CaptureSystem
import Foundation

/// The camera portal on one session bus. One thread at a time (it owns its bus connection).
package final class CameraPortal {
    package static let busName = "org.freedesktop.portal.Desktop"
    package static let objectPath = "/org/freedesktop/portal/desktop"
    package static let interface = "org.freedesktop.portal.Camera"

    /// What the portal answered a request (org.freedesktop.portal.Request.Response's code).
    package enum Response: Equatable, Sendable {
        /// 0: the user (or a stored permission) allowed it.
        case granted
        /// 1: the user (or a stored permission) refused, or the request was cancelled.
        case cancelled
        /// 2, or a code the interface does not define: the interaction ended another way.
        case other(UInt32)
    }

    package let connection: DBusConnection

    /// Connects to the session bus at `address`.
    package init(address: String) throws(PortalError) {
        connection = try DBusConnection(address: address)
    }

    /// Connects to the session bus `environment` names (see `DBusConnection.sessionBusAddress`).
    package convenience init(environment: [String: String]) throws(PortalError) {
        guard let address = DBusConnection.sessionBusAddress(environment: environment) else { throw .noSessionBus }
        try self.init(address: address)
    }

    /// The `IsCameraPresent` property: whether PipeWire, as the portal sees it, has a camera node.
    /// Throws with `portalMissing` when no portal, or one without the camera interface, is on the bus.
    package func isCameraPresent(timeout: Double = 2) throws(PortalError) -> Bool {
        let reply = try connection.call(
            destination: Self.busName, path: Self.objectPath, interface: "org.freedesktop.DBus.Properties", member: "Get",
            arguments: [.string(Self.interface), .string("IsCameraPresent")], timeout: timeout)
        guard case .variant(.bool(let present))? = reply.first else { throw .unexpectedReply(method: "IsCameraPresent") }
        return present
    }

    /// `AccessCamera`: asks for the camera and waits for the request's `Response` (the portal
    /// may show a dialog, so `timeout` leaves the user time). The answer is the portal's; it keeps
    /// it in its permission store (table "devices", id "camera") for the app.
    package func accessCamera(timeout: Double) throws(PortalError) -> Response {
        // The handle the portal will use (since portal 0.9): request/SENDER/TOKEN, the sender's
        // unique name without ':' and with '_' for '.'. Subscribed before the call, so a fast
        // answer is not missed.
        let token = "capture_" + String(UInt64.random(in: .min ... .max), radix: 16)
        let sender = connection.uniqueName.dropFirst().replacingOccurrences(of: ".", with: "_")
        let expected = "\(Self.objectPath)/request/\(sender)/\(token)"
        try connection.addMatch(Self.responseRule(expected))
        let reply = try connection.call(
            destination: Self.busName, path: Self.objectPath, interface: Self.interface, member: "AccessCamera",
            arguments: [.vardict([("handle_token", .string(token))])], timeout: min(timeout, 25))
        guard case .objectPath(let handle)? = reply.first else { throw .unexpectedReply(method: "AccessCamera") }
        // An older portal picks its own handle; its answer can only be awaited from here on.
        if handle != expected { try connection.addMatch(Self.responseRule(handle)) }
        let answer = try connection.waitForSignal(
            paths: [expected, handle], interface: "org.freedesktop.portal.Request", member: "Response", timeout: timeout)
        guard case .uint32(let code)? = answer.first else { throw .unexpectedReply(method: "Request.Response") }
        switch code {
        case 0: return .granted
        case 1: return .cancelled
        default: return .other(code)
        }
    }

    /// `OpenPipeWireRemote`: a connection to PipeWire on which the nodes the app was granted (its
    /// cameras) are visible; only after a grant (the portal answers NotAllowed before one).
    package func openPipeWireRemote(timeout: Double = 5) throws(PortalError) -> FileDescriptor {
        guard connection.canPassFileDescriptors else {
            throw .callFailed(
                method: "OpenPipeWireRemote", name: "org.freedesktop.DBus.Error.NotSupported", message: "the bus passes no descriptors")
        }
        let reply = try connection.call(
            destination: Self.busName, path: Self.objectPath, interface: Self.interface, member: "OpenPipeWireRemote",
            arguments: [.vardict([])], timeout: timeout)
        guard case .fileDescriptor(let fd)? = reply.first, fd >= 0 else { throw .unexpectedReply(method: "OpenPipeWireRemote") }
        return FileDescriptor.adopting(fd, path: "PipeWire remote (camera portal)")
    }

    private static func responseRule(_ path: String) -> String {
        "type='signal',sender='\(busName)',interface='org.freedesktop.portal.Request',member='Response',path='\(path)'"
    }
}
