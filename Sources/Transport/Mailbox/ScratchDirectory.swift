import ChangeLog
import FoundationEssentials
import Glibc

/// A private temporary folder beside the database, removed with everything in it when
/// released. A sync killed half-way leaves it behind; the next sync (which holds the lock)
/// clears what earlier runs left.
final class ScratchDirectory {
    let path: String

    static func parent(of database: String) -> String {
        let url = URL(fileURLWithPath: database)
        return url.deletingLastPathComponent().path + "/." + url.lastPathComponent + "-sqsync-tmp"
    }

    /// Removes what syncs killed half-way left; call only while holding the sync lock.
    static func clearLeftovers(beside database: String) {
        try? FileManager.default.removeItem(atPath: parent(of: database))
    }

    init(beside database: String) throws {
        let parent = Self.parent(of: database)
        do {
            try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
        } catch {
            throw TransportError(.io, "\(parent): cannot create a temporary folder: \(errorText(error))")
        }
        var template = Array((parent + "/XXXXXX").utf8CString)
        guard let created = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw TransportError(.io, "\(parent): cannot create a temporary folder: \(String(cString: strerror(errno)))")
        }
        path = String(cString: created)
    }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
        rmdir(URL(fileURLWithPath: path).deletingLastPathComponent().path)
    }
}
