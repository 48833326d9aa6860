import SQLiteDatabase

extension Replica {
    /// Folds the capture log into the per-row and per-column metadata, giving each change
    /// this replica's next sequence number and its hybrid-logical-clock value, then empties
    /// the log. Runs before anything reads changes (export, import, status, clone, purge,
    /// doctor), so knowledge always describes folded changes only and readers never see
    /// the log.
    ///
    /// The clock of a change is `max(last + 1, stamp)` in log order, starting from the
    /// replica's clock, which is past every value this replica ever used or saw: a change
    /// always orders after every change made or seen before it, even when the wall clock
    /// stepped back.
    /// Folds unless another connection holds a write transaction, without waiting for it:
    /// the read-only commands (`status`, `why`, `doctor`) never wait for a writer (SPEC §3).
    /// False when the pending changes were left for a later fold; what is read then is the
    /// last fold's state.
    public func foldUnlessBusy() throws -> Bool {
        do {
            try database.withoutWaiting { try fold() }
            return true
        } catch let error as SQLiteError where error.isBusy {
            // Only the fold's bookkeeping waited: no logged write is left out.
            return try database.optionalInt64(FoldSQL.lastLogRow) == nil
        }
    }

    public func fold() throws {
        let fold = {
            try self.database.inTransaction {
                try self.foldCaptureLog()
                try self.forgetAcknowledgedChanges()
            }
        }
        // Most folds find the log empty (a quiet sync, a second status): no cache to raise.
        guard try database.optionalInt64(FoldSQL.lastLogRow) != nil else { return try fold() }
        try database.withPageCache(ofAtLeast: Self.bulkPageCacheKiB, fold)
    }

    /// The page cache (KiB) a fold and an import work with, where the connection has less.
    /// Both write one entry per changed row, and neither reaches rows or entries in the order
    /// they lie in: the fold writes entries in key order a batch at a time (``foldBatch``),
    /// each batch across the whole table, and reads rows for their checksums, which lie in
    /// the order the app wrote them; an import follows the bundle, key order, into a table
    /// in the order the app wrote it. With SQLite's default 2,000 KiB most of those reads
    /// found their page gone from SQLite's cache and read it again from the file (through
    /// the OS's cache (measured in docs/PERFORMANCE.md, "Page cache"). The cache holds at
    /// most this much, and only what the work read.
    public static let bulkPageCacheKiB: Int64 = 16 * 1024

    /// Own changes `_sqsync_changes` keeps whatever the peers acknowledged: `export --since`
    /// a knowledge at most this many changes behind reads only what it sends; one further
    /// behind reads every row (docs/CLI.md). About 40 bytes each.
    public static let sinceWindow: Int64 = 10_000

    /// Drops from `_sqsync_changes` what every live peer acknowledged, site by site, and
    /// records up to where: an export or status for a peer that knows less reads the
    /// entries themselves instead. With no live peer, nothing needs keeping but the window
    /// of own changes for `export --since` (``sinceWindow``).
    /// What it reads (acknowledgements, sites, this replica's own number) unchanged since the
    /// last pass, the pass would change nothing: skipped (``generation(watching:)``).
    func forgetAcknowledgedChanges() throws {
        guard try generation(watching: Self.horizonInputs) != (try database.int64(GenerationSQL.horizonAt)) else { return }
        try database.run(FoldSQL.advanceChangeHorizon, .integer(Int64(site)))
        try database.run(FoldSQL.forgetAllChangesWithoutPeers, .integer(Int64(site)))
        for row in try database.rows(#"SELECT "site", "changes_from" FROM "_sqsync_sites" WHERE "changes_from" > 0"#) {
            try database.run(FoldSQL.forgetChanges, try row.value("site"), try row.value("changes_from"))
        }
        try database.run(GenerationSQL.recordHorizon)
    }

    /// One logged change with the clock and number the fold gave it, waiting in a batch.
    private struct FoldedChange {
        let tid: SQLValue
        let tableID: Int64
        let operation: Int
        /// The key as the metadata holds it, and as the log stored it.
        let key: SQLValue
        let stored: SQLValue
        let mask: Int64
        let delta: SQLValue
        let hlc: Int64
        let seq: Int64
    }

