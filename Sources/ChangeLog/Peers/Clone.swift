import FoundationEssentials
import Glibc
import SQLiteDatabase

extension Replica {
    /// Copies this replica with SQLite's online backup, which is safe while apps write, and
    /// gives the copy a new knowledge ID. The copy keeps this replica's data and knowledge,
    /// and knows this replica as a peer.
    /// `knowledgeID`: the copy's ID, made by the caller from the copy's first key; a random
    /// one when nil. `emptying`: tables of other modules that hold what belongs to this file
    /// alone (bundles held beside it, its mailbox history), emptied in the copy.
    public func clone(to destination: String, name newName: String?, knowledgeID: String? = nil, emptying perFileTables: [String] = [])
        throws -> Replica
    {
        if let knowledgeID, try siteNumberIfKnown(knowledgeID) != nil {
            throw ChangeLogError(
                .identityClash, "\(destination): knowledge ID \(knowledgeID) is a replica this one knows already; give the clone its own key")
        }
        guard !FileManager.default.fileExists(atPath: destination) else {
            throw ChangeLogError(.usage, "\(destination) already exists; clone writes a new file")
        }
        try fold()
        let knowledgeAtCopy = try knowledge()
        // The copy gets its new identity under a temporary name, so a failure never leaves a
        // second file with this replica's knowledge ID.
        let temporary = destination + ".sqsync-clone-tmp"
        defer { Self.removeDatabaseFiles(temporary) }
        Self.removeDatabaseFiles(temporary)
        try database.backup(toPath: temporary) { [progress] copied, total in
            progress?(WorkProgress(step: "copying", done: copied, total: total, unit: "pages"))
        }
        let newID = knowledgeID ?? Self.newKnowledgeID()
        do {
            let (copy, _) = try Self.openDatabase(path: temporary, create: false)
            let cloneName = newName ?? URL(fileURLWithPath: destination).deletingPathExtension().lastPathComponent
            try copy.inTransaction {
                try copy.execute(CloneSQL.rememberOriginal)
                try copy.run(SitesSQL.addSite, .text(newID), .text(cloneName))
                for statement in CloneSQL.adopt { try copy.run(statement, .text(newID)) }
                for table in perFileTables
                where try copy.int64("SELECT count(*) FROM sqlite_schema WHERE name = ?", .text(table)) == 1 {
                    try copy.execute("DELETE FROM \(quoteIdentifier(table))")
                }
                // The clone's own changes are made under every admin statement copied, from its
                // first change on; the source's epochs number the source's changes. Its first
                // change, without rows, says so at its birth (``applyAdminRules()``).
                try copy.execute(#"DELETE FROM "_sqsync_admin_epochs""#)
                let ids = try adminStatements().map(\.id)
                if !ids.isEmpty {
                    try copy.run(ScopeSQL.firstEpoch, .blob(ScopeSQL.joined(ids)))
                    try copy.execute(ScopeSQL.numberStatement)
                }
            }
        }
        guard rename(temporary, destination) == 0 else {
            throw ChangeLogError(.noSuchFile, "\(destination): cannot create: \(String(cString: strerror(errno)))")
        }
        // This replica knows its clone from the start, holding what was copied: a purge here
        // then waits for it instead of leaving it behind.
        let cloneSite = try siteNumber(for: newID, name: newName)
        var acknowledged: [Int: Int64] = [:]
        for (id, seq) in knowledgeAtCopy.seqs { acknowledged[try siteNumber(for: id, name: nil)] = seq }
        try recordAcknowledgement(peer: cloneSite, acknowledged)
        let clone = try Replica(path: destination)
        // Its own grants go into its triggers, and rows outside its scope leave, before anyone
        // writes to it.
        if try clone.database.int64(ScopeSQL.anyStatement) == 1 {
            try clone.database.inTransaction { try clone.applyAdminRules() }
            try clone.removeRowsOutOfScope()
        }
        return clone
    }

    private static func removeDatabaseFiles(_ path: String) {
        for suffix in ["", "-wal", "-shm", "-journal"] { unlink(path + suffix) }
    }
}

/// What `clone` changes in the copy: a new identity that knows the original as a peer
/// holding everything copied, and takes the copied, not yet numbered changes as its own.
enum CloneSQL {
    static let rememberOriginal = """
        UPDATE "_sqsync_sites" SET "known_seq" = (SELECT "seq" FROM "_sqsync_replica")
        WHERE "site" = (SELECT "site" FROM "_sqsync_replica")
        """
    static let newSite = #"(SELECT "site" FROM "_sqsync_sites" WHERE "knowledge_id" = ?1)"#
    /// Column clocks first: they are stored relative to their row's site as it was.
    static let adopt = [
        """
        UPDATE "_sqsync_rows" SET "cells" = sqsync_cells_adopt("cells", "hlc", "site", "seq", \(newSite))
        WHERE "cells" IS NOT NULL AND "cells" != x'' AND sqsync_cells_adopt("cells", "hlc", "site", "seq", \(newSite)) IS NOT "cells"
        """,
        #"UPDATE "_sqsync_rows" SET "site" = \#(newSite) WHERE "seq" = 0"#,
        #"UPDATE "_sqsync_replica" SET "site" = \#(newSite), "seq" = 0, "applying" = 0, "checkpoint_seq" = 0, "checkpoint_records" = 0, "file_id" = NULL, "copied_at" = NULL"#,
    ]
}
