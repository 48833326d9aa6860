import CSSH
import FoundationEssentials
import Glibc

/// A mailbox in a folder on an SSH server, reached over SFTP, so the server needs nothing but
/// OpenSSH (no sqsync).
///
/// Uploads go to `.tmp-<owner>-<uuid>` in the target folder, are flushed with `fsync@openssh.com`
/// when the server offers it, and are then renamed. libssh 0.10 only has the plain SFTPv3
/// rename, which refuses to replace an existing name; the ``Transport`` contract (unique
/// names) makes that the right behaviour anyway. A writer killed half-way leaves a `.tmp-`
/// file, which is never listed.
///
/// Symbolic links planted in the mailbox are not followed: listings keep only regular files
/// and folders (the server reports a link's own type), and ``makeDirectories(_:)`` checks
/// every component with `lstat`, so a link where a folder should be is refused.
///
/// Every wait for the server is bounded by ``SSHOptions/timeoutSeconds``: a transfer that keeps
/// moving may take longer in total, one that stalls fails with `.timeout`.
///
/// Not Sendable on purpose: a libssh session must be used by one thread at a time.
public final class SFTPTransport: Transport {
    public let target: SSHTarget
    public let displayName: String
    private let sftp: SFTPSession
    /// The target's folder as SFTP sees it (relative paths start in the login folder).
    private let root: String
    private let canFsync: Bool
    public var uploadOwner = ""

    /// Connects, checks the host key, logs in and opens SFTP; fails with a ``TransportError``
    /// whose kind tells the caller what to tell the user (unknown or changed host key,
    /// authentication, timeout, connection).
    public init(target: SSHTarget, options: SSHOptions) throws {
        self.target = target
        displayName = target.displayName
        root = target.sftpRoot
        sftp = try SFTPSession(SSHSession(target: target, options: options))
        canFsync = sftp_extension_supported(sftp.handle, "fsync@openssh.com", "1") != 0
    }

    public func list(_ directory: String) throws -> FolderListing {
        var listing = FolderListing()
        for entry in try entries(in: directory) {
            if entry.type == SSH_FILEXFER_TYPE_REGULAR {
                listing.addFile(entry.name)
            } else if entry.type == SSH_FILEXFER_TYPE_DIRECTORY {
                listing.folders.append(entry.name)
            }
        }
        return listing
    }