    /// Where a batched change's entry lies, in plain values: sorting these moves no
    /// reference-counted key (sorting the changes themselves cost a third of a fold), and a
    /// prefix of the key settles most comparisons.
    private struct EntryPosition {
        let tableID: Int64
        /// 1 for text, 2 for a BLOB, 3 for an integer, 0 for a key ``prefix`` does not order.
        let kind: UInt8
        /// Text and BLOBs: the first eight bytes, big-endian, zero-padded, so a prefix that
        /// sorts lower belongs to a key that does. Integers: the value with its sign bit
        /// flipped, which sorts as the value does.
        let prefix: UInt64
        /// In the batch, which is in log order.
        let index: Int

        init(of change: FoldedChange, at index: Int) {
            func firstEight<C: Collection<UInt8>>(_ bytes: C) -> UInt64 {
                var prefix: UInt64 = 0, count = 0
                for byte in bytes.prefix(8) {
                    prefix = prefix << 8 | UInt64(byte)
                    count += 1
                }
                return count == 0 ? 0 : prefix << UInt64(8 * (8 - count))
            }
            (tableID, self.index) = (change.tableID, index)
            switch change.key {
            case .text(let text): (kind, prefix) = (1, firstEight(text.utf8))
            case .blob(let bytes): (kind, prefix) = (2, firstEight(bytes))
            case .integer(let value): (kind, prefix) = (3, UInt64(bitPattern: value) ^ (1 << 63))
            default: (kind, prefix) = (0, 0)
            }
        }

        /// Table, then key in the metadata's order (``sqliteOrder(_:_:)``; in a UTF-16
        /// database text keys lie otherwise, which costs locality, not correctness), then log
        /// order: the order entries lie in.
        static func inEntryOrder(_ a: EntryPosition, _ b: EntryPosition, of batch: [FoldedChange]) -> Bool {
            if a.tableID != b.tableID { return a.tableID < b.tableID }
            if a.kind != 0 && a.kind == b.kind && a.prefix != b.prefix { return a.prefix < b.prefix }
            let keyOrder = a.kind == 3 && b.kind == 3 ? 0 : sqliteOrder(batch[a.index].key, batch[b.index].key)
            return keyOrder != 0 ? keyOrder < 0 : a.index < b.index
        }
    }

    /// Changes the fold numbers before it writes their entries. Clocks and numbers follow
    /// the log, and so do the notes (`_sqsync_changes` is in that order); the entries are
    /// written a batch at a time in the order they lie in, table and key, where the log's
    /// order (the app's, random keys) sent each write to a page of its own. Writes to
    /// different rows are independent, and one row's keep their log order (docs/PERFORMANCE.md,
    /// "Fold"). A batch holds about 10 MB.
    static let foldBatch = 32_768

