// Async library calls from the tool's synchronous commands.
import Capture
import Foundation

/// Runs an async call to completion from synchronous code (the tool has no other work).
package func runBlocking<T: Sendable>(_ body: @escaping @Sendable () async throws(CaptureError) -> T) throws(CaptureError) -> T {
    let box = ResultBox<T>()
    let sem = DispatchSemaphore(value: 0)
    Task {
        do throws(CaptureError) { box.result = .success(try await body()) } catch { box.result = .failure(error) }
        sem.signal()
    }
    sem.wait()
    return try box.result!.get()
}
final class ResultBox<T: Sendable>: @unchecked Sendable { var result: Result<T, CaptureError>? }
