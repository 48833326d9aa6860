import SQLiteDatabase

/// The applier's own bookkeeping: row entries with their column clocks, and change notes,
/// written next to each row it applies.
extension ChangeMerger {
    /// A row's entry: its causal length, the stamp of its life, and its column clocks as
    /// stored (``CellClocks``, decoded only where needed).
    func rowEntry(tid: Int, key: SQLValue) throws -> (cl: Int64, stamp: LocalStamp, cells: SQLValue)? {
        if try entryCeiling.isAbove(key, tid: tid, in: database) { return nil }
        try flushFreshRows()
        let statement = statements.rowEntry
        // Reset after every use (fetchOne), so bound value by value, without another reset.
        try statement.bind(.integer(Int64(tid)), at: 1)
        try statement.bind(key, at: 2)
        return try statement.fetchOne { entry in
            (
                entry.int64(at: 0),
                LocalStamp(hlc: entry.int64(at: 1), site: Int(entry.int64(at: 2)), seq: entry.int64(at: 3)),
                entry.value(at: 4)
            )
        }
    }

    /// The key under which sqsync's metadata holds the row with these key values.
    func metadataKey(_ values: [SQLValue]) throws -> SQLValue { try replica.metadataKey(values) }

    /// Writes the entry of a row without its values (a deleted row). `exists`: the entry is
    /// known to be there, so it is updated in place rather than upserted (SQLite's upsert
    /// tries the insert first).
    func writeRowEntry(tid: Int, key: SQLValue, cl: Int64, stamp: LocalStamp, exists: Bool = false) throws {
        entryCeiling.raise(to: key, tid: tid)
        let statement = exists ? statements.updateRowEntry : statements.upsertRowEntry
        try statement.bind([
            .integer(Int64(tid)), key, .integer(cl), .integer(stamp.hlc),
            .integer(Int64(stamp.site)), .integer(stamp.seq),
        ])
        try statement.run()
    }

    /// The entry of a live row just written, with the clocks of its columns that differ from
    /// the row's (replacing any of an earlier life) and the checksum of its values: `checksum`
    /// when the caller knows it, else read from the row as stored.
    func writeLiveRowEntry(
        target: Target, key: SQLValue, keyValues: [SQLValue], cl: Int64, stamp: LocalStamp, cells: [CellClock],
        checksum: Int64? = nil
    ) throws {
        entryCeiling.raise(to: key, tid: target.info.tid)
        let packed = CellClocks.stored(cells, relativeTo: stamp.rowClock)
        let statement = checksum == nil ? target.upsertLiveRowEntry : target.upsertLiveRowEntryWithChecksum
        try statement.bind([key, .integer(cl), .integer(stamp.hlc), .integer(Int64(stamp.site)), .integer(stamp.seq), packed])
        if let checksum {
            try statement.bind(.integer(checksum), at: 7)
        } else {
            try statement.bind(keyValues, from: 7)
        }
        try statement.run()
    }

    /// Drops a row's counter entries: they belong to the life that ended.
    func deleteCounters(of target: Target, key: SQLValue) throws {
        guard target.mayHaveCounters else { return }
        try statements.deleteCounters.bind([.integer(Int64(target.info.tid)), key])
        try statements.deleteCounters.run()
    }

    /// Column id → clock, from the "cells" of the row entry whose clock is `row`.
    func localCells(_ packed: SQLValue, of row: RowClock) throws -> [Int: LocalStamp] {
        if packed == .null { return [:] }
        var cells: [Int: LocalStamp] = [:]
        for clock in try replica.cellClocks(packed, of: row) {
            cells[clock.cid] = clock.stamp
        }
        return cells
    }
}

extension CellClock {
    init(cid: Int, stamp: ChangeMerger.LocalStamp) {
        self.init(cid: cid, hlc: stamp.hlc, site: stamp.site, seq: stamp.seq)
    }

    var stamp: ChangeMerger.LocalStamp { ChangeMerger.LocalStamp(hlc: hlc, site: site, seq: seq) }
}

extension ChangeMerger.LocalStamp {
    /// What a row entry's column clocks are stored relative to (``CellClocks``).
    var rowClock: RowClock { RowClock(hlc: hlc, site: site) }
}

/// Per table, the greatest metadata key that has an entry: a key above it has none, so its
/// entry need not be looked up. Bundles list rows in key order, so on a first sync every row
/// is above, and a later one mostly adds keys above too (UUIDv7 keys grow with time). The
/// applier raises the ceiling with every entry it writes.
struct EntryKeyCeiling {
    /// Per table read so far, its greatest key (NULL for a table without entries: a key is
    /// never NULL), or nil where the ceiling cannot be trusted. A list, not a dictionary: a
    /// bundle carries a few tables, row after row of each, and hashing the table's id for
    /// each row cost more than finding it here.
    private var greatest: [(tid: Int, key: SQLValue?)] = []

    mutating func isAbove(_ key: SQLValue, tid: Int, in database: Database) throws -> Bool {
        let index: Int
        if let known = greatest.firstIndex(where: { $0.tid == tid }) {
            index = known
        } else {
            greatest.append((tid, try Self.read(tid: tid, in: database)))
            index = greatest.count - 1
        }
        guard let ceiling = greatest[index].key else { return false }
        return sqliteOrder(key, ceiling) > 0
    }

    mutating func raise(to key: SQLValue, tid: Int) {
        guard let index = greatest.firstIndex(where: { $0.tid == tid }), let current = greatest[index].key,
            sqliteOrder(key, current) > 0
        else { return }
        greatest[index].key = key
    }

    /// ``sqliteOrder(_:_:)`` compares text as UTF-8 bytes, SQLite's index in the database's
    /// encoding: in a UTF-16 database the orders differ, and so they do for a text key whose
    /// bytes are not UTF-8 (read back, it is no longer the key stored). Neither gets a ceiling.
    private static func read(tid: Int, in database: Database) throws -> SQLValue? {
        guard try database.optionalString("PRAGMA encoding") == "UTF-8" else { return nil }
        guard let row = try database.row(MergeSQL.greatestEntryKey, .integer(Int64(tid))) else { return .null }
        let key = try row.value("pk")
        if case .text(let text) = key, Array(text.utf8) != (try row.blob("bytes")) { return nil }
        return key
    }
}