    public func readFile(_ path: String, to localPath: String, maxBytes: Int) throws {
        let source = try remote(path)
        let file = try SFTPFile(sftp, path: source, flags: O_RDONLY)
        let size = try file.size()
        guard size <= maxBytes else { throw tooLarge(path, bytes: size, maxBytes: maxBytes) }
        var copied = 0
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: LocalFile.chunkSize, alignment: 16)
        defer { buffer.deallocate() }
        try LocalFile.replace(localPath) { output in
            while true {
                let count = try sftp.run(
                    "sftp_read", path: source, { sftp_read(file.handle, buffer.baseAddress, buffer.count) },
                    failed: { $0 < 0 }
                ).value
                if count == 0 { break }
                copied += count
                // A file that grew past the cap since its size was read is refused all the same.
                guard copied <= maxBytes else { throw tooLarge(path, bytes: copied, maxBytes: maxBytes) }
                try output.write(UnsafeRawBufferPointer(rebasing: buffer[..<count]))
            }
        }
        try file.close()
    }

    public func writeFile(from localPath: String, to path: String) throws {
        let final = try remote(path)
        guard try attributes(final) == nil else { throw alreadyExists(final) }
        let input = try LocalFile(path: localPath, flags: O_RDONLY | O_CLOEXEC)
        let temporary = temporaryName(in: RelativePath.parent(of: final))
        let file = try SFTPFile(sftp, path: temporary, flags: O_WRONLY | O_CREAT | O_EXCL)
        do {
            try upload(input, to: file)
            if canFsync {
                try sftp.check("sftp_fsync", path: temporary) { sftp_fsync(file.handle) }
            }
            try file.close()
            let renamed = try sftp.run(
                "sftp_rename", path: final, allowing: [SSH_FX_FAILURE, SSH_FX_FILE_ALREADY_EXISTS],
                { sftp_rename(sftp.handle, temporary, final) }, failed: { $0 < 0 })
            if renamed.allowedStatus != nil {
                guard try attributes(final) == nil else { throw alreadyExists(final) }
                try sftp.check("sftp_rename", path: final) { sftp_rename(sftp.handle, temporary, final) }
            }
        } catch {
            _ = sftp.ssh.bounded { sftp_unlink(sftp.handle, temporary) }
            throw error
        }
    }

    public func removeFile(_ path: String) throws {
        let target = try remote(path)
        try sftp.run(
            "sftp_unlink", path: target, allowing: [SSH_FX_NO_SUCH_FILE, SSH_FX_NO_SUCH_PATH],
            { sftp_unlink(sftp.handle, target) }, failed: { $0 < 0 })
    }

    public func makeDirectories(_ path: String) throws {
        let full = try remote(path)
        var current = ""
        for (index, part) in full.split(separator: "/").enumerated() {
            current = index == 0 && !full.hasPrefix("/") ? String(part) : "\(current)/\(part)"
            if let existing = try attributes(current) {
                guard existing.type == SSH_FILEXFER_TYPE_DIRECTORY else { throw notAFolder(current) }
                continue
            }
            // SFTPv3 servers report an existing name as a generic failure: look again before giving up.
            let made = try sftp.run(
                "sftp_mkdir", path: current, allowing: [SSH_FX_FAILURE, SSH_FX_FILE_ALREADY_EXISTS],
                { sftp_mkdir(sftp.handle, current, 0o755) }, failed: { $0 < 0 })
            if made.allowedStatus != nil {
                guard let existing = try attributes(current) else {
                    try sftp.check("sftp_mkdir", path: current) { sftp_mkdir(sftp.handle, current, 0o755) }
                    continue
                }
                guard existing.type == SSH_FILEXFER_TYPE_DIRECTORY else { throw notAFolder(current) }
            }
        }
    }

    // MARK: Helpers

    private struct Entry {
        var name: String
        var type: Int32
    }

    /// The entries of a remote folder, sorted by name; a missing folder has none.
    private func entries(in directory: String) throws -> [Entry] {
        let folder = try remote(directory)
        let opened = try sftp.run(
            "sftp_opendir", path: folder, allowing: [SSH_FX_NO_SUCH_FILE, SSH_FX_NO_SUCH_PATH],
            { sftp_opendir(sftp.handle, folder) }, failed: { $0 == nil })
        guard let handle = opened.value else { return [] }
        let listing = SFTPDirectory(sftp, handle: handle)
        var result: [Entry] = []
        while true {
            let next = try sftp.run(
                "sftp_readdir", path: folder, { sftp_readdir(sftp.handle, listing.handle) },
                failed: { $0 == nil && sftp_dir_eof(listing.handle) == 0 }
            ).value
            guard let attributes = next else { break }
            defer { sftp_attributes_free(attributes) }
            let name = String(cString: attributes.pointee.name)
            if name == "." || name == ".." { continue }
            result.append(Entry(name: name, type: Int32(attributes.pointee.type)))
        }
        return result.sorted { $0.name < $1.name }
    }

    public func fileSize(_ path: String) throws -> Int? {
        let full = try remote(path)
        let found = try sftp.run(
            "sftp_lstat", path: full, allowing: [SSH_FX_NO_SUCH_FILE, SSH_FX_NO_SUCH_PATH],
            { sftp_lstat(sftp.handle, full) }, failed: { $0 == nil })
        guard let attributes = found.value else { return nil }
        defer { sftp_attributes_free(attributes) }
        return Int(attributes.pointee.size)
    }

    /// `lstat` of a remote path: its type, or `nil` if nothing has that name.
    /// Whether the target's folder is there (following a link, as `cd` would): a mistyped
    /// path is refused, as a local folder's is, instead of being made by the first upload.
    public func rootIsFolder() throws -> Bool {
        let found = try sftp.run(
            "sftp_stat", path: root, allowing: [SSH_FX_NO_SUCH_FILE, SSH_FX_NO_SUCH_PATH],
            { sftp_stat(sftp.handle, root) }, failed: { $0 == nil })
        guard let attributes = found.value else { return false }
        defer { sftp_attributes_free(attributes) }
        return Int32(attributes.pointee.type) == SSH_FILEXFER_TYPE_DIRECTORY
    }

    private func attributes(_ path: String) throws -> Entry? {
        let found = try sftp.run(
            "sftp_lstat", path: path, allowing: [SSH_FX_NO_SUCH_FILE, SSH_FX_NO_SUCH_PATH],
            { sftp_lstat(sftp.handle, path) }, failed: { $0 == nil })
        guard let attributes = found.value else { return nil }
        defer { sftp_attributes_free(attributes) }
        return Entry(name: path, type: Int32(attributes.pointee.type))
    }

    /// Streams the local file to the open remote one in ``LocalFile/chunkSize`` pieces.
    private func upload(_ input: LocalFile, to file: SFTPFile) throws {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: LocalFile.chunkSize, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let count = try input.read(into: buffer)
            if count == 0 { return }
            var offset = 0
            while offset < count {
                offset += try sftp.run(
                    "sftp_write", path: file.path,
                    { sftp_write(file.handle, buffer.baseAddress! + offset, count - offset) }, failed: { $0 < 0 }
                ).value
            }
        }
    }

    private func remote(_ path: String) throws -> String {
        try RelativePath.join(root, path)
    }

    private func alreadyExists(_ path: String) -> TransportError {
        TransportError(
            .io,
            "\(displayName): \(path) already exists; refusing to replace it (every published file needs a new name)")
    }

    private func notAFolder(_ path: String) -> TransportError {
        TransportError(.io, "\(displayName): \(path) exists and is not a folder")
    }
}