    private func foldCaptureLog() throws {
        let log = try database.statement(FoldSQL.readLog)
        guard let clock = try database.row(#"SELECT "seq", "hlc" FROM "_sqsync_replica""#) else {
            throw ChangeLogError(.notAReplica, "\(path): sqsync metadata is damaged (no replica row)")
        }
        var seq = try clock.int64("seq")
        let seqBefore = seq
        var hlc = try clock.int64("hlc")
        var lastID: Int64 = 0
        var bornHere: Set<ReachKey> = []
        let startLife = try database.statement(FoldSQL.startLife)
        let endLife = try database.statement(FoldSQL.endLife)
        let dropCounters = try database.statement(CounterSQL.dropCountersOfRow)
        let addToCounter = try database.statement(CounterSQL.addOwnDelta)
        let writeCell = try database.statement(FoldSQL.writeCell)
        let recordChange = try database.statement(FoldSQL.recordChange)
        let site = SQLValue.integer(Int64(self.site))
        // Per table the log touches, read once: nil for a table no longer tracked or present.
        var targets: [Int64: FoldTarget?] = [:]
        var batch: [FoldedChange] = []
        var deadAtTheTop: [FoldedChange] = []

        func write(_ change: FoldedChange) throws {
            let target = targets[change.tableID] ?? nil
            let tid = change.tid, key = change.key
            // The checksum of the row as it is now: the fold's snapshot holds the values every
            // logged write left, so a row written several times gets the same one each time.
            let keyValues =
                target?.checksummed == true ? KeyCodec.decode(change.stored, columns: target?.keyColumns ?? 1) : nil
            switch change.operation {
            case TriggerSQL.Operation.insert, TriggerSQL.Operation.delete:
                let isInsert = change.operation == TriggerSQL.Operation.insert
                if isInsert {
                    let statement = keyValues != nil ? target?.startLifeWithChecksum ?? startLife : startLife
                    try statement.bind([tid, key, .integer(change.hlc), site, .integer(change.seq)])
                    if statement !== startLife, let keyValues { try statement.bind(keyValues, from: 6) }
                    let length = try statement.fetchOne({ $0.int64(at: 0) })
                    // An even length back: the row was deleted at the top, and stays so.
                    if length.map({ $0 % 2 == 0 }) == true { deadAtTheTop.append(change) }
                    // A first life: the key has been nowhere but here (``extendOwnReach``).
                    if length == 1, target?.table.label != nil { bornHere.insert(ReachKey(tid: change.tableID, key: key)) }
                } else {
                    try endLife.bind([tid, key, .integer(change.hlc), site, .integer(change.seq)])
                    try endLife.run()
                }
                if target?.mayHaveCounters ?? true {
                    try dropCounters.bind([tid, key])
                    try dropCounters.run()
                }
            case TriggerSQL.Operation.counterDelta:
                try addToCounter.bind([
                    tid, key, .integer(change.mask), site, change.delta, .integer(change.hlc), .integer(change.seq),
                ])
                try addToCounter.run()
                if let keyValues, let statement = target?.recordChecksum {
                    try statement.bind([key] + keyValues)
                    try statement.run()
                }
            default:
                let word = change.operation - TriggerSQL.Operation.updateBase
                var mask = change.mask
                while mask != 0 {
                    let bit = mask.trailingZeroBitCount
                    mask &= mask - 1
                    let cid = word * TriggerSQL.Operation.columnsPerMask + bit + 1
                    // The last column's write records the checksum too.
                    let statement = mask == 0 && keyValues != nil ? target?.writeCellWithChecksum ?? writeCell : writeCell
                    try statement.bind([tid, key, .integer(Int64(cid)), .integer(change.hlc), site, .integer(change.seq)])
                    if statement !== writeCell, let keyValues { try statement.bind(keyValues, from: 7) }
                    try statement.run()
                }
            }
        }

        func writeBatch() throws {
            for change in batch {
                try recordChange.bind([site, .integer(change.seq), change.tid, change.key])
                try recordChange.run()
            }
            var positions = batch.indices.map { EntryPosition(of: batch[$0], at: $0) }
            positions.sort { EntryPosition.inEntryOrder($0, $1, of: batch) }
            for position in positions { try write(batch[position.index]) }
            batch.removeAll(keepingCapacity: true)
        }

        let logRows = progress == nil ? 0 : Int(try database.int64(FoldSQL.logRowSpan))
        var read = 0
        while try log.step() {
            lastID = log.int64(at: 0)
            read += 1
            if read % Self.progressInterval == 0, let progress {
                progress(WorkProgress(step: "recording writes", done: read, total: max(read, logRows), unit: "rows"))
            }
            let tid = log.value(at: 1), operation = Int(log.int64(at: 2)), stored = log.value(at: 3)
            let key = MetadataKey.of(stored)
            // The triggers log no delta that is not a number; one from elsewhere counts as nothing.
            if operation == TriggerSQL.Operation.counterDelta && log.value(at: 6) == .null { continue }
            // An update that wrote the same values again changed nothing.
            if operation >= TriggerSQL.Operation.updateBase && log.int64(at: 4) == 0 { continue }
            // A NULL key (rows from before `track`; the triggers refuse new ones) names no row
            // a peer could find; `doctor` reports the rows sqsync does not record.
            guard key != .null, let tableID = tid.int64Value else { continue }
            if targets[tableID] == nil { targets[tableID] = .some(try foldTarget(tid: tableID)) }
            hlc = max(try Self.next(after: hlc, what: "clock"), log.int64(at: 5))
            seq = try Self.next(after: seq, what: "sequence number")
            batch.append(
                FoldedChange(
                    tid: tid, tableID: tableID, operation: operation, key: key, stored: stored, mask: log.int64(at: 4),
                    delta: log.value(at: 6), hlc: hlc, seq: seq))
            if batch.count >= foldBatchSize { try writeBatch() }
        }
        try writeBatch()
        for change in deadAtTheTop { try undoInsertAtTheTop(change, in: targets[change.tableID] ?? nil) }
        guard lastID > 0 else { return }
        try extendOwnReach(
            after: seqBefore, tables: targets.values.compactMap { $0?.table }.filter { $0.label != nil }, bornHere: bornHere)
        // Every row read (no writer can add one while this transaction writes): SQLite then
        // drops the table's pages at once instead of deleting row by row.
        if try database.optionalInt64(FoldSQL.lastLogRow) == lastID {
            try database.execute(FoldSQL.emptyWholeLog)
        } else {
            try database.run(FoldSQL.emptyLog, .integer(lastID))
        }
        try database.run(FoldSQL.advanceClock, .integer(seq), .integer(hlc))
    }

