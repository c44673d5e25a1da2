import CaptureVirtual
import CaptureImaging
import CaptureBackend
import Foundation
import Testing
import CTurboJPEG
@testable import Capture
#if canImport(Glibc)
import Glibc
#endif

/// A fresh folder under /tmp, removed at the end.
private final class ScratchFolder {
    let path: String
    init(_ tag: String = #function) {
        path = "/tmp/photo-library-test-\(getpid())-\(UUID().uuidString.prefix(8))"
        mkdir(path, 0o755)
    }
    var url: URL { URL(fileURLWithPath: path, isDirectory: true) }
    func list(_ sub: String = "") -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: path + sub)) ?? []).sorted()
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// A real JPEG: smooth colours (small) or noise (large, hard to compress).
private func makeJPEG(width: Int = 160, height: Int = 120, noise: Bool = false) -> Data {
    var rgb = [UInt8](repeating: 0, count: width * height * 3)
    var rng = SystemRandomNumberGenerator()
    for i in 0..<(width * height) {
        if noise {
            rgb[3 * i] = UInt8.random(in: 0...255, using: &rng)
            rgb[3 * i + 1] = UInt8.random(in: 0...255, using: &rng)
            rgb[3 * i + 2] = UInt8.random(in: 0...255, using: &rng)
        } else {
            rgb[3 * i] = UInt8(i % width * 255 / width); rgb[3 * i + 1] = 128; rgb[3 * i + 2] = UInt8(i / width * 255 / height)
        }
    }
    let tj = tjInitCompress()!
    defer { tjDestroy(tj) }
    var out: UnsafeMutablePointer<UInt8>?
    var size: UInt = 0
    let rc = rgb.withUnsafeBufferPointer {
        tjCompress2(
            tj, $0.baseAddress, Int32(width), 0, Int32(height), Int32(TJPF_RGB.rawValue), &out, &size,
            Int32(TJSAMP_444.rawValue), noise ? 100 : 90, 0)
    }
    precondition(rc == 0)
    defer { tjFree(out) }
    return Data(bytes: out!, count: Int(size))
}

private func decodes(_ data: Data) -> (Int, Int)? {
    let tj = tjInitDecompress()!
    defer { tjDestroy(tj) }
    return data.withUnsafeBytes { raw -> (Int, Int)? in
        let p = raw.baseAddress!.assumingMemoryBound(to: UInt8.self)
        var w: Int32 = 0, h: Int32 = 0, s: Int32 = 0, c: Int32 = 0
        guard tjDecompressHeader3(tj, p, UInt(raw.count), &w, &h, &s, &c) == 0 else { return nil }
        var rgb = [UInt8](repeating: 0, count: Int(w * h * 3))
        let rc = rgb.withUnsafeMutableBufferPointer {
            tjDecompress2(tj, p, UInt(raw.count), $0.baseAddress, w, 0, h, Int32(TJPF_RGB.rawValue), 0)
        }
        return rc == 0 ? (Int(w), Int(h)) : nil
    }
}

private let fixedDate = Date(timeIntervalSince1970: 1_796_225_445.123)  // a fixed instant; named in local time

/// Mounts a tmpfs at `path` for the body, and always unmounts it. Needs root.
private func withTmpfs<R>(at path: String, size: String = "64k", _ body: () throws -> R) throws -> R {
    try #require(
        getuid() == 0,
        "this test mounts a tmpfs and must run as root (CI runs the host tests as root); run `sudo swift test --filter PhotoLibraryTests`")
    mkdir(path, 0o755)
    let rc = mount("tmpfs", path, "tmpfs", 0, "size=\(size),mode=0755")
    try #require(rc == 0, "mount tmpfs on \(path) failed: \(String(cString: strerror(errno)))")
    defer {
        umount2(path, Int32(MNT_DETACH))
        rmdir(path)
    }
    return try body()
}

private func remountReadOnly(_ path: String) throws {
    let rc = mount("tmpfs", path, "tmpfs", UInt(MS_REMOUNT | MS_RDONLY), "size=64k")
    try #require(rc == 0, "remount read-only failed: \(String(cString: strerror(errno)))")
}

