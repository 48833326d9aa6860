import FoundationEssentials
import Glibc
import SQLiteDatabase

/// What `reidentify` did.
public struct ReidentifyResult: Sendable {
    public var previousKnowledgeID: String
    public var knowledgeID: String
    /// The last of the previous identity's changes this file shares with it; later ones it
    /// made are now its own.
    public var sharedThrough: Int64
    /// Writes made again under the new identity.
    public var changesTaken: Int
}

extension Replica {
    /// Gives a file copied with `cp` (or restored from a backup) an identity of its own,
    /// `knowledgeID`, keeping its rows (docs/KEYS.md, "Copies"). What it wrote under the
    /// identity it shared becomes the new identity's changes, stamped anew: everything after
    /// the point where the two files parted (its own sequence number when it was found to be
    /// a copy), or, for a file not found to be one, everything no peer acknowledged. The rest
    /// stays the previous identity's, which becomes a peer holding those changes, as the
    /// original does. The caller records the new identity's key (Bundle's `KeyBinding`).
    ///
    /// `newName` names the new identity; without it, the file's name, or the old name with the
    /// new ID's first characters when the file's name is the old one (a restore in place): two
    /// peers of one name would make every `peers retire NAME` ask for a knowledge ID.
    public func reidentify(as knowledgeID: String, name newName: String? = nil) throws -> ReidentifyResult {
        guard knowledgeID != self.knowledgeID else {
            throw ChangeLogError(.identityClash, "\(path): \(knowledgeID) is this replica's knowledge ID already")
        }
        if try siteNumberIfKnown(knowledgeID) != nil {
            throw ChangeLogError(.identityClash, "\(path): knowledge ID \(knowledgeID) is a replica this one knows already")
        }
        try fold()
        return try database.inTransaction(immediate: true) {
            let previous = self.knowledgeID, oldSite = site
            let own = try knowledge()[previous]
            var shared = try copiedAt() ?? min(own, try database.int64(ReidentifySQL.mostAcknowledged, .integer(Int64(oldSite))))
            // Peers may acknowledge numbers this file reused after they went back (a backup
            // restored in place): its own changes from the first one a file showed made
            // otherwise are the new identity's.
            if let clash = try firstOwnChangeClash() { shared = min(shared, max(0, clash - 1)) }
            let fileName = URL(fileURLWithPath: path).deletingPathExtension().lastPathComponent
            let chosenName = newName ?? (fileName == name || fileName.isEmpty ? "\(name)-\(knowledgeID.prefix(6))" : fileName)
            let newSite = try siteNumber(for: knowledgeID, name: chosenName)
            var taken = 0
            for table in try trackedTables(skippingMissing: true) {
                taken += try logWritesAgain(of: table, by: oldSite, after: shared)
            }
            try database.run(ReidentifySQL.forgetOwnNotes, .integer(Int64(oldSite)), .integer(shared))
            try database.run(ReidentifySQL.previousHolds, .integer(shared), .integer(Int64(oldSite)))
            try database.run(ReidentifySQL.becomeNew, .integer(Int64(newSite)), .text(Self.fileIdentity(of: path) ?? ""))
            try database.execute(#"DELETE FROM "_sqsync_admin_epochs""#)
            let ids = try adminStatements().map(\.id)
            if !ids.isEmpty {
                try database.run(ScopeSQL.firstEpoch, .blob(ScopeSQL.joined(ids)))
                try database.execute(ScopeSQL.numberStatement)
            }
            site = newSite
            name = chosenName
            self.knowledgeID = knowledgeID
            try fold()
            return ReidentifyResult(previousKnowledgeID: previous, knowledgeID: knowledgeID, sharedThrough: shared, changesTaken: taken)
        }
    }

    /// Logs, as the triggers would, every write of `site` after `seq` (through `last`) to
    /// `table`'s rows: inserts of the lives it began, deletions it made, updates of the
    /// columns it wrote. (Also how a replica announces again what an origin wrote under
    /// numbers it used twice: ``Replica/announceWritesAgain(of:from:)``.)
    func logWritesAgain(of table: TableInfo, by site: Int, after seq: Int64, through last: Int64 = .max) throws -> Int {
        var logged = 0
        for row in try database.rows(ReidentifySQL.entries, .integer(Int64(table.tid))) {
            let key = try row.value("pk")
            guard let stored = MetadataKey.stored(key) else { continue }
            let cl = try row.int64("cl"), rowSite = try row.int("site"), rowSeq = try row.int64("seq")
            if rowSite == site && rowSeq > seq && rowSeq <= last {
                let operation = cl % 2 == 1 ? TriggerSQL.Operation.insert : TriggerSQL.Operation.delete
                try database.run(ReidentifySQL.log, .integer(Int64(table.tid)), .integer(Int64(operation)), stored, .integer(0))
                logged += 1
                continue
            }
            guard cl % 2 == 1, try row.value("cells") != .null else { continue }
            let clock = RowClock(hlc: try row.int64("hlc"), site: rowSite)
            let written = try cellClocks(try row.value("cells"), of: clock).filter { $0.site == site && $0.seq > seq && $0.seq <= last }
            for (word, clocks) in Dictionary(grouping: written, by: { TriggerSQL.Operation.word(of: $0.cid) }) {
                let mask = clocks.reduce(Int64(0)) { $0 | (1 << Int64(TriggerSQL.Operation.bit(of: $1.cid))) }
                try database.run(
                    ReidentifySQL.log, .integer(Int64(table.tid)), .integer(Int64(TriggerSQL.Operation.updateBase + word)), stored,
                    .integer(mask))
                logged += 1
            }
        }
        return logged
    }
}

/// The SQL of `reidentify`, in one place.
enum ReidentifySQL {
    /// The most of this replica's changes (site ?1) any peer acknowledged.
    static let mostAcknowledged = #"SELECT coalesce(max("seq"), 0) FROM "_sqsync_acks" WHERE "site" = ?1"#
    static let entries = #"SELECT "pk", "cl", "hlc", "site", "seq", "cells" FROM "_sqsync_rows" WHERE "tid" = ?"#
    static let log = """
        INSERT INTO "_sqsync_log" ("tid", "op", "pk", "mask", "stamp") VALUES (?1, ?2, ?3, ?4, \(MetadataSQL.logStamp))
        """
    /// Notes of the previous identity's changes after ?2: they are the new identity's now.
    static let forgetOwnNotes = #"DELETE FROM "_sqsync_changes" WHERE "site" = ?1 AND "seq" > ?2"#
    /// The previous identity, now a peer, is held through ?1.
    static let previousHolds = #"UPDATE "_sqsync_sites" SET "known_seq" = ?1 WHERE "site" = ?2"#
    static let becomeNew = """
        UPDATE "_sqsync_replica" SET "site" = ?1, "seq" = 0, "checkpoint_seq" = 0, "checkpoint_records" = 0,
            "file_id" = ?2, "copied_at" = NULL
        """
}
