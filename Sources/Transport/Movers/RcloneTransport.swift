import FoundationEssentials
import Glibc

/// A mailbox on any rclone remote (S3, GCS, Azure Blob, WebDAV, SFTP, …), driven through the
/// `rclone` program as restic's rclone backend is: sqsync speaks no storage protocol itself.
///
/// The same guarantees as a folder:
/// - Uploads go to `.tmp-<owner>-<uuid>` beside the final name, then `rclone moveto` gives
///   them that name: a server-side copy on object stores (the new object appears whole or not
///   at all), a rename elsewhere. A sync killed half-way leaves at most a `.tmp-` object,
///   never listed, which its writer removes next time.
/// - A final name is never replaced: a name already listed is refused, and names follow
///   content (the ``Transport`` contract).
/// - Object stores have no links; a planted object is an object like any other, which the
///   mailbox refuses and remembers as it does a planted file.
///
/// Every folder's listing comes from one recursive listing of its top folder (`sqsync/`), taken
/// the first time a sync asks and kept up to date with this sync's own uploads and removals:
/// a sync runs a handful of rclone processes whatever the number of replicas. Objects other
/// writers add during the sync are seen by the next one.
///
/// Not Sendable on purpose: the listing belongs to one sync.
public final class RcloneTransport: Transport {
    public let target: RcloneTarget
    public var uploadOwner = ""
    private let program: RcloneProgram
    /// Entries by folder (relative path), for every top folder listed so far.
    private var folders: [String: [String: Entry]] = [:]
    private var listedTops: Set<String> = []
    /// Local copies ``prefetch(_:maxBytes:into:)`` fetched, by path, each taken once.
    private var prefetched: [String: String] = [:]
    static let prefetchObjectBytes = 4 << 20
    static let prefetchTotalBytes = 256 << 20

    public var displayName: String { target.displayName }

    /// Finds the `rclone` program and lists `folder` (the mailbox's, by default), so that a
    /// remote rclone does not know, wrong credentials or a dead endpoint fail here, before a
    /// sync touches the replica. A bucket or folder that does not exist is refused, as a
    /// missing folder or SSH path is: uploading would create it, and a mistyped bucket would
    /// become a mailbox nobody reads.
    public init(target: RcloneTarget, timeoutSeconds: Int = 30, listing folder: String) throws {
        self.target = target
        program = try RcloneProgram(timeoutSeconds: timeoutSeconds)
        try list(top: folder)
        if folders[folder]?.isEmpty ?? true, try !pathExists() {
            throw TransportError(
                .io,
                "\(displayName): no such bucket or folder (create it first, e.g. rclone mkdir '\(target.displayName.dropFirst(RcloneTarget.scheme.count))')"
            )
        }
    }

    /// Whether the mailbox's own path lists: rclone's exit code 3 (directory not found) is what
    /// a missing bucket or local folder gives; an empty prefix in a bucket lists.
    private func pathExists() throws -> Bool {
        let run = try program.run("lsjson", flags: ["--max-depth", "1", "--dirs-only", "--no-mimetype", "--no-modtime"], [try target.remoteFolder("")])
        if run.status == 3 { return false }
        guard run.status == 0 else { throw failure("lsjson", "", run.complaint) }
        return true
    }

    /// How deep below a top folder the listing goes: three levels (a folder of folders of
    /// files, as a mailbox's is); deeper trees, which only a planter makes, are not walked.
    static let listingDepth = 3

    /// What a name holds: an object store may hold an object and a prefix under one name
    /// (`a` and `a/b`), so an entry may be both a folder and a file.
    private struct Entry {
        var isDirectory: Bool
        /// The size of the object under exactly this name; nil when there is none.
        var fileSize: Int?
    }

    public func list(_ directory: String) throws -> FolderListing {
        var listing = FolderListing()
        for (name, entry) in try entries(in: directory) {
            if entry.isDirectory { listing.folders.append(name) }
            if entry.fileSize != nil { listing.addFile(name) }
        }
        return listing.sorted()
    }

    public func fileSize(_ path: String) throws -> Int? {
        let (folder, name) = try split(path)
        return try entries(in: folder)[name]?.fileSize
    }