@Suite struct PhotoLibraryTests {
    @Test func picturesFolderFollowsTheXDGRules() throws {
        let scratch = ScratchFolder()
        let home = scratch.path + "/home"
        // XDG_PICTURES_DIR in the environment wins.
        #expect(PhotoLibrary.picturesDirectory(environment: ["HOME": home, "XDG_PICTURES_DIR": "/srv/photos"]).path == "/srv/photos")
        // Else user-dirs.dirs under XDG_CONFIG_HOME, with $HOME expanded.
        let config = scratch.path + "/config"
        try FileManager.default.createDirectory(atPath: config, withIntermediateDirectories: true)
        try """
        # written by xdg-user-dirs-update
        XDG_DESKTOP_DIR="$HOME/Desktop"
        XDG_PICTURES_DIR="$HOME/Bilder"
        """.write(toFile: config + "/user-dirs.dirs", atomically: true, encoding: .utf8)
        #expect(PhotoLibrary.picturesDirectory(environment: ["HOME": home, "XDG_CONFIG_HOME": config]).path == home + "/Bilder")
        // Else ~/.config/user-dirs.dirs; absolute paths are taken as they are.
        try FileManager.default.createDirectory(atPath: home + "/.config", withIntermediateDirectories: true)
        try "XDG_PICTURES_DIR=\"/data/pics\"\n".write(toFile: home + "/.config/user-dirs.dirs", atomically: true, encoding: .utf8)
        #expect(PhotoLibrary.picturesDirectory(environment: ["HOME": home]).path == "/data/pics")
        // Else ~/Pictures.
        #expect(PhotoLibrary.picturesDirectory(environment: ["HOME": scratch.path + "/nobody"]).path == scratch.path + "/nobody/Pictures")
        #expect(
            PhotoLibrary.userDirsValue("#XDG_PICTURES_DIR=\"/x\"\nXDG_PICTURES_DIR=\"$HOME/a\\\"b\"", key: "XDG_PICTURES_DIR")
                == "$HOME/a\"b")
    }

    @Test func savesACompletePhotoWithEXIFIntoAFolderItCreates() async throws {
        let scratch = ScratchFolder()
        let folder = scratch.url.appendingPathComponent("home/Pictures")
        let library = PhotoLibrary(directory: folder)
        let jpeg = makeJPEG()
        let url = try await library.save(
            jpeg: jpeg,
            metadata: PhotoMetadata(
                date: fixedDate, make: "swift-capture",
                model: "Virtual Back Camera", orientation: .right))
        #expect(url.deletingLastPathComponent().path == folder.path)
        #expect(url.lastPathComponent == PhotoLibrary.fileStem(fixedDate) + ".jpg")
        #expect(url.lastPathComponent.wholeMatch(of: /IMG_\d{8}_\d{6}_123\.jpg/) != nil, "\(url.lastPathComponent)")
        let saved = try Data(contentsOf: url)
        #expect(decodes(saved)! == (160, 120))
        let exif = try #require(saved.withUnsafeBytes { EXIFInfo(jpeg: $0) })
        #expect(exif.model == "Virtual Back Camera" && exif.make == "swift-capture" && exif.orientation == .right)
        #expect(exif.dateTime == EXIFInfo.dateTimeString(fixedDate))
        // Nothing else in the folder: no temporary file stays behind.
        #expect(scratch.list("/home/Pictures") == [url.lastPathComponent])
        var st = stat()
        stat(url.path, &st)
        #expect(st.st_mode & 0o777 == 0o644 & ~umaskValue())
    }

    private func umaskValue() -> mode_t {
        let m = umask(0o022)
        umask(m)
        return m
    }

    @Test func aPhotoWithEXIFIsSavedByteForByte() throws {
        let scratch = ScratchFolder()
        var withExif: [UInt8] = []
        try makeJPEG().withUnsafeBytes { _ = try MJPEG.makeStill($0, exif: EXIFInfo(model: "Original", date: fixedDate), into: &withExif) }
        let url = try PhotoLibrary(directory: scratch.url).saveSynchronously(jpeg: Data(withExif), metadata: PhotoMetadata(model: "Other"))
        #expect(try Data(contentsOf: url) == Data(withExif))
    }

    @Test func namesAreUniqueAndNoPhotoIsEverOverwritten() throws {
        let scratch = ScratchFolder()
        let library = PhotoLibrary(fixedDirectory: scratch.url, clock: { fixedDate })
        let stem = PhotoLibrary.fileStem(fixedDate)
        // Somebody else's file already holds the first name.
        let foreign = Data("not ours".utf8)
        try foreign.write(to: scratch.url.appendingPathComponent(stem + ".jpg"))
        let a = try library.saveSynchronously(jpeg: makeJPEG())
        let b = try library.saveSynchronously(jpeg: makeJPEG(width: 64, height: 64))
        #expect(a.lastPathComponent == stem + "_2.jpg")
        #expect(b.lastPathComponent == stem + "_3.jpg")
        #expect(try Data(contentsOf: scratch.url.appendingPathComponent(stem + ".jpg")) == foreign)
        #expect(decodes(try Data(contentsOf: a))! == (160, 120))
        #expect(decodes(try Data(contentsOf: b))! == (64, 64))
        #expect(scratch.list() == [stem + ".jpg", stem + "_2.jpg", stem + "_3.jpg"])
    }

    @Test func manySavesAtOnceGetDistinctFiles() async throws {
        let scratch = ScratchFolder()
        let jpeg = makeJPEG(width: 32, height: 32)
        let libraries = (0..<4).map { _ in PhotoLibrary(fixedDirectory: scratch.url, clock: { fixedDate }) }
        let urls = try await withThrowingTaskGroup(of: URL.self) { group in
            for i in 0..<16 { group.addTask { try await libraries[i % 4].save(jpeg: jpeg) } }
            return try await group.reduce(into: [URL]()) { $0.append($1) }
        }
        #expect(Set(urls).count == 16)
        #expect(scratch.list().count == 16)
    }

    @Test func completionHandlerGetsTheResultOnTheGivenQueue() throws {
        let scratch = ScratchFolder()
        let queue = DispatchQueue(label: "test.photo.completion")
        let key = DispatchSpecificKey<Int>()
        queue.setSpecific(key: key, value: 7)
        let done = DispatchSemaphore(value: 0)
        final class Box: @unchecked Sendable { var result: Result<URL, CaptureError>?; var onQueue = false }
        let box = Box()
        PhotoLibrary(directory: scratch.url).save(jpeg: makeJPEG(), queue: queue) { result in
            box.result = result
            box.onQueue = DispatchQueue.getSpecific(key: key) == 7
            done.signal()
        }
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(box.onQueue)
        let url = try #require(try box.result?.get())
        #expect(FileManager.default.fileExists(atPath: url.path))
    }

    @Test func dataThatIsNotAJPEGIsRejectedAndNothingIsWritten() async throws {
        let scratch = ScratchFolder()
        let library = PhotoLibrary(directory: scratch.url)
        let good = makeJPEG()
        for bad in [Data(), Data("hello, world".utf8), good.prefix(good.count / 2), good.dropFirst(2)] {
            do {
                _ = try await library.save(jpeg: Data(bad))
                Issue.record("saved \(bad.count) bytes that are not a JPEG")
            } catch {
                #expect(error.code == .invalidArgument)
            }
        }
        #expect(scratch.list().isEmpty)
    }

    @Test func anMJPEGFrameWithoutHuffmanTablesIsSavedReadable() throws {
        let camera = VirtualCamera(
            name: "Photo \(UUID().uuidString.prefix(8))",
            formats: [VirtualCamera.Mode(.mjpeg, width: 320, height: 240, omitsHuffmanTables: true)])
        let source = try camera.makeSource()
        try source.startStreaming(bufferCount: 2)
        defer { source.stopStreaming() }
        guard case .frame(let frame) = try source.nextFrame(timeout: .seconds(2)) else { Issue.record("no frame"); return }
        let bytes = Data(frame.image.plane0.bytes)
        #expect(!bytes.withUnsafeBytes { MJPEG.hasHuffmanTables($0) })
        let scratch = ScratchFolder()
        let url = try PhotoLibrary(directory: scratch.url).saveSynchronously(jpeg: bytes)
        let saved = try Data(contentsOf: url)
        #expect(saved.withUnsafeBytes { MJPEG.hasHuffmanTables($0) })
        #expect(decodes(saved)! == (320, 240))
        #expect(VirtualCamera.frameNumber(inJPEG: saved) == frame.metadata.sequence)
    }

    @Test func errnosMapToTypedErrorsThatSayWhatToDo() {
        let cases: [(Int32, CaptureError.Code)] = [
            (ENOSPC, .diskFull), (EDQUOT, .diskFull), (EROFS, .readOnlyFileSystem),
            (EACCES, .permissionDenied), (EPERM, .permissionDenied), (EIO, .ioError),
        ]
        for (code, expected) in cases {
            let e = PhotoLibrary.storageError(code, operation: "write", path: "/photos", size: 1234)
            #expect(e.code == expected && e.errno == code && e.operation == "write")
            #expect(e.message.contains("/photos"))
        }
        #expect(PhotoLibrary.storageError(EACCES, operation: "open", path: "/p").message.contains("permission"))
    }

    @Test func leftoversOfACrashedSaveAreCleanedUp() throws {
        let scratch = ScratchFolder()
        // A pid no process has (kill says ESRCH), and our own, which runs.
        var dead: pid_t = 4_000_000
        while kill(dead, 0) == 0 || errno != ESRCH { dead -= 1 }
        let stale = scratch.path + "/.IMG-\(dead)-42.jpg.partial"
        let live = scratch.path + "/.IMG-\(getpid())-43.jpg.partial"
        try Data("half a photo".utf8).write(to: URL(fileURLWithPath: stale))
        try Data("being written".utf8).write(to: URL(fileURLWithPath: live))
        let fresh = scratch.path + "/.IMG-\(dead)-44.jpg.partial"  // dead writer, but too recent to judge
        try Data("just now".utf8).write(to: URL(fileURLWithPath: fresh))
        let hourAgo = Date().addingTimeInterval(-3600)
        for path in [stale, live] { try FileManager.default.setAttributes([.modificationDate: hourAgo], ofItemAtPath: path) }
        let url = try PhotoLibrary(directory: scratch.url).saveSynchronously(jpeg: makeJPEG())
        #expect(scratch.list() == [".IMG-\(dead)-44.jpg.partial", ".IMG-\(getpid())-43.jpg.partial", url.lastPathComponent].sorted())
    }

    @Test func aFullDiskGivesDiskFullAndLeavesNoPartialFile() throws {
        let mountPoint = "/tmp/photo-full-\(getpid())-\(UUID().uuidString.prefix(6))"
        try withTmpfs(at: mountPoint) {
            let library = PhotoLibrary(fixedDirectory: URL(fileURLWithPath: mountPoint), clock: { fixedDate })
            // A small photo fits; it must survive what follows untouched.
            let small = makeJPEG(width: 32, height: 32)
            let kept = try library.saveSynchronously(jpeg: small)
            let keptBytes = try Data(contentsOf: kept)
            // A photo bigger than the whole disk: the write runs out of space part way.
            let big = makeJPEG(width: 256, height: 256, noise: true)
            #expect(big.count > 100_000)
            do throws(CaptureError) {
                _ = try library.saveSynchronously(jpeg: big)
                Issue.record("a \(big.count)-byte photo fit on a 64 KiB disk")
            } catch {
                #expect(error.code == .diskFull, "\(error)")
                #expect(error.message.contains("free some space"))
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: mountPoint) == [kept.lastPathComponent])

            // Fill the disk to the last byte, then even a tiny photo does not fit.
            let filler = open(mountPoint + "/filler", O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
            try #require(filler >= 0)
            let chunk = [UInt8](repeating: 0xAB, count: 4096)
            while chunk.withUnsafeBytes({ Glibc.write(filler, $0.baseAddress, $0.count) }) > 0 {}
            #expect(errno == ENOSPC)
            close(filler)
            do throws(CaptureError) {
                _ = try library.saveSynchronously(jpeg: small)
                Issue.record("a photo was saved on a full disk")
            } catch {
                #expect(error.code == .diskFull, "\(error)")
            }
            let left = try FileManager.default.contentsOfDirectory(atPath: mountPoint).sorted()
            #expect(left == ["filler", kept.lastPathComponent].sorted(), "left behind: \(left)")
            #expect(try Data(contentsOf: kept) == keptBytes)
        }
    }

    @Test func aReadOnlyDiskGivesReadOnlyFileSystem() throws {
        let mountPoint = "/tmp/photo-ro-\(getpid())-\(UUID().uuidString.prefix(6))"
        try withTmpfs(at: mountPoint) {
            let library = PhotoLibrary(directory: URL(fileURLWithPath: mountPoint))
            let before = try library.saveSynchronously(jpeg: makeJPEG())
            try remountReadOnly(mountPoint)
            for folder in [mountPoint, mountPoint + "/Pictures"] {
                do throws(CaptureError) {
                    _ = try PhotoLibrary(directory: URL(fileURLWithPath: folder)).saveSynchronously(jpeg: makeJPEG())
                    Issue.record("saved onto a read-only file system")
                } catch {
                    #expect(error.code == .readOnlyFileSystem, "\(error)")
                    #expect(error.message.contains("read-only"))
                }
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: mountPoint) == [before.lastPathComponent])
            #expect(decodes(try Data(contentsOf: before)) != nil)
        }
    }
}

