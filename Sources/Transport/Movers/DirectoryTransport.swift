import CSSH
import FoundationEssentials
import Glibc

/// A mailbox in a local folder: a shared folder or a mounted USB stick.
///
/// Files are published as the ``Transport`` contract asks: written to `.tmp-<owner>-<uuid>` in the
/// target folder, flushed with `fsync`, then given their final name with `link` + `unlink`,
/// which fails with `EEXIST` instead of replacing a file another writer published. Where the
/// file system has no hard links (FAT and exFAT sticks), it falls back to checking that the
/// name is free and `rename`: that leaves a tiny window in which two writers of the *same*
/// name could race, which the contract rules out by giving every published file a unique
/// name. Finally the folder itself is flushed, so the new name survives a power cut.
///
/// Whoever can write to the folder may plant symbolic links: none is listed, and a path
/// with a symbolic link anywhere below the root is refused, never followed, so no read,
/// write or removal reaches outside the mailbox. (The root itself may be a link.)
public final class DirectoryTransport: StampedFolders {
    /// The folder everything is relative to.
    public let root: String
    public var uploadOwner = ""

    public var displayName: String { root }

    /// Does not touch the disk: a missing root just lists as empty until ``makeDirectories(_:)``.
    public init(root: String) {
        self.root = root
    }

    public func list(_ directory: String) throws -> FolderListing {
        var listing = FolderListing()
        for entry in try entries(in: directory) {
            if entry.isFile { listing.addFile(entry.name) } else if entry.isDirectory { listing.folders.append(entry.name) }
        }
        return listing
    }

