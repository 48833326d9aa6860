import SQLiteDatabase

/// This replica's own changes as a file carries them, relayed back or written by a copy of
/// this database: each must be one this replica holds as it made it. A change it holds under
/// the same number with another clock, or one it never made on that row, means two databases
/// write under one knowledge ID. Nothing is merged: this replica's own changes are already here.
public final class OwnChangeCheck {
    private let replica: Replica
    private let path: String
    /// Per table of the change set: its tid here, or nil when not tracked here.
    private let tids: [Int?]
    /// An entry this replica held may have gone with a purge, so a missing one proves nothing.
    private let purgedAnything: Bool

    public init(replica: Replica, header: ChangeSetHeader, path: String) throws {
        self.replica = replica
        self.path = path
        let tracked = Dictionary(uniqueKeysWithValues: try replica.trackedTables().map { ($0.name, $0.tid) })
        tids = header.tables.map { tracked[$0.name] }
        purgedAnything = try replica.database.int64(OwnChangeSQL.purgedAnything) == 1
    }

    public func check(_ change: RowChange) throws {
        guard let stamp = change.rowStamp, let tid = tids[change.table] else { return }
        let database = replica.database
        let key = try replica.metadataKey(change.key)
        guard let entry = try database.row(MergeSQL.rowEntry, .integer(Int64(tid)), key) else {
            if !purgedAnything { throw copied(stamp.seq, "no trace of it here") }
            return
        }
        guard try entry.int("site") == replica.site else { return }
        let seq = try entry.int64("seq"), hlc = try entry.int64("hlc")
        if seq < stamp.seq || (seq == stamp.seq && hlc != stamp.hlc) {
            throw copied(stamp.seq, "this replica holds that row as its change \(seq) at clock \(hlc)")
        }
    }

    private func copied(_ seq: Int64, _ detail: String) -> ChangeLogError {
        ChangeLogError(
            .identityClash,
            "\(path): another copy of this database, knowledge ID \(replica.knowledgeID) (a file copied with cp), made its change \(seq) otherwise (\(detail)); run `sqsync reidentify` on the copy, then sync both"
        )
    }
}

enum OwnChangeSQL {
    static let purgedAnything = #"SELECT EXISTS (SELECT 1 FROM "_sqsync_sites" WHERE "forgotten_seq" > 0)"#
}