    /// An insert of a key deleted at the top causal length: the row leaves the table again
    /// (sqsync's triggers silent), and the conflict log says why (docs/MERGE_RULES.md, "Rows").
    private func undoInsertAtTheTop(_ change: FoldedChange, in target: FoldTarget?) throws {
        guard let target, let keyValues = KeyCodec.decode(change.stored, columns: target.keyColumns) else { return }
        try database.execute(MergeSQL.startApplying)
        defer { try? database.execute(MergeSQL.stopApplying) }
        try database.run(MergeSQL.deleteRow(target.name, key: target.key), keyValues)
        try database.run(
            MergeSQL.recordConflict, .text("insert at the top causal length"), .text(target.name),
            .text(keyValues.map(\.literal).joined(separator: ", ")), .null, .null, .null, .text(knowledgeID),
            .integer(change.hlc), .null, .null, .null, .integer(1))
    }

    /// `value + 1`, or a clear error where it would overflow: clocks are bounded where they
    /// come in (``ClockBound``), so only a wall clock set to the end of time gets here.
    private static func next(after value: Int64, what: String) throws -> Int64 {
        let (next, overflow) = value.addingReportingOverflow(1)
        guard !overflow else {
            throw ChangeLogError(.notAReplica, "this replica's \(what) is at its largest value; no change can be numbered after it")
        }
        return next
    }

    /// How the fold writes one table's changes.
    private struct FoldTarget {
        let table: TableInfo
        var name: String { table.name }
        let key: [ColumnInfo]
        var keyColumns: Int { key.count }
        /// False where the table's triggers are gone (a table rebuilt): its rows may then hold
        /// writes no trigger saw, and the old checksum is what lets `refresh` notice them.
        let checksummed: Bool
        let startLifeWithChecksum: Statement?
        let writeCellWithChecksum: Statement?
        let recordChecksum: Statement?
        /// ``TableInfo/mayHaveCounters(in:)``, read once.
        let mayHaveCounters: Bool
    }

