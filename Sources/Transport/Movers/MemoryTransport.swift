import FoundationEssentials
import Glibc

/// A transport held in memory, for tests of the mailbox logic that need no disk or server.
///
/// It follows the same rules as the real ones, so tests catch the same mistakes: a file can
/// only be written into a folder made by ``makeDirectories(_:)`` (or the root), an existing
/// name is never replaced, and `.tmp-` names are not listed as files.
///
/// Not Sendable on purpose: it is a plain mutable object for one test at a time.
public final class MemoryTransport: Transport {
    /// The stored files by normalized relative path (`a/b/c`). Tests may read it, or plant
    /// files (for example a `.tmp-` leftover) directly.
    public var files: [String: Data] = [:]
    /// The folders that exist, by normalized relative path; the root (`""`) always does.
    public private(set) var directories: Set<String> = [""]

    public let displayName: String
    public var uploadOwner = ""

    public init(displayName: String = "memory:") {
        self.displayName = displayName
    }

    public func fileSize(_ path: String) throws -> Int? { files[try normalized(path)]?.count }

    public func list(_ directory: String) throws -> FolderListing {
        let folder = try normalized(directory)
        var listing = FolderListing()
        for name in files.keys.compactMap({ child(of: folder, $0) }) { listing.addFile(name) }
        listing.folders = directories.compactMap { child(of: folder, $0) }
        return listing.sorted()
    }

    public func readFile(_ path: String, to localPath: String, maxBytes: Int) throws {
        let key = try normalized(path)
        guard let data = files[key] else { throw TransportError(.io, "\(displayName)\(key): no such file") }
        guard data.count <= maxBytes else { throw tooLarge(path, bytes: data.count, maxBytes: maxBytes) }
        try LocalFile.replace(localPath) { output in
            try data.withUnsafeBytes { try output.write($0) }
        }
    }

    public func writeFile(from localPath: String, to path: String) throws {
        let key = try normalized(path)
        guard directories.contains(parent(of: key)) else {
            throw TransportError(.io, "\(displayName)\(key): the folder \(parent(of: key)) does not exist")
        }
        guard files[key] == nil else {
            throw TransportError(.io, "\(displayName)\(key): already exists; refusing to replace it")
        }
        do {
            files[key] = try Data(contentsOf: URL(fileURLWithPath: localPath))
        } catch {
            throw TransportError(.io, "\(localPath): cannot read: \(error)")
        }
    }

    public func removeFile(_ path: String) throws {
        files[try normalized(path)] = nil
    }

    public func makeDirectories(_ path: String) throws {
        var current = ""
        for part in try RelativePath.components(path) {
            current = current.isEmpty ? part : "\(current)/\(part)"
            guard files[current] == nil else {
                throw TransportError(.io, "\(displayName)\(current): exists and is not a folder")
            }
            directories.insert(current)
        }
    }

    private func normalized(_ path: String) throws -> String {
        try RelativePath.components(path).joined(separator: "/")
    }

    private func parent(of key: String) -> String {
        key.lastIndex(of: "/").map { String(key[..<$0]) } ?? ""
    }

    /// The name of `key` if it lies directly in `folder`.
    private func child(of folder: String, _ key: String) -> String? {
        guard !key.isEmpty, parent(of: key) == folder else { return nil }
        return key.lastIndex(of: "/").map { String(key[key.index(after: $0)...]) } ?? key
    }
}