/// `PhotoLibrary.write(jpeg:metadata:to:)`: a file name of the caller's choosing, written the
/// album's way.
@Suite struct PhotoLibraryWriteToFileTests {
    @Test func replacesTheFileWholeWithEXIFAndLeavesNothingElse() throws {
        let scratch = ScratchFolder()
        let url = scratch.url.appendingPathComponent("shot.jpg")
        try Data("old".utf8).write(to: url)
        try PhotoLibrary.write(jpeg: makeJPEG(), metadata: PhotoMetadata(make: "Maker", model: "Cam"), to: url)
        let saved = try Data(contentsOf: url)
        #expect(decodes(saved) != nil)
        let exif = saved.withUnsafeBytes { EXIFInfo(jpeg: $0) }
        #expect(exif?.make == "Maker" && exif?.model == "Cam", "\(String(describing: exif))")
        #expect(scratch.list() == ["shot.jpg"])
    }

    @Test func aMissingFolderOrAFolderNameIsRefusedAndNothingIsWritten() throws {
        let scratch = ScratchFolder()
        let missing = #expect(throws: CaptureError.self) {
            try PhotoLibrary.write(jpeg: makeJPEG(), to: scratch.url.appendingPathComponent("no/such/x.jpg"))
        }
        #expect(missing?.code == .invalidArgument && missing?.message.contains("no such folder") == true, "\(String(describing: missing))")
        mkdir(scratch.path + "/sub", 0o755)
        let folder = #expect(throws: CaptureError.self) {
            try PhotoLibrary.write(jpeg: makeJPEG(), to: scratch.url.appendingPathComponent("sub"))
        }
        #expect(folder?.message.contains("is a folder") == true, "\(String(describing: folder))")
        let bad = #expect(throws: CaptureError.self) {
            try PhotoLibrary.write(jpeg: Data("not a jpeg".utf8), to: scratch.url.appendingPathComponent("bad.jpg"))
        }
        #expect(bad?.code == .invalidArgument)
        #expect(scratch.list() == ["sub"])
        #expect(scratch.list("/sub").isEmpty)
    }

    /// A FIFO, a device node (when this user may make one) and a symbolic link are refused by
    /// name and left as they were; so is the file the link points to. A folder that takes no new
    /// files (/proc) is named as such, not as missing.
    @Test func nothingButARegularFileIsReplaced() throws {
        let scratch = ScratchFolder()
        let fifo = scratch.path + "/fifo.jpg", node = scratch.path + "/null.jpg", link = scratch.path + "/link.jpg"
        let target = scratch.path + "/target"
        #expect(mkfifo(fifo, 0o644) == 0)
        let madeNode = mknod(node, S_IFCHR | 0o644, dev_t(1 << 8 | 3)) == 0
        if !madeNode { print("PhotoLibraryWriteToFileTests: mknod not permitted here (errno \(errno)); the device node case is skipped") }
        try Data("target".utf8).write(to: URL(fileURLWithPath: target))
        #expect(symlink(target, link) == 0)
        var cases = [(fifo, "a FIFO", Glibc.S_IFIFO), (link, "a symbolic link", Glibc.S_IFLNK)]
        if madeNode { cases.append((node, "a character device", Glibc.S_IFCHR)) }
        for (path, words, type) in cases {
            let e = #expect(throws: CaptureError.self) { try PhotoLibrary.write(jpeg: makeJPEG(), to: URL(fileURLWithPath: path)) }
            #expect(e?.code == .invalidArgument && e?.message.contains("\(path) is \(words)") == true, "\(String(describing: e))")
            var st = stat()
            #expect(lstat(path, &st) == 0 && st.st_mode & S_IFMT == type, "\(path) was changed")
        }
        if madeNode {
            var st = stat()
            #expect(lstat(node, &st) == 0 && st.st_rdev == dev_t(1 << 8 | 3))
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: target)) == Data("target".utf8))
        // Nothing else: no temporary file left.
        #expect(scratch.list() == (["fifo.jpg", "link.jpg", "target"] + (madeNode ? ["null.jpg"] : [])).sorted(), "\(scratch.list())")
        if getuid() == 0 {
            let proc = #expect(throws: CaptureError.self) {
                try PhotoLibrary.write(jpeg: makeJPEG(), to: URL(fileURLWithPath: "/proc/x.jpg"))
            }
            #expect(proc?.message.contains("/proc does not take new files") == true, "\(String(describing: proc))")
        }
    }
}
