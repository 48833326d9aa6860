import FoundationEssentials
import Glibc

/// A medium that holds files under one root: a local folder, a USB stick, or a folder on an
/// SFTP server. The mailbox logic (which bundles to fetch, which to leave, which to remove)
/// is written once against this protocol, so the merge never depends on the medium.
///
/// Every path is relative to the transport's root and uses `/` as separator.
/// Implementations must make ``writeFile(from:to:)`` atomic: readers see either no file or
/// the whole file, never a partial one, even with two writers at once.
public protocol Transport: AnyObject {
    /// How messages name this medium, e.g. `/media/usb` or `ssh://hq:22/srv/sqsync`.
    var displayName: String { get }

    /// Who is uploading: temporary names are `.tmp-<uploadOwner>-<random>` (`.tmp-<random>`
    /// while empty), so a writer can recognise, and remove, what its own killed uploads left.
    var uploadOwner: String { get set }

    /// What `directory` holds: its regular files, its sub-folders and the unfinished uploads
    /// (`.tmp-…` files, anyone's) in it, each by name; empty if it does not exist. Symbolic
    /// links and other special files are never listed.
    func list(_ directory: String) throws -> FolderListing

    /// The size in bytes of the file at `path`, or nil when nothing has that name.
    func fileSize(_ path: String) throws -> Int?

    /// Copies the whole file at `path` to the local file `localPath` (created or replaced).
    /// A file larger than `maxBytes` is refused (``TransportError/Kind/tooLarge``) before
    /// any of it is copied.
    func readFile(_ path: String, to localPath: String, maxBytes: Int) throws

    /// Publishes the local file `localPath` as `path`: written under a unique temporary name in
    /// the same folder, flushed to stable storage, then renamed. `path` must not exist yet
    /// (SFTPv3 rename cannot replace), so callers give every published file a unique name.
    func writeFile(from localPath: String, to path: String) throws

    /// Removes a file; removing one that is already gone is not an error.
    func removeFile(_ path: String) throws

    /// Creates `path` and any missing parents; an existing folder is not an error.
    func makeDirectories(_ path: String) throws

    /// Says which files ``readFile(_:to:maxBytes:)`` is about to be asked for, so that a medium
    /// where each read costs a process or a round trip can fetch them together into the local
    /// folder `directory`. Best effort: a file it did not fetch is read as usual.
    func prefetch(_ paths: [String], maxBytes: Int, into directory: String) throws
}

/// One folder's entries, by name, sorted (``Transport/list(_:)``).
public struct FolderListing: Sendable, Equatable {
    public var files: [String] = []
    public var folders: [String] = []
    /// Unfinished uploads: files named `.tmp-…`, never taken as published files.
    public var unfinished: [String] = []

    public init() {}

    /// Sorts a regular file into ``files`` or ``unfinished`` by its name.
    public mutating func addFile(_ name: String) {
        if name.hasPrefix(temporaryPrefix) { unfinished.append(name) } else { files.append(name) }
    }

    /// The same entries in name order, as every transport lists them.
    public func sorted() -> FolderListing {
        var listing = self
        listing.files.sort()
        listing.folders.sort()
        listing.unfinished.sort()
        return listing
    }
}

/// A medium whose folders carry stamps this machine's clock can compare (a local folder or
/// stick): a quiet sync compares a stamp or two instead of listing every replica's folders.
/// Media without them (SFTP, object stores) simply list.
public protocol StampedFolders: Transport {
    /// A stamp for each sub-folder of `directory`, by name: a folder whose stamp is the same
    /// at two times held the same entries at both. Nil when this medium cannot promise that:
    /// its clock is not this machine's (network file systems), `directory` is missing,
    /// or a folder changed so recently that a change made now could get the same stamp.
    func settledFolderStamps(in directory: String) throws -> [String: String]?

    /// The stamp of the folder `directory` itself, as ``settledFolderStamps(in:)`` gives each
    /// sub-folder's: `none` when it does not exist, nil when the medium cannot promise it.
    func settledStamp(of directory: String) throws -> String?

    /// Gives `directory` a new stamp (``settledStamp(of:)``): a writer marks the mailbox's
    /// folder after each change below it, so that a quiet sync compares one stamp, not one
    /// per replica (docs/PERFORMANCE.md, "A thousand replicas").
    func markChanged(_ directory: String) throws
}

extension Transport {
    /// Folders and SFTP read a file as cheaply one at a time.
    public func prefetch(_ paths: [String], maxBytes: Int, into directory: String) throws {}

    /// Names (not paths) of the regular files in `directory`, unfinished uploads left out.
    public func listFiles(in directory: String) throws -> [String] { try list(directory).files }

    /// Names of the sub-folders of `directory`.
    public func listDirectories(in directory: String) throws -> [String] { try list(directory).folders }

    /// Names of the unfinished uploads (`.tmp-…` files, anyone's) in `directory`.
    public func temporaryFiles(in directory: String) throws -> [String] { try list(directory).unfinished }

    /// Copies the whole file, whatever its size.
    public func readFile(_ path: String, to localPath: String) throws {
        try readFile(path, to: localPath, maxBytes: .max)
    }

/// The refusal of a file larger than `maxBytes`.
    func tooLarge(_ path: String, bytes: Int, maxBytes: Int) -> TransportError {
        TransportError(
            .tooLarge,
            "\(displayName)/\(path): \(bytes) bytes, more than the \(maxBytes) a file of the mailbox may be (SQSYNC_MAX_BUNDLE_BYTES); skipped without reading it"
        )
    }

    /// A new temporary name in `folder` for an upload (see ``uploadOwner``).
    func temporaryName(in folder: String) -> String {
        let owner = uploadOwner.isEmpty ? "" : uploadOwner + "-"
        return "\(folder)/\(temporaryPrefix)\(owner)\(UUID().uuidString.lowercased())"
    }
}

/// A transport failure, with the medium and the path or host it concerns in its message.
public struct TransportError: Error, CustomStringConvertible, Equatable {
    public enum Kind: Sendable, Equatable {
        case io
        case hostKeyUnknown
        case hostKeyChanged
        case authentication
        case timeout
        case connection
        /// A mailbox file larger than the cap, refused before it was read.
        case tooLarge
        /// A target that held a mailbox before holds none now (a stick not mounted).
        case noMailbox
    }

    public var kind: Kind
    public var description: String

    public init(_ kind: Kind, _ description: String) {
        self.kind = kind
        self.description = description
    }
}
