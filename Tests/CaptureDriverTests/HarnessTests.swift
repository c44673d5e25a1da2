import CaptureALSA
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Proves the driver-test VM end to end: the modules `scripts/vm/run` was asked for are loaded with
/// their parameters, their device nodes exist, and nothing else was loaded.
@Suite struct HarnessTests {
    let environment = ProcessInfo.processInfo.environment

    /// Fails (never skips) outside the VM: these drivers only exist there.
    func requireVM() throws {
        try #require(environment["CAPTURE_VM"] == "1", "run through scripts/test (needs the VM)")
    }

    /// The value of `NAME=value` in a module parameter string such as `n_devs=2 multiplanar=1,2`.
    func parameter(_ name: String, in parameters: String) -> String? {
        parameters.split(separator: " ").lazy
            .compactMap { word -> String? in
                let parts = word.split(separator: "=", maxSplits: 1)
                return parts.count == 2 && parts[0] == name ? String(parts[1]) : nil
            }
            .first
    }

    /// `(node, name)` for every video4linux node the kernel registered.
    func videoNodes() throws -> [(node: String, name: String)] {
        let root = "/sys/class/video4linux"
        // The class exists only once videodev is loaded.
        guard FileManager.default.fileExists(atPath: root) else { return [] }
        return try FileManager.default.contentsOfDirectory(atPath: root).sorted().map { node in
            let name = try String(contentsOfFile: "\(root)/\(node)/name", encoding: .utf8)
            return (node, name.trimmingCharacters(in: .whitespacesAndNewlines))
        }
    }

    func moduleLoaded(_ name: String) -> Bool {
        FileManager.default.fileExists(atPath: "/sys/module/\(name)")
    }

    func isCharacterDevice(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFCHR
    }

    @Test func runsInsideTheVM() throws {
        try requireVM()
        let kernel = try #require(environment["CAPTURE_VM_KERNEL"])
        var name = utsname()
        uname(&name)
        let release = withUnsafeBytes(of: &name.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        #expect(release == kernel, "the VM runs the kernel scripts/vm/prepare extracted")
        let expectedUID: uid_t = environment["CAPTURE_VM_AS_USER"] == "1" ? 65534 : 0
        #expect(getuid() == expectedUID)
    }

    @Test func vividInstancesMatchParameters() throws {
        try requireVM()
        let instances = Set(
            try videoNodes().compactMap { node -> String? in
                node.name.hasPrefix("vivid-") ? String(node.name.prefix(9)) : nil
            })
        guard let parameters = environment["CAPTURE_VM_VIVID"] else {
            #expect(!moduleLoaded("vivid"), "vivid was not requested but is loaded")
            #expect(instances.isEmpty)
            return
        }
        #expect(moduleLoaded("vivid"))
        let expected = parameter("n_devs", in: parameters).flatMap(Int.init) ?? 1
        #expect(instances.count == expected, "vivid instances \(instances.sorted()) for \(parameters)")
        for node in try videoNodes() where node.name.hasPrefix("vivid-") {
            #expect(isCharacterDevice("/dev/\(node.node)"), "/dev/\(node.node) (\(node.name))")
        }
    }

    /// Device nodes are root-only (devtmpfs gives 0600, there is no udev), so permission tests
    /// run with `--as-user` and expect `EACCES`.
    @Test func deviceAccessFollowsTheUser() throws {
        try requireVM()
        let node = try #require(try videoNodes().first, "needs a video node (load vivid or v4l2loopback)")
        let fd = open("/dev/\(node.node)", O_RDWR | O_NONBLOCK)
        let error = errno
        if fd >= 0 { close(fd) }
        if environment["CAPTURE_VM_AS_USER"] == "1" {
            #expect(fd == -1 && error == EACCES, "/dev/\(node.node) opened by uid \(getuid()): errno \(error)")
        } else {
            #expect(fd >= 0, "root cannot open /dev/\(node.node): errno \(error)")
        }
    }

    @Test func v4l2LoopbackDevicesMatchParameters() throws {
        try requireVM()
        guard let parameters = environment["CAPTURE_VM_LOOPBACK"] else {
            #expect(!moduleLoaded("v4l2loopback"), "v4l2loopback was not requested but is loaded")
            return
        }
        #expect(moduleLoaded("v4l2loopback"))
        // Without card_label every loopback node is called "Dummy video device (0x000N)".
        if parameter("card_label", in: parameters) == nil {
            let expected = parameter("devices", in: parameters).flatMap(Int.init) ?? 1
            let nodes = try videoNodes().filter { $0.name.hasPrefix("Dummy video device") }
            #expect(nodes.count == expected)
            for node in nodes {
                #expect(isCharacterDevice("/dev/\(node.node)"), "/dev/\(node.node)")
            }
        }
    }

    @Test(arguments: [("CAPTURE_VM_ALOOP", "snd_aloop", "Loopback"), ("CAPTURE_VM_DUMMY", "snd_dummy", "Dummy")])
    func soundCardPresentWhenLoaded(variable: String, module: String, card: String) throws {
        try requireVM()
        guard environment[variable] != nil else {
            #expect(!moduleLoaded(module), "\(module) was not requested but is loaded")
            return
        }
        let cards = try String(contentsOfFile: "/proc/asound/cards", encoding: .utf8)
        #expect(cards.contains("[\(card)"), "/proc/asound/cards:\n\(cards)")
        #expect(FileManager.default.fileExists(atPath: "/proc/asound/\(card)"))
        let control = try FileManager.default.contentsOfDirectory(atPath: "/dev/snd").filter { $0.hasPrefix("controlC") }
        #expect(!control.isEmpty, "ALSA control nodes in /dev/snd")
    }
}