    public func readFile(_ path: String, to localPath: String, maxBytes: Int) throws {
        let input = try LocalFile(path: try resolved(path), flags: O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        let size = try input.size()
        guard size <= maxBytes else { throw tooLarge(path, bytes: size, maxBytes: maxBytes) }
        try LocalFile.replace(localPath) { output in try input.copy(to: output) }
    }

    public func writeFile(from localPath: String, to path: String) throws {
        let final = try resolved(path)
        let folder = RelativePath.parent(of: final)
        guard try !exists(final) else { throw alreadyExists(final) }
        let input = try LocalFile(path: localPath, flags: O_RDONLY | O_CLOEXEC)
        let temporary = temporaryName(in: folder)
        let output = try LocalFile(path: temporary, flags: O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC)
        do {
            try input.copy(to: output)
            try output.sync()
            try output.close()
            try publish(temporary, as: final)
            try LocalFile.syncDirectory(folder)
        } catch {
            _ = unlink(temporary)
            throw error
        }
    }

    public func removeFile(_ path: String) throws {
        let target = try resolved(path)
        try POSIX.run("unlink", target, allowing: [ENOENT], { unlink(target) }, failed: { $0 != 0 })
    }

    public func makeDirectories(_ path: String) throws {
        let full = try resolved(path)
        var current = ""
        for (index, part) in full.split(separator: "/").enumerated() {
            current = index == 0 && !full.hasPrefix("/") ? String(part) : "\(current)/\(part)"
            if try isDirectory(current) { continue }
            let created = try POSIX.run(
                "mkdir", current, allowing: [EEXIST], { mkdir(current, 0o755) }, failed: { $0 != 0 })
            if created.errno == EEXIST {
                guard try isDirectory(current) else {
                    throw TransportError(.io, "\(current): exists and is not a folder")
                }
            } else {
                try LocalFile.syncDirectory(RelativePath.parent(of: current))
            }
        }
    }

    /// Stamps are the folder's device, inode, modification and change times. Their clock is
    /// this machine's only on local file systems (`localFileSystems`); a network file
    /// system's server stamps with its own. A folder changed within `settleMargin` of now has
    /// no stamp yet: a change made now could get the same times, as the kernel's file times
    /// run up to a tick behind its clock, and whole-second times (FAT keeps 2 s) further.
    public func settledFolderStamps(in directory: String) throws -> [String: String]? {
        let folder = try resolved(directory)
        let opened = try POSIX.run(
            "opendir", folder, allowing: [ENOENT, ENOTDIR], { opendir(folder) }, failed: { $0 == nil })
        guard let stream = opened.value else { return nil }
        defer { closedir(stream) }
        guard Self.localFileSystems.contains(Int64(sqsync_file_system_type(dirfd(stream)))) else { return nil }
        let now = Self.nowNanoseconds()
        var stamps: [String: String] = [:]
        var settled = true
        try Self.forEachEntry(of: stream, in: folder) { name, kind in
            guard settled, kind == UInt8(DT_DIR) || kind == UInt8(DT_UNKNOWN) else { return }
            var info = stat()
            guard fstatat(dirfd(stream), name, &info, AT_SYMLINK_NOFOLLOW) == 0 else { return settled = false }
            guard info.st_mode & S_IFMT == S_IFDIR else { return }
            guard let stamp = Self.settledStamp(info, now: now) else { return settled = false }
            stamps[name] = stamp
        }
        return settled ? stamps : nil
    }

    public func settledStamp(of directory: String) throws -> String? {
        let folder = try resolved(directory)
        let descriptor = open(folder, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard descriptor >= 0 else { return errno == ENOENT ? "none" : nil }
        defer { close(descriptor) }
        var info = stat()
        guard Self.localFileSystems.contains(Int64(sqsync_file_system_type(descriptor))), fstat(descriptor, &info) == 0 else { return nil }
        return Self.settledStamp(info, now: Self.nowNanoseconds())
    }

    /// Creates and removes a file in `directory`, which gives the folder new times.
    public func markChanged(_ directory: String) throws {
        let marker = temporaryName(in: try resolved(directory))
        let output = try LocalFile(path: marker, flags: O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC)
        try output.close()
        try POSIX.run("unlink", marker, allowing: [ENOENT], { unlink(marker) }, failed: { $0 != 0 })
    }

    private static func nowNanoseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }

    /// A folder's stamp, nil while it changed too recently for a change made now to show.
    private static func settledStamp(_ info: stat, now nowNanoseconds: Int64) -> String? {
        for time in [info.st_mtim, info.st_ctim] {
            let margin: Int64 = time.tv_nsec == 0 ? Self.settleMargin.wholeSeconds : Self.settleMargin.fine
            // Whoever can write to the mailbox can date a folder past 2262: unsettled, not a trap.
            let (seconds, overflow) = Int64(time.tv_sec).multipliedReportingOverflow(by: 1_000_000_000)
            if overflow || seconds + Int64(time.tv_nsec) > nowNanoseconds - margin { return nil }
        }
        return "\(info.st_dev):\(info.st_ino):\(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec):\(info.st_ctim.tv_sec).\(info.st_ctim.tv_nsec)"
    }

    /// How long ago a folder's times must be, in nanoseconds, for a change made now to get
    /// other times: file times with a fraction lag the clock by a kernel tick (10 ms at
    /// most); times on whole seconds may be rounded down by up to 2 s (FAT).
    static let settleMargin = (fine: Int64(100_000_000), wholeSeconds: Int64(3_000_000_000))

    /// `statfs` types of disk and memory file systems, whose times come from this machine's
    /// clock: ext2/3/4, XFS, Btrfs, tmpfs, ramfs, F2FS, overlayfs, ZFS, bcachefs, JFS,
    /// ReiserFS, NILFS, UDF, FAT (vfat, msdos), exFAT, NTFS (ntfs3) and HFS+.
    static let localFileSystems: Set<Int64> = [
        0xEF53, 0x5846_5342, 0x9123_683E, 0x0102_1994, 0x8584_58F6, 0xF2F5_2010, 0x794C_7630, 0x2FC1_2FC1,
        0xCA45_1A4E, 0x3153_464A, 0x5265_4973, 0x3434, 0x1501_3346, 0x4D44, 0x2011_BAB0, 0x7366_746E, 0x482B,
    ]

    /// The full path of a transport path, refused when a component below the root is a
    /// symbolic link (planted by whoever can write to the folder), so it is never followed.
    private func resolved(_ path: String) throws -> String {
        var current = try RelativePath.join(root, "")
        for part in try RelativePath.components(path) {
            current = try RelativePath.join(current, part)
            var info = stat()
            let status = try POSIX.run(
                "lstat", current, allowing: [ENOENT, ENOTDIR], { lstat(current, &info) }, failed: { $0 != 0 })
            if status.errno != nil { break }
            if info.st_mode & S_IFMT == S_IFLNK {
                throw TransportError(.io, "\(current): is a symbolic link; refusing to follow it out of the mailbox")
            }
        }
        return try RelativePath.join(root, path)
    }

    /// Gives `temporary` the name `final` unless `final` already exists (see the type's comment).
    private func publish(_ temporary: String, as final: String) throws {
        let linked = try POSIX.run(
            "link", final, allowing: Set([EEXIST, EPERM, ENOTSUP, EOPNOTSUPP, ENOSYS, EMLINK]),
            { link(temporary, final) }, failed: { $0 != 0 })
        switch linked.errno {
        case nil:
            try POSIX.run("unlink", temporary, allowing: [ENOENT], { unlink(temporary) }, failed: { $0 != 0 })
        case EEXIST:
            throw alreadyExists(final)
        default:
            guard try !exists(final) else { throw alreadyExists(final) }
            try POSIX.run("rename", final, { rename(temporary, final) }, failed: { $0 != 0 })
        }
    }

    private struct Entry {
        var name: String
        var isFile: Bool
        var isDirectory: Bool
    }

    /// The entries of a folder, typed by `d_type`, or by `fstatat` where the file system leaves
    /// that unknown (some network file systems do), sorted by name. A missing folder, or a file where a folder
    /// was expected, has none (as over SFTP, where OpenSSH reports both as "no such file").
    private func entries(in directory: String) throws -> [Entry] {
        let folder = try resolved(directory)
        let opened = try POSIX.run(
            "opendir", folder, allowing: [ENOENT, ENOTDIR], { opendir(folder) }, failed: { $0 == nil })
        guard let stream = opened.value else { return [] }
        defer { closedir(stream) }
        var result: [Entry] = []
        try Self.forEachEntry(of: stream, in: folder) { name, kind in
            // The entry's type comes with it on most file systems; others need a stat.
            if kind != UInt8(DT_UNKNOWN) {
                return result.append(Entry(name: name, isFile: kind == UInt8(DT_REG), isDirectory: kind == UInt8(DT_DIR)))
            }
            var info = stat()
            let status = try POSIX.run(
                "fstatat", "\(folder)/\(name)", allowing: [ENOENT],
                { fstatat(dirfd(stream), name, &info, AT_SYMLINK_NOFOLLOW) }, failed: { $0 != 0 })
            if status.errno != nil { return }
            let type = info.st_mode & S_IFMT
            result.append(Entry(name: name, isFile: type == S_IFREG, isDirectory: type == S_IFDIR))
        }
        return result.sorted { $0.name < $1.name }
    }

    /// Calls `body` with the name and `d_type` of every entry of an open folder but `.` and `..`.
    private static func forEachEntry(
        of stream: OpaquePointer, in folder: String, _ body: (String, UInt8) throws -> Void
    ) throws {
        while true {
            errno = 0
            guard let entry = readdir(stream) else {
                if errno != 0 { throw POSIX.error("readdir", folder, errno) }
                return
            }
            let name = withUnsafePointer(to: &entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: Int(NAME_MAX) + 1) { String(cString: $0) }
            }
            if name != "." && name != ".." { try body(name, entry.pointee.d_type) }
        }
    }