/// Owns an open remote file and closes it in `deinit` if ``close()`` was not called.
///
/// Not Sendable on purpose, like ``SSHSession``; it keeps its ``SFTPSession`` alive.
final class SFTPFile {
    let session: SFTPSession
    let handle: sftp_file
    let path: String
    private var isOpen = true

    init(_ session: SFTPSession, path: String, flags: Int32, mode: mode_t = 0o644) throws {
        self.session = session
        self.path = path
        handle = try session.check("sftp_open", path: path) { sftp_open(session.handle, path, flags, mode) }
    }

    deinit {
        if isOpen { _ = session.ssh.bounded { sftp_close(handle) } }
    }

    /// The remote file's size, as the server reports it (0 when it does not say).
    func size() throws -> Int {
        let attributes = try session.check("sftp_fstat", path: path) { sftp_fstat(handle) }
        defer { sftp_attributes_free(attributes) }
        return Int(clamping: attributes.pointee.size)
    }

    /// Closes once, reporting the server's answer: for an upload, the last chance to hear of
    /// a failed write.
    func close() throws {
        guard isOpen else { return }
        isOpen = false
        try session.check("sftp_close", path: path) { sftp_close(handle) }
    }
}

/// Owns an open remote folder listing and closes it in `deinit`.
///
/// Not Sendable on purpose, like ``SSHSession``; it keeps its ``SFTPSession`` alive.
final class SFTPDirectory {
    let session: SFTPSession
    let handle: sftp_dir

    init(_ session: SFTPSession, handle: sftp_dir) {
        self.session = session
        self.handle = handle
    }

    deinit {
        _ = session.ssh.bounded { sftp_closedir(handle) }
    }
}

/// The SFTPv3 status codes by name, for messages.
func sftpStatusName(_ status: Int32) -> String {
    switch status {
    case SSH_FX_EOF: return "end of file"
    case SSH_FX_NO_SUCH_FILE: return "no such file"
    case SSH_FX_PERMISSION_DENIED: return "permission denied"
    case SSH_FX_FAILURE: return "failure"
    case SSH_FX_BAD_MESSAGE: return "bad message"
    case SSH_FX_NO_CONNECTION: return "no connection"
    case SSH_FX_CONNECTION_LOST: return "connection lost"
    case SSH_FX_OP_UNSUPPORTED: return "operation unsupported"
    case SSH_FX_INVALID_HANDLE: return "invalid handle"
    case SSH_FX_NO_SUCH_PATH: return "no such path"
    case SSH_FX_FILE_ALREADY_EXISTS: return "file already exists"
    case SSH_FX_WRITE_PROTECT: return "write protected"
    case SSH_FX_NO_MEDIA: return "no media"
    default: return "unknown"
    }
}
