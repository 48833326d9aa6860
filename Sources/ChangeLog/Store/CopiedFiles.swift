import FoundationEssentials
import Glibc
import SQLiteDatabase

/// A replica copied with `cp` (or restored from a backup to another place) is found the first
/// time it is opened in its new file, before it writes anything under the original's identity:
/// each replica records the file it lives in (device and inode, machine, path), and a replica
/// opened in a file with another inode, in another place or on another machine, is a copy until
/// `sqsync reidentify` gives it an identity of its own, or `sqsync init` says it was only moved.
/// A file renamed keeps its inode, and one rewritten at its own path on its own machine (a FAT
/// stick, whose inodes change at every mount) keeps its place: neither is taken for a copy.
/// Until then a copy takes bundles in and sends nothing out: two files writing under one
/// identity would each lose the other's changes (docs/KEYS.md, "Copies").
extension Replica {
    /// Where the file is: its device and inode as `stat` gives them, the machine, and its
    /// resolved path; nil when it cannot say.
    static func fileIdentity(of path: String) -> String? {
        var status = stat()
        guard stat(path, &status) == 0 else { return nil }
        let resolved = URL(fileURLWithPath: path).resolvingSymlinksInPath().standardizedFileURL.path
        return "\(status.st_dev):\(status.st_ino):\(machine):\(resolved)"
    }

    /// This machine: its machine ID where systemd made one, else its host name.
    private static let machine: String = {
        let id = (try? String(contentsOfFile: "/etc/machine-id", encoding: .utf8))?.trimmed
        let name = id.flatMap { $0.isEmpty ? nil : $0 } ?? ProcessInfo.processInfo.hostName
        return name.replacing(":", with: "_")
    }()

    /// Whether a file recorded as `recorded` and now found as `current` is another file: a
    /// new inode, in another place or on another machine.
    static func isAnotherFile(_ recorded: String, _ current: String) -> Bool {
        func parts(_ identity: String) -> [Substring]? {
            let fields = identity.split(separator: ":", maxSplits: 3, omittingEmptySubsequences: false)
            return fields.count == 4 ? fields : nil
        }
        guard let before = parts(recorded), let now = parts(current) else { return false }
        return before[0...1] != now[0...1] && before[2...3] != now[2...3]
    }

    /// Records the file this replica lives in, or, when it lives in another than the one it
    /// recorded, that it is a copy (from its own sequence number now on).
    func noteFileIdentity() throws {
        guard let current = Self.fileIdentity(of: path),
            let row = try database.row(CopiedFileSQL.recorded)
        else { return }
        let recorded = try row.optionalString("file_id")
        guard recorded != current, try row.optionalInt64("copied_at") == nil else { return }
        guard let recorded else { return try database.run(CopiedFileSQL.record, .text(current)) }
        try database.run(Self.isAnotherFile(recorded, current) ? CopiedFileSQL.markCopied : CopiedFileSQL.record, .text(current))
    }

    /// This replica's own sequence number when it was found to be a copy; nil when it is not one.
    public func copiedAt() throws -> Int64? {
        try database.row(CopiedFileSQL.recorded)?.optionalInt64("copied_at")
    }

    /// `sqsync init` on a replica found to be a copy: it was moved, not copied, and is the
    /// replica it says it is.
    public func confirmMoved() throws {
        guard let current = Self.fileIdentity(of: path) else { return }
        try database.run(CopiedFileSQL.confirm, .text(current))
    }

    /// Refuses `what` (an export, a sync) in a copy: it would write under the original's
    /// identity, and each would lose changes of the other.
    public func refuseWhileCopied(_ what: String) throws {
        guard try copiedAt() != nil else { return }
        throw ChangeLogError(
            .identityClash,
            "\(path): not sent (\(what)): this file is a copy of replica \(displayText(name.isEmpty ? knowledgeID : name)) (made with cp or restored), which would lose changes of the original; run `sqsync reidentify \(path)` to give it an identity of its own (its rows stay), or `sqsync init \(path)` if it was only moved"
        )
    }
}

enum CopiedFileSQL {
    static let recorded = #"SELECT "file_id", "copied_at" FROM "_sqsync_replica""#
    static let record = #"UPDATE "_sqsync_replica" SET "file_id" = ?"#
    /// The copy shares the original's history up to its own sequence number now.
    static let markCopied = #"UPDATE "_sqsync_replica" SET "copied_at" = "seq", "file_id" = ?"#
    static let confirm = #"UPDATE "_sqsync_replica" SET "file_id" = ?, "copied_at" = NULL"#
}
