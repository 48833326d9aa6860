import Crypto
import FoundationEssentials
import Glibc

/// POSIX calls retried on EINTR, failures turned into ``BundleError`` naming the file.
enum POSIX {
    static func check(_ result: Int, _ call: String, path: String) throws -> Int {
        if result >= 0 { return result }
        throw BundleError(.io, "\(path): \(call) failed: \(String(cString: strerror(errno)))")
    }

    static func retrying(_ call: () -> Int) -> Int {
        while true {
            let result = call()
            if result < 0 && errno == EINTR { continue }
            return result
        }
    }
}

/// A file written through a buffer, hashing what it writes, so a bundle streams to disk.
/// Not Sendable on purpose: one writer, one thread.
final class HashingFileOutput {
    let path: String
    let descriptor: Int32
    private var buffer: [UInt8] = []
    private var hasher = SHA512()
    /// Bytes flushed to the file; ``pending`` more wait in the buffer.
    private(set) var bytesWritten = 0
    var hashing = true

    var pending: Int { buffer.count }

    init(creating path: String, mode: mode_t = 0o644) throws {
        self.path = path
        descriptor = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        if descriptor < 0 {
            throw BundleError(.io, "\(path): cannot create: \(String(cString: strerror(errno)))")
        }
        buffer.reserveCapacity(1 << 18)
    }

    /// A scratch file that has no name (made in `directory`, else the temporary folder, then
    /// unlinked at once, mode 0600), for a bundle's plaintext: it leaves nothing behind however
    /// the process ends. `path` names the file it stands for, in messages.
    init(scratchFor path: String, in directory: String? = nil) throws {
        self.path = path
        let folder = directory ?? FileManager.default.temporaryDirectory.path
        var template = Array((folder + "/.sqsync-plain-XXXXXX").utf8CString)
        descriptor = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        if descriptor < 0 {
            throw BundleError(.io, "\(path): cannot make a scratch file to decrypt into: \(String(cString: strerror(errno)))")
        }
        template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
        hashing = false
        buffer.reserveCapacity(1 << 18)
    }

    deinit { close(descriptor) }

    func write(_ bytes: [UInt8]) throws {
        buffer.append(contentsOf: bytes)
        if buffer.count >= 1 << 18 { try flush() }
    }

    func write(byte: UInt8) throws {
        buffer.append(byte)
        if buffer.count >= 1 << 18 { try flush() }
    }

    func flush() throws {
        guard !buffer.isEmpty else { return }
        if hashing { hasher.update(data: buffer) }
        var offset = 0
        while offset < buffer.count {
            let written = try buffer.withUnsafeBytes { raw in
                try POSIX.check(
                    POSIX.retrying { Glibc.write(descriptor, raw.baseAddress! + offset, raw.count - offset) }, "write",
                    path: path)
            }
            offset += written
        }
        bytesWritten += buffer.count
        buffer.removeAll(keepingCapacity: true)
    }

    func digest() throws -> SHA512.Digest {
        try flush()
        return hasher.finalize()
    }

    func sync() throws {
        try flush()
        _ = try POSIX.check(Int(fsync(descriptor)), "fsync", path: path)
    }
}

/// Reads a byte range of a file through a buffer, hashing what it reads.
final class HashingFileInput {
    let path: String
    private let descriptor: Int32
    private var buffer: [UInt8]
    private var position = 0
    private var filled = 0
    private var fileOffset: Int
    private let start: Int
    private let end: Int
    private var hasher = SHA512()
    /// Off for a copy whose bytes were checked already (a segment kept to relay).
    var hashing = true

    init(path: String, range: Range<Int>) throws {
        self.path = path
        descriptor = open(path, O_RDONLY | O_CLOEXEC)
        if descriptor < 0 {
            throw BundleError(.io, "\(path): cannot open: \(String(cString: strerror(errno)))")
        }
        fileOffset = range.lowerBound
        start = range.lowerBound
        end = range.upperBound
        buffer = [UInt8](repeating: 0, count: 1 << 18)
    }

    /// Reads through a copy of an open descriptor (a file that has no name any more).
    init(descriptor open: Int32, path: String, range: Range<Int>) throws {
        self.path = path
        descriptor = dup(open)
        if descriptor < 0 {
            throw BundleError(.io, "\(path): cannot read: \(String(cString: strerror(errno)))")
        }
        fileOffset = range.lowerBound
        start = range.lowerBound
        end = range.upperBound
        buffer = [UInt8](repeating: 0, count: 1 << 18)
    }

    deinit { close(descriptor) }

    var isAtEnd: Bool { position == filled && fileOffset >= end }

    /// Bytes handed out so far, counted from the start of the range.
    var consumed: Int { fileOffset - (filled - position) - start }

    private func refill() throws -> Bool {
        guard fileOffset < end else { return false }
        let want = min(buffer.count, end - fileOffset)
        let got = try buffer.withUnsafeMutableBytes { raw in
            try POSIX.check(POSIX.retrying { pread(descriptor, raw.baseAddress!, want, off_t(fileOffset)) }, "read", path: path)
        }
        guard got > 0 else { return false }
        if hashing { hasher.update(data: buffer[0..<got]) }
        fileOffset += got
        position = 0
        filled = got
        return true
    }

    func readByte() throws -> UInt8 {
        if position == filled {
            guard try refill() else { throw BundleError(.corrupt, "\(path): the bundle ends in the middle of a record") }
        }
        defer { position += 1 }
        return buffer[position]
    }

    func readBytes(_ count: Int) throws -> [UInt8] {
        var result: [UInt8] = []
        result.reserveCapacity(count)
        while result.count < count {
            if position == filled {
                guard try refill() else { throw BundleError(.corrupt, "\(path): the bundle ends in the middle of a record") }
            }
            let take = min(count - result.count, filled - position)
            result.append(contentsOf: buffer[position..<(position + take)])
            position += take
        }
        return result
    }

    /// Reads `count` bytes without keeping them: they are hashed all the same.
    func skip(_ count: Int) throws {
        var remaining = count
        while remaining > 0 {
            if position == filled {
                guard try refill() else { throw BundleError(.corrupt, "\(path): the bundle ends in the middle of a record") }
            }
            let take = min(remaining, filled - position)
            position += take
            remaining -= take
        }
    }

    /// Reads to the end of the range, for a pass that only hashes.
    func drain() throws {
        position = filled
        while try refill() { position = filled }
    }

    func digest() -> SHA512.Digest { hasher.finalize() }
}
