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
    /// Per table of the change set, the cid here of each of its columns; nil for a table not
    /// tracked here or whose merges use policies (a value, not a clock, may win there).
    private let cids: [[Int?]?]

    public init(replica: Replica, header: ChangeSetHeader, path: String) throws {
        self.replica = replica
        self.path = path
        let local = Dictionary(try replica.trackedTables().map { ($0.name, $0) }) { first, _ in first }
        tids = header.tables.map { local[$0.name]?.tid }
        cids = header.tables.map { table in
            guard !table.hasPolicies, let info = local[table.name], info.columns.allSatisfy({ $0.policy == .lww }) else { return nil }
            return table.columns.map { name in info.columns.first { $0.name == name }?.cid }
        }
        purgedAnything = try replica.database.int64(OwnChangeSQL.purgedAnything) == 1
    }

    public func check(_ change: RowChange) throws {
        guard let tid = tids[change.table] else { return }
        let database = replica.database
        let key = try replica.metadataKey(change.key)
        guard let entry = try database.row(MergeSQL.rowEntry, .integer(Int64(tid)), key) else {
            if let stamp = change.rowStamp, !purgedAnything { throw copied(stamp.seq, "no trace of it here") }
            return
        }
        let seq = try entry.int64("seq"), hlc = try entry.int64("hlc"), life = try entry.int64("cl")
        let site = try entry.int("site")
        guard site == replica.site else {
            if try neverHeld(change, life: life, row: RowClock(hlc: hlc, site: site), cells: try entry.value("cells")) {
                let number = change.rowStamp?.seq ?? change.columns.map(\.stamp.seq).min() ?? 0
                throw copied(number, "this file never held it: its numbers went back (a backup restored in place?) or a copy made it")
            }
            return
        }
        // A row entry's stamp is its life's; an update's own clocks are its columns'.
        guard let stamp = change.rowStamp else { return }
        if seq < stamp.seq || (seq == stamp.seq && hlc != stamp.hlc) {
            throw copied(stamp.seq, "this replica holds that row as its change \(seq) at clock \(hlc)")
        }
    }

    /// Whether this file never held `change`, its own, on a row whose latest write here is
    /// another replica's. Within a life a row's clock and each column's only move forward, and
    /// an own write makes them its own: so a life it made that is not here, or a clock of its
    /// own later than the one here, is a change this file lost. Its numbers went back (a
    /// backup restored over it, a VM snapshot), or a copy made it.
    private func neverHeld(_ change: RowChange, life: Int64, row: RowClock, cells: SQLValue) throws -> Bool {
        if life < change.causalLength { return true }
        guard life == change.causalLength, let cids = cids[change.table] else { return false }
        if let rowStamp = change.rowStamp, row.hlc < rowStamp.hlc { return true }
        let clocks = try replica.cellClocks(cells, of: row)
        return change.columns.contains { column in
            guard column.column < cids.count, let cid = cids[column.column] else { return false }
            return (clocks.first { $0.cid == cid }?.hlc ?? row.hlc) < column.stamp.hlc
        }
    }

    private func copied(_ seq: Int64, _ detail: String) -> ChangeLogError {
        var error = ChangeLogError(
            .identityClash,
            "\(path): another copy of this database, knowledge ID \(replica.knowledgeID) (a file copied with cp, or this file before a backup was restored over it), made its change \(seq) otherwise (\(detail)); run `sqsync reidentify` on the copy (or on this file, after a restore), then sync both"
        )
        error.ownChangeClash = seq
        return error
    }
}

enum OwnChangeSQL {
    static let purgedAnything = #"SELECT EXISTS (SELECT 1 FROM "_sqsync_sites" WHERE "forgotten_seq" > 0)"#
}
