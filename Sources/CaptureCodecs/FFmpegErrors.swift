internal import CFFmpeg
import Foundation

/// FFmpeg's `AVERROR_EOF` (a macro Swift cannot import): `-MKTAG('E', 'O', 'F', ' ')`.
package let averrorEOF: Int32 = -Int32(bitPattern: 0x2046_4F45)

/// FFmpeg's message for an error code.
package func ffMessage(_ code: Int32) -> String {
    var buf = [CChar](repeating: 0, count: 128)
    if av_strerror(code, &buf, buf.count) < 0 { return "FFmpeg error \(code)" }
    return String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