    /// Reads at most `maxBytes` + 1 bytes (`rclone cat --count`), so an object replaced by a larger
    /// one since the listing is refused without being read whole.
    public func readFile(_ path: String, to localPath: String, maxBytes: Int) throws {
        guard let listedSize = try fileSize(path) else { throw vanished(path) }
        guard listedSize <= maxBytes else { throw tooLarge(path, bytes: listedSize, maxBytes: maxBytes) }
        if let local = prefetched.removeValue(forKey: path) {
            if let size = Self.localSize(local), size <= maxBytes {
                try? FileManager.default.removeItem(atPath: localPath)
                try FileManager.default.moveItem(atPath: local, toPath: localPath)
                return
            }
            try? FileManager.default.removeItem(atPath: local)
        }
        let source = try target.remote(path)
        let limit = maxBytes == .max ? maxBytes : maxBytes + 1
        var copied = 0
        try LocalFile.replace(localPath) { output in
            let run = try program.spawn("cat", ["--count", "\(limit)"], [source]) { chunk in
                copied += chunk.count
                guard copied <= maxBytes else { return false }
                try chunk.withUnsafeBytes { try output.write($0) }
                return true
            }
            guard copied <= maxBytes else { throw tooLarge(path, bytes: copied, maxBytes: maxBytes) }
            // A missing object: exit code 3 or 4 (not found) on some remotes; on object stores
            // `rclone cat` prints nothing and succeeds, or fails with the server's 404. Whatever
            // the code, an object the remote no longer has was removed since the listing
            // (another sync superseded it): gone, as in a folder, not a failure.
            if copied == 0 && listedSize > 0 {
                let gone = try [0, 3, 4].contains(run.status) || !objectExists(path)
                if gone { throw vanished(path) }
            }
            guard run.status == 0 else { throw failure("cat", path, run.complaint) }
        }
    }

    public func writeFile(from localPath: String, to path: String) throws {
        let (folder, name) = try split(path)
        guard try entries(in: folder)[name]?.fileSize == nil else {
            throw TransportError(
                .io, "\(displayName)/\(path): already exists; refusing to replace it (every published file needs a new name)")
        }
        let temporary = temporaryName(in: folder)
        let copied = try program.run("copyto", flags: ["--no-check-dest"], [localPath, try target.remote(temporary)])
        guard copied.status == 0 else {
            try? removeRemote(temporary)
            throw failure("copyto", temporary, copied.complaint)
        }
        let moved = try program.run("moveto", [try target.remote(temporary), try target.remote(path)])
        guard moved.status == 0 else {
            try? removeRemote(temporary)
            throw failure("moveto", path, moved.complaint)
        }
        record(path, Entry(isDirectory: false, fileSize: Self.localSize(localPath) ?? 0))
    }

    public func removeFile(_ path: String) throws {
        let (folder, name) = try split(path)
        guard let entry = try entries(in: folder)[name], entry.fileSize != nil else { return }
        try removeRemote(path)
        folders[folder]?[name] = entry.isDirectory ? Entry(isDirectory: true, fileSize: nil) : nil
    }

    /// Folders are only recorded: an upload makes the folders above it (object stores have no
    /// folders at all, only names with `/` in them), so creating them costs no call. An object
    /// of the same name does not block a folder (see ``record(_:_:)``); elsewhere the upload
    /// into it fails. The root's own entries are not listed for this (a bucket's root may hold
    /// much else).
    public func makeDirectories(_ path: String) throws {
        let parts = try RelativePath.components(path)
        guard let top = parts.first else { return }
        if !listedTops.contains(top) { try list(top: top) }
        for depth in parts.indices {
            record(parts[...depth].joined(separator: "/"), Entry(isDirectory: true, fileSize: nil))
        }
    }