    private func foldTarget(tid: Int64) throws -> FoldTarget? {
        guard let name = try database.optionalString(#"SELECT "name" FROM "_sqsync_tables" WHERE "tid" = ?"#, .integer(tid)),
            let table = try trackedTable(tid: Int(tid), name: name)
        else { return nil }
        let checksummed = try hasCaptureTriggers(table)
        return FoldTarget(
            table: table, key: table.primaryKey, checksummed: checksummed,
            startLifeWithChecksum: checksummed ? try database.statement(FoldSQL.startLifeWithChecksum(table)) : nil,
            writeCellWithChecksum: checksummed ? try database.statement(FoldSQL.writeCellWithChecksum(table)) : nil,
            recordChecksum: checksummed ? try database.statement(RowChecksum.update(table)) : nil,
            mayHaveCounters: try table.mayHaveCounters(in: database))
    }

    /// Records the checksum of the live row whose metadata key is `key` (`RowChecksum.update`).
    func recordChecksum(of key: SQLValue, in table: TableInfo, with statement: Statement) throws {
        guard let values = MetadataKey.values(key, columns: table.primaryKey.count) else { return }
        try statement.bind([key] + values)
        try statement.run()
    }

    func hasCaptureTriggers(_ table: TableInfo) throws -> Bool {
        try database.int64(
            "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'trigger' AND name = ?)",
            .text("_sqsync_\(table.name)_after_insert")) == 1
    }

    /// Entries left unnumbered (sequence number 0) by the triggers of sqsync versions before
    /// the capture log, numbered once when such a replica is upgraded; none are written since.
    func numberLegacyEntries() throws { try Self.numberLegacyEntries(in: database) }

    /// Column entries are numbered only while they have a table of their own (before
    /// metadata migration 9 packs them into row entries).
    static func numberLegacyEntries(in database: Database) throws {
        var tables = [("_sqsync_rows", ["tid", "pk"])]
        if try database.int64(#"SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE name = '_sqsync_cells')"#) == 1 {
            tables.append(("_sqsync_cells", ["tid", "pk", "cid"]))
        }
        for (table, keyColumns) in tables {
            try database.execute(LegacyEntrySQL.collectPending(table: table, keyColumns: keyColumns))
            let count = try database.int64(#"SELECT count(*) FROM temp."_sqsync_pending""#)
            if count > 0 {
                try database.execute(LegacyEntrySQL.assign(table: table, keyColumns: keyColumns))
                try database.run(
                    LegacyEntrySQL.advanceClock, .integer(count),
                    .integer(try database.int64(#"SELECT max("hlc") FROM temp."_sqsync_pending""#)))
            }
            try database.execute(#"DROP TABLE temp."_sqsync_pending""#)
        }
    }
}

/// The statements of the fold, as SQL.
enum FoldSQL {
    /// The stamp in ms: the triggers store the Julian day (REAL), other writers ms (INTEGER).
    static let readLog = """
        SELECT "id", "tid", "op", "pk", "mask",
               CASE typeof("stamp") WHEN 'real' THEN \(MetadataSQL.milliseconds(ofJulianDay: #""stamp""#)) ELSE "stamp" END,
               "delta"
        FROM "_sqsync_log" ORDER BY "id"
        """

    /// Whether the row ?2 of table ?1 left this replica's scope (docs/SCOPES.md): an insert of
    /// its key here is a new row, not the hidden one, so it starts the next life.
    private static let ghost = """
        "cl" % 2 = 1 AND EXISTS (SELECT 1 FROM "_sqsync_ghosts" g WHERE g."tid" = ?1 AND g."pk" = ?2)
        """

    /// An insert starts the row's next life (the next odd causal length, at most the odd one
    /// below ``RowChange/maxCausalLength``)...
    /// Column clocks belong to one life, and are stored relative to its clock: both drop them.
    static let startLife = """
        INSERT INTO "_sqsync_rows" ("tid", "pk", "cl", "hlc", "site", "seq") VALUES (?1, ?2, 1, ?3, ?4, ?5)
        ON CONFLICT ("tid", "pk") DO UPDATE SET "cl" = \(nextLife),
            "hlc" = excluded."hlc", "site" = excluded."site", "seq" = excluded."seq", "cells" = NULL
        RETURNING "cl"
        """

    /// The next life's causal length. A row deleted at the top (``RowChange/maxCausalLength``)
    /// has no life above it: it stays deleted (even), and the fold undoes the insert
    /// (docs/MERGE_RULES.md, "Rows"), as every replica that holds the deletion does.
    private static let nextLife = """
        CASE WHEN "cl" + ("cl" % 2 = 0) + 2 * (\(ghost)) > \(RowChange.maxCausalLength - 1) THEN "cl"
             ELSE "cl" + ("cl" % 2 = 0) + 2 * (\(ghost)) END
        """

    /// The same, with the checksum of the row's values (``RowChecksum``), its key values
    /// bound from ?6 on.
    static func startLifeWithChecksum(_ table: TableInfo) -> String {
        """
        INSERT INTO "_sqsync_rows" ("tid", "pk", "cl", "hlc", "site", "seq", "sum")
        VALUES (?1, ?2, 1, ?3, ?4, ?5, \(RowChecksum.ofRow(table, firstKeyParameter: 6)))
        ON CONFLICT ("tid", "pk") DO UPDATE SET "cl" = \(nextLife),
            "hlc" = excluded."hlc", "site" = excluded."site", "seq" = excluded."seq", "cells" = NULL,
            "sum" = excluded."sum"
        RETURNING "cl"
        """
    }

    /// ...and a delete ends it (the next even one, at most ``RowChange/maxCausalLength``).
    static let endLife = """
        INSERT INTO "_sqsync_rows" ("tid", "pk", "cl", "hlc", "site", "seq") VALUES (?1, ?2, 2, ?3, ?4, ?5)
        ON CONFLICT ("tid", "pk") DO UPDATE SET "cl" = min("cl" + ("cl" % 2), \(RowChange.maxCausalLength)),
            "hlc" = excluded."hlc", "site" = excluded."site", "seq" = excluded."seq", "cells" = NULL
        """

    /// One column's clock, in its row's entry (CellClocks).
    static let writeCell = """
        UPDATE "_sqsync_rows" SET "cells" = sqsync_cells_set("cells", "hlc", "site", ?3, ?4, ?5, ?6) WHERE "tid" = ?1 AND "pk" = ?2
        """

    /// The same, with the checksum of the row's values, its key values bound from ?7 on.
    static func writeCellWithChecksum(_ table: TableInfo) -> String {
        """
        UPDATE "_sqsync_rows" SET "cells" = sqsync_cells_set("cells", "hlc", "site", ?3, ?4, ?5, ?6),
            "sum" = \(RowChecksum.ofRow(table, firstKeyParameter: 7))
        WHERE "tid" = ?1 AND "pk" = ?2
        """
    }

    static let emptyLog = #"DELETE FROM "_sqsync_log" WHERE "id" <= ?1"#
    /// The same when every row goes: without WHERE, SQLite clears the table at once.
    static let emptyWholeLog = #"DELETE FROM "_sqsync_log""#
    static let lastLogRow = #"SELECT max("id") FROM "_sqsync_log""#

    /// How many rows the log holds, near enough for progress (ids are dense), read from its ends.
    /// Each end in its own subquery: SQLite reads one end of the table for a lone min() or max().
    static let logRowSpan = #"""
        SELECT coalesce((SELECT max("id") FROM "_sqsync_log") - (SELECT min("id") FROM "_sqsync_log") + 1, 0)
        """#

    static let recordChange = """
        INSERT OR IGNORE INTO "_sqsync_changes" ("site", "seq", "tid", "pk") VALUES (?1, ?2, ?3, ?4)
        """

    /// Per site: the least any live peer (other than this replica, ?1) acknowledged of it, in
    /// one pass over the acknowledgements (a peer without one for the site holds it at 0).
    /// Only horizons that move are written: every fold runs this, and a quiet sync folds with
    /// nothing new from a hundred peers.
    /// This replica's own newest ``Replica/sinceWindow`` changes stay whatever the peers
    /// acknowledged, so that `export --since` any knowledge within them costs what it sends.
    static let advanceChangeHorizon = """
        UPDATE "_sqsync_sites" AS s SET "changes_from" =
            CASE WHEN s."site" = ?1 THEN min(h."least", \(ownWindowStart)) ELSE h."least" END
        FROM (
            SELECT a."site" AS "site", min(a."seq") AS "least", count(*) AS "peers"
            FROM "_sqsync_acks" a JOIN "_sqsync_sites" p ON p."site" = a."peer"
            WHERE p."site" != ?1 AND p."retired" = 0
            GROUP BY a."site"
        ) AS h
        WHERE h."site" = s."site"
          AND CASE WHEN s."site" = ?1 THEN min(h."least", \(ownWindowStart)) ELSE h."least" END > s."changes_from"
          AND h."peers" = (SELECT count(*) FROM "_sqsync_sites" p WHERE p."site" != ?1 AND p."retired" = 0)
        """

    /// Where the window of this replica's own changes kept for `export --since` starts.
    private static let ownWindowStart = #"max(0, (SELECT "seq" FROM "_sqsync_replica") - \#(Replica.sinceWindow))"#

    /// With no live peer, nothing needs keeping but the window of own changes.
    static let forgetAllChangesWithoutPeers = """
        UPDATE "_sqsync_sites" AS s SET "changes_from" =
            CASE WHEN s."site" = ?1 THEN \(ownWindowStart) ELSE s."known_seq" END
        WHERE NOT EXISTS (SELECT 1 FROM "_sqsync_sites" p WHERE p."site" != ?1 AND p."retired" = 0)
          AND "changes_from" < CASE WHEN s."site" = ?1 THEN \(ownWindowStart) ELSE s."known_seq" END
        """

    /// The least any live peer other than this replica (?1) acknowledged of site `s`; NULL
    /// when there is no live peer.
    static let leastAcknowledged = """
        (SELECT min(coalesce((SELECT a."seq" FROM "_sqsync_acks" a WHERE a."peer" = p."site" AND a."site" = s."site"), 0))
             FROM "_sqsync_sites" p WHERE p."site" != ?1 AND p."retired" = 0)
        """

    static let forgetChanges = #"DELETE FROM "_sqsync_changes" WHERE "site" = ?1 AND "seq" <= ?2"#

    /// After a fold, the clock also moves up to the wall clock. A delete's log row carries no
    /// stamp (``TriggerSQL``), so without this a fold of deletes alone would leave the clock
    /// behind the wall clock. The import's check for copied databases needs it there: it
    /// refuses a knowledge ID that goes from more changes to fewer at a later clock
    /// (``ChangeMerger``), and a copy that had only deleted would show no later clock. The
    /// changes just folded keep their clocks, so a fold gives them the same ones whenever it runs.
    static let advanceClock = """
        UPDATE "_sqsync_replica" SET "seq" = ?1, "hlc" = max("hlc", ?2, \(MetadataSQL.wallClockMilliseconds))
        """
}

/// The statements that number entries left unnumbered by earlier versions' triggers.
enum LegacyEntrySQL {
    static func collectPending(table: String, keyColumns: [String]) -> String {
        let keys = keyColumns.map(quoteIdentifier).joined(separator: ", ")
        return """
            CREATE TEMP TABLE "_sqsync_pending" AS
              SELECT \(keys), "hlc", row_number() OVER (ORDER BY "hlc") AS "n"
              FROM \(quoteIdentifier(table))
              WHERE "site" = (SELECT "site" FROM "_sqsync_replica") AND "seq" = 0
            """
    }

    static func assign(table: String, keyColumns: [String]) -> String {
        let match = keyColumns.map { "t.\(quoteIdentifier($0)) = p.\(quoteIdentifier($0))" }.joined(separator: " AND ")
        return """
            UPDATE \(quoteIdentifier(table)) AS t
              SET "seq" = (SELECT "seq" FROM "_sqsync_replica") + p."n"
              FROM temp."_sqsync_pending" AS p WHERE \(match)
            """
    }

    static let advanceClock = """
        UPDATE "_sqsync_replica" SET "seq" = "seq" + ?1, "hlc" = max("hlc", coalesce(?2, 0))
        """
}
