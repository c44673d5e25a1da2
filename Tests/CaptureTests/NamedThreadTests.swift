import CaptureSystem
import Foundation
import Testing

/// The library's threads: their names and, for the low qualities, their nice values, as the
/// kernel sees them (/proc/thread-self/stat).
@Suite struct NamedThreadTests {
    /// The calling thread's name and nice value.
    static func current() -> (name: String, nice: Int)? {
        guard let stat = try? String(contentsOfFile: "/proc/thread-self/stat", encoding: .utf8),
            let open = stat.firstIndex(of: "("), let close = stat.lastIndex(of: ")")
        else { return nil }
        // After the name: state (field 3) ... nice (field 19).
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 16, let nice = Int(fields[16]) else { return nil }
        return (String(stat[stat.index(after: open)..<close]), nice)
    }

    @Test(arguments: [(QualityOfService.utility, 10 as Int?), (.background, 19), (.userInteractive, nil), (.default, nil)])
    func lowQualitiesRunNicerAndEveryThreadHasItsName(_ quality: QualityOfService, _ nice: Int?) throws {
        let own = try #require(Self.current())
        let seen = Locked<(name: String, nice: Int)?>(nil)
        let done = DispatchSemaphore(value: 0)
        NamedThread.start("cap test nice", qualityOfService: quality) {
            seen.withLock { $0 = Self.current() }
            done.signal()
        }
        #expect(done.wait(timeout: .now() + 10) == .success)
        let got = try #require(seen.withLock { $0 })
        #expect(got.name == "cap test nice")
        // The higher classes keep the process's value (the test thread's).
        #expect(got.nice == nice ?? own.nice, "\(quality): nice \(got.nice)")
    }
}