    public func fileSize(_ path: String) throws -> Int? {
        let full = try resolved(path)
        var info = stat()
        let status = try POSIX.run("lstat", full, allowing: [ENOENT, ENOTDIR], { lstat(full, &info) }, failed: { $0 != 0 })
        return status.errno == nil ? Int(info.st_size) : nil
    }

    private func exists(_ path: String) throws -> Bool {
        var info = stat()
        return try POSIX.run("lstat", path, allowing: [ENOENT], { lstat(path, &info) }, failed: { $0 != 0 }).errno
            == nil
    }

    private func isDirectory(_ path: String) throws -> Bool {
        var info = stat()
        let status = try POSIX.run(
            "stat", path, allowing: [ENOENT, ENOTDIR], { stat(path, &info) }, failed: { $0 != 0 })
        return status.errno == nil && info.st_mode & S_IFMT == S_IFDIR
    }

    private func alreadyExists(_ path: String) -> TransportError {
        TransportError(.io, "\(path): already exists; refusing to replace it (every published file needs a new name)")
    }
}

/// Names beginning with this are unfinished uploads; they are never listed as files, so a
/// writer killed half-way leaves nothing a reader would pick up.
let temporaryPrefix = ".tmp-"

/// Turns transport-relative paths (`/`-separated, below the root) into full ones.
enum RelativePath {
    /// The non-empty components of `path`; `..` and absolute paths are refused so no path
    /// leaves the root.
    static func components(_ path: String) throws -> [String] {
        let parts = path.split(separator: "/").filter { $0 != "." }.map(String.init)
        guard !parts.contains("..") else {
            throw TransportError(.io, "\(path): a transport path may not contain '..'")
        }
        guard !path.hasPrefix("/") else {
            throw TransportError(.io, "\(path): a transport path is relative to the mailbox, not absolute")
        }
        return parts
    }

    static func join(_ root: String, _ path: String) throws -> String {
        let parts = try components(path)
        guard !parts.isEmpty else { return root }
        let base = root.count > 1 && root.hasSuffix("/") ? String(root.dropLast()) : root
        if base == "." || base.isEmpty { return parts.joined(separator: "/") }
        return (base == "/" ? "" : base) + "/" + parts.joined(separator: "/")
    }

    static func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }
}

