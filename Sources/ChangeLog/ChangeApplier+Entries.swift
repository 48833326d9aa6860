/// The applier's own bookkeeping: row entries with their column clocks, and change notes,
/// written next to each row it applies.
extension ChangeApplier {
    /// A row's entry: its causal length, the stamp of its life, and its column clocks as
    /// stored (``CellClocks``, decoded only where needed).
    func rowEntry(tid: Int, key: SQLValue) throws -> (cl: Int64, stamp: LocalStamp, cells: SQLValue)? {
        let statement = statements.rowEntry
        try statement.bind([.integer(Int64(tid)), key])
        defer { statement.reset() }
        guard try statement.step() else { return nil }
        return (
            statement.int64(at: 0),
            LocalStamp(hlc: statement.int64(at: 1), site: Int(statement.int64(at: 2)), seq: statement.int64(at: 3)),
            statement.value(at: 4)
        )
    }

    /// The key under which sqsync's metadata holds the row with these key values.
    func metadataKey(_ values: [SQLValue]) throws -> SQLValue {
        if values.count == 1 { return MetadataKey.of(values[0]) }
        let statement = try database.cached(ApplySQL.compositeKey(columns: values.count))
        try statement.bind(values)
        defer { statement.reset() }
        _ = try statement.step()
        return MetadataKey.of(statement.value(at: 0))
    }

    func writeRowEntry(tid: Int, key: SQLValue, cl: Int64, stamp: LocalStamp) throws {
        try statements.upsertRowEntry.bind([
            .integer(Int64(tid)), key, .integer(cl), .integer(stamp.hlc),
            .integer(Int64(stamp.site)), .integer(stamp.seq),
        ])
        try statements.upsertRowEntry.run()
        try recordChange(tid: tid, key: key, stamp: stamp)
    }

    /// The entry of a live row just written, with the clocks of its columns that differ from
    /// the row's (replacing any of an earlier life) and the checksum of its values.
    func writeLiveRowEntry(
        target: Target, key: SQLValue, keyValues: [SQLValue], cl: Int64, stamp: LocalStamp, cells: [CellClock]
    ) throws {
        let statement = target.upsertLiveRowEntry
        let packed = CellClocks.stored(cells, relativeTo: stamp.rowClock)
        try statement.bind(
            [key, .integer(cl), .integer(stamp.hlc), .integer(Int64(stamp.site)), .integer(stamp.seq), packed] + keyValues)
        try statement.run()
        try recordChange(tid: target.info.tid, key: key, stamp: stamp)
        for cell in cells {
            try recordChange(tid: target.info.tid, key: key, stamp: cell.stamp)
        }
    }

    /// Notes the change in `_sqsync_changes`, so export and status find it by (site, seq).
    /// Bundles come in key order, so their sequence numbers do not: notes are written a batch
    /// at a time in (site, seq) order, which keeps the B-tree's inserts close together.
    func recordChange(tid: Int, key: SQLValue, stamp: LocalStamp) throws {
        pendingChanges.append((stamp.site, stamp.seq, tid, key))
        if pendingChanges.count >= Self.changeBatch { try writePendingChanges() }
    }

    static let changeBatch = 8192

    func writePendingChanges() throws {
        pendingChanges.sort { ($0.site, $0.seq) < ($1.site, $1.seq) }
        for change in pendingChanges {
            try statements.recordChange.bind([
                .integer(Int64(change.site)), .integer(change.seq), .integer(Int64(change.tid)), change.key,
            ])
            try statements.recordChange.run()
        }
        pendingChanges.removeAll(keepingCapacity: true)
    }

    /// Drops a row's column clocks and counter entries: they belong to the life that ended.
    func deleteCells(tid: Int, key: SQLValue) throws {
        try statements.deleteCells.bind([.integer(Int64(tid)), key])
        try statements.deleteCells.run()
        try deleteCounters(tid: tid, key: key)
    }

    func deleteCounters(tid: Int, key: SQLValue) throws {
        try statements.deleteCounters.bind([.integer(Int64(tid)), key])
        try statements.deleteCounters.run()
    }

    func localCells(tid: Int, key: SQLValue) throws -> [Int: LocalStamp] {
        let statement = statements.cellsOfRow
        try statement.bind([.integer(Int64(tid)), key])
        defer { statement.reset() }
        guard try statement.step() else { return [:] }
        return try localCells(
            statement.value(at: 0), of: RowClock(hlc: statement.int64(at: 1), site: Int(statement.int64(at: 2))))
    }

    /// Column id → clock, from the "cells" of the row entry whose clock is `row`.
    func localCells(_ packed: SQLValue, of row: RowClock) throws -> [Int: LocalStamp] {
        var cells: [Int: LocalStamp] = [:]
        for clock in try replica.cellClocks(packed, of: row) {
            cells[clock.cid] = clock.stamp
        }
        return cells
    }
}

extension CellClock {
    init(cid: Int, stamp: ChangeApplier.LocalStamp) {
        self.init(cid: cid, hlc: stamp.hlc, site: stamp.site, seq: stamp.seq)
    }

    var stamp: ChangeApplier.LocalStamp { ChangeApplier.LocalStamp(hlc: hlc, site: site, seq: seq) }
}

extension ChangeApplier.LocalStamp {
    /// What a row entry's column clocks are stored relative to (``CellClocks``).
    var rowClock: RowClock { RowClock(hlc: hlc, site: site) }
}
