import ChangeLog
import FoundationEssentials
import Glibc

extension AllowedSigners {
    /// Appends one line to an `allowed_signers` file, creating the file (and its folder, private
    /// to the user) when missing, so a first key can be trusted in one step on an empty account.
    ///
    /// A line already in the file is not added again, so running this twice trusts the key once.
    /// The text is checked first: a line the file format cannot read is never written.
    public static func append(line: String, toFileAt path: String) throws {
        _ = try AllowedSigners(text: line)
        let folder = URL(fileURLWithPath: path).deletingLastPathComponent().path
        do {
            try FileManager.default.createDirectory(
                atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw KeyFormatError("\(folder): cannot create the folder for \(path): \(errorText(error))")
        }
        let existing = try readFileIfExists(atPath: path) ?? []
        let text = String(decoding: existing, as: UTF8.self)
        if text.split(whereSeparator: \.isNewline).contains(where: { $0 == line }) { return }
        let separator = existing.isEmpty || existing.last == UInt8(ascii: "\n") ? "" : "\n"
        let bytes = Array((separator + line + "\n").utf8)

        var fd: Int32
        repeat { fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644) } while fd < 0 && errno == EINTR
        guard fd >= 0 else { throw KeyFormatError("\(path): open failed: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw KeyFormatError("\(path): write failed: \(String(cString: strerror(errno)))")
            }
            offset += n
        }
        guard fsync(fd) == 0 else {
            throw KeyFormatError("\(path): fsync failed: \(String(cString: strerror(errno)))")
        }
    }
}