/// The one POSIX checking helper.
enum POSIX {
    /// Runs `call`, retrying while it fails with `EINTR`. A failure whose errno is in `allowed`
    /// is returned with that errno; any other throws a ``TransportError`` naming the call, the
    /// path and `strerror`.
    @discardableResult
    static func run<T>(
        _ name: String, _ path: String, allowing allowed: Set<Int32> = [], _ call: () -> T, failed: (T) -> Bool
    ) throws -> (value: T, errno: Int32?) {
        while true {
            let value = call()
            guard failed(value) else { return (value, nil) }
            let code = errno
            if code == EINTR { continue }
            if allowed.contains(code) { return (value, code) }
            throw error(name, path, code)
        }
    }

    static func error(_ name: String, _ path: String, _ code: Int32) -> TransportError {
        TransportError(.io, "\(path): \(name) failed: \(String(cString: strerror(code))) (errno \(code))")
    }
}

/// Owns one POSIX file descriptor and closes it in `deinit` if ``close()`` was not called.
///
/// Not Sendable on purpose: a descriptor with a file position belongs to one user at a time.
final class LocalFile {
    let path: String
    private let descriptor: Int32
    private var isOpen = true

    /// Size of each read and write: large enough for throughput, small enough to stream.
    static let chunkSize = 64 * 1024

    init(path: String, flags: Int32, mode: mode_t = 0o644) throws {
        self.path = path
        descriptor = try POSIX.run("open", path, { open(path, flags, mode) }, failed: { $0 < 0 }).value
    }

    deinit {
        if isOpen { _ = systemClose(descriptor) }
    }

    /// Reads up to `buffer.count` bytes; 0 means end of file.
    func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        try POSIX.run("read", path, { systemRead(descriptor, buffer.baseAddress, buffer.count) }, failed: { $0 < 0 })
            .value
    }

    /// Writes all of `bytes`, continuing after short writes.
    func write(_ bytes: UnsafeRawBufferPointer) throws {
        var offset = 0
        while offset < bytes.count {
            let rest = UnsafeRawBufferPointer(rebasing: bytes[offset...])
            offset += try POSIX.run(
                "write", path, { systemWrite(descriptor, rest.baseAddress, rest.count) }, failed: { $0 < 0 }
            ).value
        }
    }

    func sync() throws {
        try POSIX.run("fsync", path, { fsync(descriptor) }, failed: { $0 != 0 })
    }

    /// The file's size, as the file system records it.
    func size() throws -> Int {
        var status = stat()
        try POSIX.run("fstat", path, { fstat(descriptor, &status) }, failed: { $0 != 0 })
        return Int(status.st_size)
    }

    /// Closes once; `close` is not retried on `EINTR`, because Linux has already released the
    /// descriptor by then and a retry could close someone else's.
    func close() throws {
        guard isOpen else { return }
        isOpen = false
        if systemClose(descriptor) != 0, errno != EINTR { throw POSIX.error("close", path, errno) }
    }

    /// Streams this file to `output` in ``chunkSize`` pieces.
    func copy(to output: LocalFile) throws {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.chunkSize, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let count = try read(into: buffer)
            if count == 0 { return }
            try output.write(UnsafeRawBufferPointer(rebasing: buffer[..<count]))
        }
    }

    /// Writes `localPath` through `body` into a temporary file next to it, renamed over
    /// `localPath` only when complete, so a failed download leaves any old file untouched.
    static func replace(_ localPath: String, _ body: (LocalFile) throws -> Void) throws {
        let temporary = "\(RelativePath.parent(of: localPath))/\(temporaryPrefix)\(UUID().uuidString.lowercased())"
        let output = try LocalFile(path: temporary, flags: O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC)
        do {
            try body(output)
            try output.close()
            try POSIX.run("rename", localPath, { rename(temporary, localPath) }, failed: { $0 != 0 })
        } catch {
            _ = unlink(temporary)
            throw error
        }
    }

    /// Flushes a folder's entries (new or renamed names) to disk. File systems that cannot
    /// sync a folder (`EINVAL`) are accepted: they give no stronger guarantee to ask for.
    static func syncDirectory(_ path: String) throws {
        let folder = try LocalFile(path: path, flags: O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        try POSIX.run(
            "fsync", path, allowing: Set([EINVAL, ENOTSUP, EOPNOTSUPP]), { fsync(folder.descriptor) },
            failed: { $0 != 0 })
        try folder.close()
    }
}

// File-scope names for the C calls whose names `LocalFile`'s methods shadow.
private func systemRead(_ fd: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int {
    read(fd, buffer, count)
}
private func systemWrite(_ fd: Int32, _ buffer: UnsafeRawPointer?, _ count: Int) -> Int { write(fd, buffer, count) }
private func systemClose(_ fd: Int32) -> Int32 { close(fd) }