    /// Fetches the listed objects among `paths` no larger than `maxBytes` with one `rclone copy
    /// --files-from-raw`: a sync that must look at many objects once (planted ones on a first
    /// sync, a late joiner's backlog) starts one rclone process, not one per object (0.1 to
    /// 0.3 s each). Only objects of up to ``prefetchObjectBytes``, ``prefetchTotalBytes`` in
    /// all: the process costs more than the bytes only for small ones, and the local disk holds
    /// a few at a time. A name with a control character is left to ``readFile(_:to:maxBytes:)``.
    public func prefetch(_ paths: [String], maxBytes: Int, into directory: String) throws {
        let limit = min(maxBytes, Self.prefetchObjectBytes)
        var total = 0
        var wanted: [String] = []
        for path in paths where prefetched[path] == nil && !path.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
            guard let size = try fileSize(path), size <= limit, total + size <= Self.prefetchTotalBytes else { continue }
            total += size
            wanted.append(path)
        }
        guard wanted.count > 1 else { return }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let list = directory + "/.files"
        try Data((wanted.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: list))
        let run = try program.run(
            "copy", flags: ["--files-from-raw", list, "--no-traverse"],
            [try target.remoteFolder(""), directory + "/files"])
        // What it fetched is whole (rclone writes each under a temporary name first), whatever
        // failed besides: an object removed since the listing is read, and found gone, later.
        _ = run
        for path in wanted where FileManager.default.fileExists(atPath: directory + "/files/" + path) {
            prefetched[path] = directory + "/files/" + path
        }
    }

    /// A local file's size (FoundationEssentials' attributes give it as UInt64, not Int).
    private static func localSize(_ path: String) -> Int? {
        var info = stat()
        return stat(path, &info) == 0 ? Int(info.st_size) : nil
    }

    // MARK: Listing

    /// The entries of `directory` by name; a missing folder has none.
    private func entries(in directory: String) throws -> [String: Entry] {
        let parts = try RelativePath.components(directory)
        let top = parts.first ?? ""
        if !listedTops.contains(top) { try list(top: top) }
        return folders[parts.joined(separator: "/")] ?? [:]
    }

    /// Lists a top folder's tree (or the root's own entries, for ""), replacing what was known of it.
    private func list(top: String) throws {
        let listed = try listing(of: top, depth: top.isEmpty ? 1 : Self.listingDepth)
        if top.isEmpty {
            var root = folders[""] ?? [:]
            for item in listed where root[item.path] == nil { root[item.path] = item.entry }
            folders[""] = root
        } else {
            folders = folders.filter { $0.key != top && !$0.key.hasPrefix(top + "/") }
            folders[top] = [:]
            for item in listed { record(top + "/" + item.path, item.entry) }
        }
        listedTops.insert(top)
    }

    /// One `rclone lsjson -R` below `folder`: relative paths and entries. A missing folder
    /// (rclone's exit code 3) lists as empty.
    private func listing(of folder: String, depth: Int) throws -> [(path: String, entry: Entry)] {
        let run = try program.run(
            "lsjson", flags: ["-R", "--max-depth", "\(depth)", "--no-mimetype", "--no-modtime"], [try target.remoteFolder(folder)])
        if run.status == 3 { return [] }
        guard run.status == 0 else { throw failure("lsjson", folder, run.complaint) }
        struct Listed: Decodable {
            var Path: String
            var Size: Int?
            var IsDir: Bool
        }
        let decoded: [Listed]
        do { decoded = try JSONDecoder().decode([Listed].self, from: run.output) } catch {
            throw TransportError(.io, "\(displayName)/\(folder): rclone lsjson printed a listing sqsync cannot read")
        }
        return decoded.compactMap { item in
            // A name that would step out of its folder, an empty one, or one no local file
            // system could hold (a scratch copy is made under it) is nothing the mailbox reads.
            let parts = item.Path.split(separator: "/", omittingEmptySubsequences: false)
            guard !parts.isEmpty,
                !parts.contains(where: { $0.isEmpty || $0 == "." || $0 == ".." || $0.utf8.count > Self.maxNameBytes })
            else { return nil }
            return (item.Path, Entry(isDirectory: item.IsDir, fileSize: item.IsDir ? nil : max(0, item.Size ?? 0)))
        }
    }

    /// Puts `path` in the listing, with every folder above it. An object store may hold a file
    /// and a folder under one name (`a` and `a/b`): the entry is both, so neither an object
    /// planted beside a replica's folder nor a prefix planted over a bundle hides anything.
    /// The bundle is read; the planted objects below it are never walked.
    private func record(_ path: String, _ entry: Entry) {
        let parts = path.split(separator: "/").map(String.init)
        guard let name = parts.last else { return }
        for depth in 1..<parts.count {
            let folder = parts.prefix(depth - 1).joined(separator: "/")
            var above = folders[folder]?[parts[depth - 1]] ?? Entry(isDirectory: true, fileSize: nil)
            above.isDirectory = true
            folders[folder, default: [:]][parts[depth - 1]] = above
        }
        let folder = parts.dropLast().joined(separator: "/")
        var merged = entry
        if let held = folders[folder]?[name] {
            merged.isDirectory = merged.isDirectory || held.isDirectory
            merged.fileSize = entry.fileSize ?? held.fileSize
        }
        folders[folder, default: [:]][name] = merged
        if entry.isDirectory, folders[path] == nil { folders[path] = [:] }
    }

    /// The longest file name Linux file systems take (NAME_MAX).
    static let maxNameBytes = 255

    private func removeRemote(_ path: String) throws {
        let removed = try program.run("deletefile", [try target.remote(path)])
        guard removed.status != 0 else { return }
        // rclone reports a missing object as a failure: one already gone is not an error.
        let look = try program.run("lsjson", flags: ["--stat", "--no-mimetype", "--no-modtime"], [try target.remote(path)])
        if look.status == 3 || look.status == 4 { return }
        if look.status == 0, String(decoding: look.output, as: UTF8.self).contains("\"IsDir\":true")
            || String(decoding: look.output, as: UTF8.self).contains("\"IsDir\": true")
        {
            return
        }
        throw failure("deletefile", path, removed.complaint)
    }

    /// Whether the remote still has the object at `path`, asked anew (not from the listing);
    /// true when the question itself fails, so that the failure that prompted it is reported.
    /// An object store answers for a missing key with a folder of that name (`"IsDir": true`).
    private func objectExists(_ path: String) throws -> Bool {
        let look = try program.run("lsjson", flags: ["--stat", "--no-mimetype", "--no-modtime"], [try target.remote(path)])
        if look.status == 3 || look.status == 4 { return false }
        guard look.status == 0 else { return true }
        let said = String(decoding: look.output, as: UTF8.self).filter { !$0.isWhitespace }
        return said.contains("\"IsDir\":false")
    }

    private func split(_ path: String) throws -> (folder: String, name: String) {
        let parts = try RelativePath.components(path)
        guard let name = parts.last else { throw TransportError(.io, "\(displayName): an empty path names no file") }
        return (parts.dropLast().joined(separator: "/"), name)
    }

    private func vanished(_ path: String) -> TransportError {
        let (folder, name) = (try? split(path)) ?? ("", "")
        if folders[folder]?[name]?.isDirectory == true { folders[folder]?[name]?.fileSize = nil } else { folders[folder]?[name] = nil }
        return TransportError(.io, "\(displayName)/\(path): no longer there (removed since it was listed)")
    }

    private func failure(_ command: String, _ path: String, _ complaint: String) -> TransportError {
        TransportError(
            .io,
            "\(displayName)/\(path): rclone \(command) failed\(complaint.isEmpty ? "" : ": \(complaint)")\(Self.hint(for: complaint))")
    }

    /// What rclone's complaint does not say: which setting of this machine's caused a TLS
    /// failure (docs/OBJECT-STORES.md). `AWS_CA_BUNDLE`, often set for other tools, breaks a
    /// plain-http endpoint and replaces the system's certificates for an https one.
    static func hint(for complaint: String, environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        let lowered = complaint.lowercased()
        let bundle = environment["AWS_CA_BUNDLE"].flatMap { $0.isEmpty ? nil : $0 }
        if lowered.contains("ca bundle") || lowered.contains("cabundle") {
            return " (AWS_CA_BUNDLE is set to \(bundle ?? "a file"): a plain-http endpoint takes no CA bundle, so unset it or leave it empty for one; for https it must name a readable PEM file: docs/OBJECT-STORES.md)"
        }
        guard lowered.contains("x509") || lowered.contains("certificate") else { return "" }
        if let bundle {
            return " (AWS_CA_BUNDLE is set to \(bundle): rclone trusts only the certificates in that file; add the endpoint's CA to it or unset it: docs/OBJECT-STORES.md)"
        }
        return " (the endpoint's certificate is not trusted here: install its CA, or set AWS_CA_BUNDLE to a PEM file holding it: docs/OBJECT-STORES.md)"
    }
}
