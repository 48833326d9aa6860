import SQLiteDatabase

/// What `refresh` found and did, table by table.
public struct RefreshResult: Sendable, Equatable {
    public var tables: [String] = []
    /// Tracked tables renamed by the app's migration: old name → new name.
    public var renamedTables: [String: String] = [:]
    /// "table.old" → "new".
    public var renamedColumns: [String: String] = [:]
    /// "table.column" of columns the migration dropped.
    public var droppedColumns: [String] = []
    /// Tables whose primary key the migration changed.
    public var rekeyedTables: [String] = []
    /// Writes made while no trigger ran, now captured as local changes.
    public var capturedInserts = 0
    public var capturedDeletes = 0
    public var capturedUpdates = 0

    public init() {}
}

/// What differs between a tracked table and what sqsync recorded of it: writes made while
/// no trigger ran (a table rebuilt by a migration, an `untrack`/`track` gap, a restored
/// backup of the table).
public struct UncapturedWrites: Sendable, Equatable {
    public var table: String
    public var inserts: Int
    public var deletes: Int
    public var updates: Int
    public var isEmpty: Bool { inserts == 0 && deletes == 0 && updates == 0 }
}

extension Replica {
    /// Takes sqsync's triggers off every tracked table, so the app's migration may drop a
    /// column (SQLite refuses to drop a column a trigger names) or rebuild a table, and keeps
    /// a copy of every tracked value as captured so far. `refresh` afterwards puts the
    /// triggers back and captures, once, every write made in between, down to the column.
    @discardableResult
    public func prepareMigration() throws -> [String] {
        try database.inTransaction {
            try fold()
            var names: [String] = []
            for table in try trackedTables(skippingMissing: true) {
                try dropTriggers(of: table.name)
                try database.execute(TriggerSQL(table: table).migrationMarker.sql)
                // A restricted replica's checks stay: the migration's own writes must pass them.
                for trigger in TriggerSQL(table: table).grantTriggers(columnFree: true) { try database.execute(trigger.sql) }
                let snapshot = SnapshotSQL(table: table)
                try database.run(SnapshotSQL.forget, .integer(Int64(table.tid)))
                for column in table.columns where !column.isPrimaryKey { try database.execute(snapshot.keep(column)) }
                names.append(table.name)
            }
            return names
        }
    }

    /// True between `prepareMigration()` and the `refresh()` that ends it.
    public func isMigrating() throws -> Bool {
        try database.int64(RefreshSQL.migrating) == 1
    }

    /// Refuses `what` (an export, an import, a sync) while a migration is pending: the
    /// triggers are off, so the replica would send a state it has not captured, or take rows
    /// the coming `refresh` would count as its own writes.
    public func refuseWhileMigrating(_ what: String) throws {
        try refuseDuringMigration(what)
        try refuseWithoutGrantChecks(what)
    }

    /// Refuses `what` (sync, export) while a tracked table has columns its triggers do not
    /// capture (`ALTER TABLE … ADD COLUMN` without `refresh`): their values would never sync,
    /// and a bundle written now would carry the rows without them.
    public func refuseWithUncapturedColumns(_ what: String) throws {
        let uncaptured = try uncapturedColumns()
        guard !uncaptured.isEmpty else { return }
        let tables = uncaptured.map { "\($0.table) (\($0.columns.joined(separator: ", ")))" }.joined(separator: "; ")
        throw ChangeLogError(
            .migrationPending,
            "\(path): \(what) refused: columns added since the triggers were made are not captured: \(tables); run `sqsync refresh \(path)`"
        )
    }

    /// Refuses `what` between `refresh --before-migration` and `refresh`: it would put back
    /// triggers that name columns the migration may drop (an admin statement, a policy).
    func refuseDuringMigration(_ what: String) throws {
        guard try isMigrating() else { return }
        throw ChangeLogError(
            .migrationPending,
            "\(path): \(what) waits for the migration in progress (`refresh --before-migration` took the triggers off); migrate, then run `sqsync refresh \(path)`"
        )
    }

    /// Refuses `what` while a table with grants here lacks its grant triggers (a table rebuilt,
    /// triggers dropped by hand): writes made meanwhile were checked by nothing here.
    /// `refresh` puts them back, and peers judge what it captures like any change.
    func refuseWithoutGrantChecks(_ what: String) throws {
        for table in try trackedTables(skippingMissing: true) where table.grants != nil {
            let present = Set(
                try database.rows(RefreshSQL.triggersOn, .text(table.name)).map { try $0.string("name") })
            let missing = TriggerSQL.grantTriggerNames(of: table.name).filter { !present.contains($0) }
            guard missing.isEmpty else {
                throw ChangeLogError(
                    .forbidden,
                    "\(path): \(what) refused: the grant checks of table \(table.name) are missing (\(missing.joined(separator: ", "))), so writes since were checked by nothing here; run `sqsync refresh \(path)` to put them back"
                )
            }
        }
    }

    /// Rebuilds every tracked table's triggers after the app migrated its schema, and
    /// reconciles the tables with sqsync's metadata. A table renamed by `ALTER TABLE … RENAME
    /// TO` is followed (its triggers moved with it); a column renamed by `RENAME COLUMN` keeps
    /// its id and the clocks of its values; a dropped column is remembered as dropped, so
    /// peers' changes to it are ignored; a new column gets an id, and values a migration gave
    /// it are captured. Then rows present but unknown become local inserts, rows recorded
    /// alive but gone become local deletes, and rows whose values differ from what was last
    /// captured become local updates.
    @discardableResult
    public func refresh() throws -> RefreshResult {
        try database.inTransaction {
            try fold()
            var result = RefreshResult()
            var changedColumns: [TableInfo] = []
            for row in try database.rows(#"SELECT "tid", "name" FROM "_sqsync_tables" ORDER BY "tid""#) {
                let tid = try row.int("tid")
                var name = try row.string("name")
                if try DeclaredTable.read(name, in: database) == nil {
                    guard let renamed = try tableHoldingTriggers(of: name) else {
                        throw ChangeLogError(
                            .schemaMismatch,
                            "\(path): tracked table \(name) no longer exists; run `sqsync untrack \(path) \(name)`")
                    }
                    try database.run(RefreshSQL.renameTable, .text(renamed), .integer(Int64(tid)))
                    result.renamedTables[name] = renamed
                    name = renamed
                }
                guard let declared = try DeclaredTable.read(name, in: database) else { continue }
                let recordedColumns = Set(
                    try database.rows(RefreshSQL.liveColumnsWithIDs, .integer(Int64(tid))).map { try $0.int("cid") })
                try followColumns(of: declared, tid: tid, into: &result)
                let live = Set(try database.rows(RefreshSQL.liveColumns, .integer(Int64(tid))).map { try $0.string("name") })
                let oldKey = try database.rows(RefreshSQL.keyColumns, .integer(Int64(tid))).map { try $0.string("name") }
                let info = try register(declared)
                try database.run(RefreshSQL.markKeyColumns, .integer(Int64(tid)))
                for column in declared.columns where column.primaryKeyPosition > 0 {
                    try database.run(
                        RefreshSQL.setKeyColumn, .integer(Int64(column.primaryKeyPosition)), .integer(Int64(tid)),
                        .text(column.name))
                }
                let newKey = declared.primaryKey.map(\.name)
                if oldKey != newKey {
                    try rekey(info, from: oldKey, declared: declared)
                    result.rekeyedTables.append(name)
                }
                try installTriggers(for: info)
                let triggers = TriggerSQL(table: info)
                for column in info.columns where !live.contains(column.name) && !column.isPrimaryKey {
                    try database.run(RefreshSQL.undrop, .integer(Int64(tid)), .text(column.name))
                    let defaultSQL = declared.columns.first { $0.name == column.name }?.defaultSQL
                    try database.execute(triggers.backfill(column, defaultSQL: defaultSQL))
                }
                let sameColumns = Set(info.columns.map(\.cid)) == recordedColumns && oldKey == newKey
                let captured = try captureUncapturedWrites(of: info, sameColumns: sameColumns)
                try database.run(SnapshotSQL.forget, .integer(Int64(tid)))
                if !sameColumns { changedColumns.append(info) }
                result.capturedInserts += captured.inserts
                result.capturedDeletes += captured.deletes
                result.capturedUpdates += captured.updates
                result.tables.append(name)
            }
            try fold()
            for table in changedColumns { try recomputeChecksums(of: table) }
            return result
        }
    }

    /// Writes to tracked tables that no trigger captured; `doctor` reports them.
    public func uncapturedWrites() throws -> [UncapturedWrites] {
        try fold()
        return try database.inTransaction(commit: false) {
            var found: [UncapturedWrites] = []
            for table in try trackedTables(skippingMissing: true) {
                let recorded = Set(
                    try database.rows(RefreshSQL.liveColumnsWithIDs, .integer(Int64(table.tid))).map { try $0.int("cid") })
                let captured = try captureUncapturedWrites(
                    of: table, sameColumns: recorded == Set(table.columns.map(\.cid)))
                found.append(
                    UncapturedWrites(
                        table: table.name, inserts: captured.inserts, deletes: captured.deletes, updates: captured.updates))
            }
            return found.filter { !$0.isEmpty }
        }
    }

    /// Logs, as local changes, what differs between the table and the metadata. Runs after a
    /// fold, so the log holds nothing else of this table. Changed values are found column by
    /// column against the copy `prepareMigration()` kept, else row by row against the
    /// recorded checksums, which only mean something while the columns are the ones they
    /// were computed over (`sameColumns`).
    private func captureUncapturedWrites(of table: TableInfo, sameColumns: Bool) throws -> (
        inserts: Int, deletes: Int, updates: Int
    ) {
        let reconcile = ReconcileSQL(table: table)
        try database.execute(reconcile.logInserts)
        let inserts = database.changes
        try database.execute(reconcile.logDeletes)
        let deletes = database.changes
        try database.execute(ReconcileSQL.forgetPresent)
        var updates = 0
        if try database.int64(SnapshotSQL.exists, .integer(Int64(table.tid))) == 1 {
            for column in table.columns where !column.isPrimaryKey {
                try database.execute(reconcile.logUpdates(of: column))
                updates += database.changes
            }
        } else if sameColumns {
            for statement in reconcile.logChangedRows {
                try database.execute(statement)
                updates += database.changes
            }
        }
        return (inserts, deletes, updates)
    }

    /// Records every live row's checksum afresh, after its columns changed.
    private func recomputeChecksums(of table: TableInfo) throws {
        let update = try database.statement(RowChecksum.update(table))
        for row in try database.rows(RefreshSQL.liveKeys, .integer(Int64(table.tid))) {
            try recordChecksum(of: try row.value("pk"), in: table, with: update)
        }
    }

    /// Moves a table's metadata to a new primary key: each live row's entries (its clocks,
    /// origin and sequence numbers) follow it to its new key, computed from the old key's
    /// columns where the rebuilt table still has them; every replica that makes the same
    /// migration moves them alike. Deletions recorded under the old key are forgotten (no
    /// replica can match them any more); rows that cannot be matched are captured afresh.
    private func rekey(_ table: TableInfo, from oldKey: [String], declared: DeclaredTable) throws {
        let present = Set(declared.columns.map(\.name))
        let alias = quoteIdentifier("_sqsync_t")
        let tid = SQLValue.integer(Int64(table.tid))
        try database.execute(RekeySQL.createMap)
        if !oldKey.isEmpty && oldKey.allSatisfy(present.contains) {
            let old = MetadataKey.sql(TriggerSQL.storedKey(oldKey.map { "\(alias).\(quoteIdentifier($0))" }))
            let new = MetadataKey.sql(TriggerSQL(table: table).keyExpression(alias))
            try database.execute(
                "INSERT OR IGNORE INTO temp.\"_sqsync_rekey\" (\"old\", \"new\") SELECT \(old), \(new) FROM \(quoteIdentifier(table.name)) AS \(alias)"
            )
        }
        for statement in RekeySQL.move { try database.run(statement, tid) }
        try database.execute(RekeySQL.putBack)
    }

    /// The table a tracked table's triggers now belong to: `ALTER TABLE … RENAME TO` moves
    /// triggers with their table, and their names still carry the old one.
    private func tableHoldingTriggers(of oldName: String) throws -> String? {
        for suffix in ["after_insert", "migrating"] {
            if let table = try database.optionalString(RefreshSQL.triggerTable, .text("_sqsync_\(oldName)_\(suffix)")) {
                return table
            }
        }
        return nil
    }

    /// Recognises columns the migration renamed (SQLite rewrote the triggers' text to name
    /// the new column where the old one was) and marks the ones it dropped.
    private func followColumns(of declared: DeclaredTable, tid: Int, into result: inout RefreshResult) throws {
        let declaredNames = Set(declared.columns.map(\.name))
        var added = declared.columns.filter { column in
            (try? database.scalar(RefreshSQL.columnID, .integer(Int64(tid)), .text(column.name))) == nil
        }
        let triggerText = try database.rows(RefreshSQL.triggersOfTable, .text(declared.name)).map {
            try $0.string("sql")
        }.joined(separator: "\n")
        // After `--before-migration` no trigger names the columns (only its marker is left,
        // naming none): the copy of their values it kept tells a renamed column instead.
        let migrating = try database.int64(RefreshSQL.tableMigrating, .text(declared.name)) == 1
        let recorded = try database.rows(RefreshSQL.liveColumnsWithIDs, .integer(Int64(tid)))
        let recordedKey = try database.rows(RefreshSQL.keyColumns, .integer(Int64(tid))).map { try $0.string("name") }
        for (position, row) in recorded.enumerated() {
            let cid = try row.int("cid"), name = try row.string("name"), isKey = try row.int64("is_pk") > 0
            guard !declaredNames.contains(name) else { continue }
            let renamedTo: Int?
            if migrating {
                renamedTo = try renamedColumn(
                    cid: cid, keyPosition: recordedKey.firstIndex(of: name).map { $0 + 1 }, position: position, among: added,
                    of: declared, tid: tid)
            } else {
                renamedTo = added.firstIndex { column in
                    isKey
                        ? column.primaryKeyPosition > 0 && triggerText.contains("NEW.\(quoteIdentifier(column.name))")
                        : [false, true].contains {
                            triggerText.contains(TriggerSQL.changedTerm(column.name, cid: cid, comparingStorageClass: $0))
                        }
                }
            }
            if let index = renamedTo {
                let newName = added.remove(at: index).name
                try database.run(RefreshSQL.renameColumn, .text(newName), .integer(Int64(tid)), .integer(Int64(cid)))
                result.renamedColumns["\(declared.name).\(name)"] = newName
            } else {
                try database.run(RefreshSQL.dropColumn, .integer(Int64(tid)), .integer(Int64(cid)))
                try database.run(RefreshSQL.dropCellsOfColumn, .integer(Int64(tid)), .integer(Int64(cid)))
                try database.run(CounterSQL.dropCountersOfColumn, .integer(Int64(tid)), .integer(Int64(cid)))
                result.droppedColumns.append("\(declared.name).\(name)")
            }
        }
    }
}

extension Replica {
    /// Which of the columns a migration added is column `cid` renamed, told from the values
    /// `--before-migration` kept: the one holding exactly those values in every row still
    /// there (when some are). A key column (whose values the copy does not hold) is renamed
    /// to the added key column at its place in the key when the rows' recorded keys read the
    /// same through it. With no row to tell (an empty table), the added column at the old
    /// one's place. Nil: dropped.
    fileprivate func renamedColumn(
        cid: Int, keyPosition: Int?, position: Int, among added: [DeclaredTable.Column], of declared: DeclaredTable, tid: Int
    ) throws -> Int? {
        let alias = quoteIdentifier("_sqsync_t")
        let table = quoteIdentifier(declared.name)
        let key = MetadataKey.sql(TriggerSQL.storedKey(declared.primaryKey.map { "\(alias).\(quoteIdentifier($0.name))" }))
        let atOldPlace = { (index: Int) in declared.columns.firstIndex { $0.name == added[index].name } == position }
        if let keyPosition {
            guard let index = added.firstIndex(where: { $0.primaryKeyPosition == keyPosition }) else { return nil }
            let rows = try database.int64("SELECT count(*) FROM \(table)")
            if rows == 0 { return index }
            let matched = try database.int64(
                """
                SELECT count(*) FROM \(table) AS \(alias) CROSS JOIN "_sqsync_rows" AS r ON r."tid" = ?1 AND r."pk" = \(key) AND r."cl" % 2 = 1
                """, .integer(Int64(tid)))
            return matched == rows ? index : nil
        }
        let candidates = added.indices.filter { added[$0].primaryKeyPosition == 0 }
        guard !candidates.isEmpty else { return nil }
        // One pass over the kept values: how many rows join, and how many differ per candidate.
        let differing = candidates.map { "sum(s.\"value\" IS NOT \(alias).\(quoteIdentifier(added[$0].name)))" }
        guard
            let counts = try database.row(
                """
                SELECT count(*) AS "joined", \(differing.enumerated().map { "\($0.element) AS \"d\($0.offset)\"" }.joined(separator: ", "))
                FROM \(table) AS \(alias) CROSS JOIN "_sqsync_snapshot" AS s ON s."tid" = ?1 AND s."cid" = ?2 AND s."pk" = \(key)
                """, .integer(Int64(tid)), .integer(Int64(cid)))
        else { return nil }
        if try counts.int64("joined") == 0 { return candidates.first(where: atOldPlace) }
        let matching = try candidates.enumerated().filter { try counts.int64("d\($0.offset)") == 0 }.map(\.element)
        if matching.count <= 1 { return matching.first }
        return matching.first(where: atOldPlace)
    }
}

/// The statements `refresh` runs on sqsync's own tables.
enum RefreshSQL {
    static let triggersOn = "SELECT name FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = ?"

    static let renameTable = #"UPDATE "_sqsync_tables" SET "name" = ? WHERE "tid" = ?"#
    static let triggerTable = "SELECT tbl_name FROM sqlite_schema WHERE type = 'trigger' AND name = ?"
    static let triggersOfTable = """
        SELECT sql FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = ? AND name LIKE '\\_sqsync\\_%' ESCAPE '\\'
        """
    static let columnID = #"SELECT "cid" FROM "_sqsync_columns" WHERE "tid" = ? AND "name" = ? AND "dropped" = 0"#
    static let liveColumns = #"SELECT "name" FROM "_sqsync_columns" WHERE "tid" = ? AND "dropped" = 0"#
    static let liveColumnsWithIDs = #"SELECT "cid", "name", "is_pk" FROM "_sqsync_columns" WHERE "tid" = ? AND "dropped" = 0 ORDER BY "cid""#
    static let renameColumn = #"UPDATE "_sqsync_columns" SET "name" = ? WHERE "tid" = ? AND "cid" = ?"#
    static let dropColumn = #"UPDATE "_sqsync_columns" SET "dropped" = 1, "is_pk" = 0 WHERE "tid" = ? AND "cid" = ?"#
    static let dropCellsOfColumn = """
        UPDATE "_sqsync_rows" SET "cells" = sqsync_cells_without("cells", "hlc", "site", ?2)
        WHERE "tid" = ?1 AND "cells" IS NOT NULL AND "cells" != x'' AND sqsync_cells_without("cells", "hlc", "site", ?2) IS NOT "cells"
        """
    static let undrop = #"UPDATE "_sqsync_columns" SET "dropped" = 0 WHERE "tid" = ? AND "name" = ?"#
    static let liveKeys = #"SELECT "pk" FROM "_sqsync_rows" WHERE "tid" = ? AND "cl" % 2 = 1"#
    static let markKeyColumns = #"UPDATE "_sqsync_columns" SET "is_pk" = 0 WHERE "tid" = ?"#
    static let setKeyColumn = #"UPDATE "_sqsync_columns" SET "is_pk" = ? WHERE "tid" = ? AND "name" = ?"#
    /// The key as recorded: "is_pk" is the position in the key (1 for every part of keys
    /// recorded before positions were, whose parts then go in column-id order).
    /// A migration prepared and not refreshed: values kept, or a marker (a table with no
    /// non-key value to keep has only that).
    static let migrating = """
        SELECT EXISTS (SELECT 1 FROM "_sqsync_snapshot") OR EXISTS (\(markers))
        """
    static let tableMigrating = "SELECT EXISTS (\(markers) AND tbl_name = ?)"
    private static let markers = """
        SELECT 1 FROM sqlite_schema WHERE type = 'trigger' AND name LIKE '\\_sqsync\\_%\\_migrating' ESCAPE '\\'
        """
    static let keyColumns = """
        SELECT "name" FROM "_sqsync_columns" WHERE "tid" = ? AND "is_pk" > 0 AND "dropped" = 0 ORDER BY "is_pk", "cid"
        """
}

/// Moving a table's metadata from old keys to new ones, both in metadata form (temp."_sqsync_rekey").
enum RekeySQL {
    static let createMap = """
        CREATE TEMP TABLE IF NOT EXISTS "_sqsync_rekey" ("old" NOT NULL PRIMARY KEY, "new" NOT NULL) WITHOUT ROWID
        """

    static let move = [
        """
        CREATE TEMP TABLE "_sqsync_moved_rows" AS
          SELECT r."tid", m."new" AS "pk", r."cl", r."hlc", r."site", r."seq", r."sum", r."cells"
          FROM "_sqsync_rows" r JOIN temp."_sqsync_rekey" m ON m."old" = r."pk" WHERE r."tid" = ?1 AND r."cl" % 2 = 1
        """,
        """
        CREATE TEMP TABLE "_sqsync_moved_counters" AS
          SELECT c."tid", m."new" AS "pk", c."cid", c."site", c."total", c."folded", c."hlc", c."seq"
          FROM "_sqsync_counters" c JOIN temp."_sqsync_rekey" m ON m."old" = c."pk" WHERE c."tid" = ?1
        """,
        """
        CREATE TEMP TABLE "_sqsync_moved_changes" AS
          SELECT c."site", c."seq", c."tid", m."new" AS "pk"
          FROM "_sqsync_changes" c JOIN temp."_sqsync_rekey" m ON m."old" = c."pk" WHERE c."tid" = ?1
        """,
        """
        CREATE TEMP TABLE "_sqsync_moved_reach" AS
          SELECT x."tid", m."new" AS "pk", x."labels"
          FROM "_sqsync_reach" x JOIN temp."_sqsync_rekey" m ON m."old" = x."pk" WHERE x."tid" = ?1
        """,
        """
        CREATE TEMP TABLE "_sqsync_moved_snapshot" AS
          SELECT s."tid", s."cid", m."new" AS "pk", s."value"
          FROM "_sqsync_snapshot" s JOIN temp."_sqsync_rekey" m ON m."old" = s."pk" WHERE s."tid" = ?1
        """,
        #"DELETE FROM "_sqsync_rows" WHERE "tid" = ?1"#,
        #"DELETE FROM "_sqsync_reach" WHERE "tid" = ?1"#,
        #"DELETE FROM "_sqsync_counters" WHERE "tid" = ?1"#,
        #"DELETE FROM "_sqsync_changes" WHERE "tid" = ?1"#,
        #"DELETE FROM "_sqsync_snapshot" WHERE "tid" = ?1"#,
    ]

    static let putBack = """
        INSERT OR IGNORE INTO "_sqsync_rows" SELECT * FROM temp."_sqsync_moved_rows";
        INSERT OR IGNORE INTO "_sqsync_counters" SELECT * FROM temp."_sqsync_moved_counters";
        INSERT OR IGNORE INTO "_sqsync_changes" SELECT * FROM temp."_sqsync_moved_changes";
        INSERT OR IGNORE INTO "_sqsync_snapshot" SELECT * FROM temp."_sqsync_moved_snapshot";
        INSERT OR IGNORE INTO "_sqsync_reach" SELECT * FROM temp."_sqsync_moved_reach";
        DROP TABLE temp."_sqsync_moved_rows";
        DROP TABLE temp."_sqsync_moved_counters";
        DROP TABLE temp."_sqsync_moved_changes";
        DROP TABLE temp."_sqsync_moved_snapshot";
        DROP TABLE temp."_sqsync_moved_reach";
        DROP TABLE temp."_sqsync_rekey";
        """
}

/// How `refresh` and `doctor` find writes no trigger captured, as SQL over one table and
/// its metadata. Inserts and deletes compare keys; updates compare each live row's
/// checksum with the one recorded when its values were last captured or applied.
struct ReconcileSQL {
    let table: TableInfo

    private var alias: String { quoteIdentifier("_sqsync_t") }
    /// The row's key as the log holds it, and as the metadata does (``MetadataKey``).
    private var storedKey: String { TriggerSQL(table: table).keyExpression(alias) }
    private var metadataKey: String { MetadataKey.sql(storedKey) }
    private var stamp: String { MetadataSQL.wallClockMilliseconds }

    /// Rows present without a live entry: inserted while no trigger ran.
    var logInserts: String {
        """
        INSERT INTO "_sqsync_log" ("tid", "op", "pk", "stamp")
          SELECT \(table.tid), \(TriggerSQL.Operation.insert), \(storedKey), \(stamp)
          FROM \(quoteIdentifier(table.name)) AS \(alias)
          WHERE NOT EXISTS (SELECT 1 FROM "_sqsync_rows" r
                            WHERE r."tid" = \(table.tid) AND r."pk" = \(metadataKey) AND r."cl" % 2 = 1)
        """
    }

    /// Live entries whose row is gone: deleted while no trigger ran. The table's keys are
    /// gathered once, indexed, so this costs a pass, not a pass per entry.
    var logDeletes: String {
        """
        CREATE TEMP TABLE "_sqsync_present" ("pk" PRIMARY KEY) WITHOUT ROWID;
        INSERT OR IGNORE INTO temp."_sqsync_present" SELECT \(metadataKey) FROM \(quoteIdentifier(table.name)) AS \(alias);
        INSERT INTO "_sqsync_log" ("tid", "op", "pk", "stamp")
          SELECT \(table.tid), \(TriggerSQL.Operation.delete), sqsync_stored_key(r."pk"), \(stamp)
          FROM "_sqsync_rows" r
          WHERE r."tid" = \(table.tid) AND r."cl" % 2 = 1
            AND NOT EXISTS (SELECT 1 FROM temp."_sqsync_present" p WHERE p."pk" = r."pk")
            AND NOT EXISTS (SELECT 1 FROM "_sqsync_ghosts" g WHERE g."tid" = r."tid" AND g."pk" = r."pk");
        """
    }

    static let forgetPresent = #"DROP TABLE temp."_sqsync_present""#

    /// Live rows whose values no longer match the checksum recorded when sqsync last
    /// captured or applied them: every column outside the key is logged as updated (the
    /// checksum covers the row, not each column). Rows without a checksum are left alone.
    var logChangedRows: [String] {
        let nonKey = table.columns.filter { !$0.isPrimaryKey }
        let words = Dictionary(grouping: nonKey) { TriggerSQL.Operation.word(of: $0.cid) }
        return words.sorted { $0.key < $1.key }.map { word, columns in
            let mask = columns.reduce(Int64(0)) { $0 | (Int64(1) << Int64(TriggerSQL.Operation.bit(of: $1.cid))) }
            return """
                INSERT INTO "_sqsync_log" ("tid", "op", "pk", "mask", "stamp")
                  SELECT \(table.tid), \(TriggerSQL.Operation.updateBase + word), sqsync_stored_key(r."pk"), \(mask), \(stamp)
                  FROM \(quoteIdentifier(table.name)) AS \(alias)
                  CROSS JOIN "_sqsync_rows" r ON r."tid" = \(table.tid) AND r."pk" = \(metadataKey) AND r."cl" % 2 = 1
                  WHERE r."sum" IS NOT NULL AND r."sum" != \(RowChecksum.of(table, alias: alias))
                """
        }
    }

    /// Values that differ from the copy `prepareMigration()` kept: changed while no trigger
    /// ran. Without such a copy (a table restored or rebuilt without it) nothing is logged.
    func logUpdates(of column: ColumnInfo) -> String {
        let value = "\(alias).\(quoteIdentifier(column.name))"
        return """
            INSERT INTO "_sqsync_log" ("tid", "op", "pk", "mask", "stamp")
              SELECT \(table.tid), \(TriggerSQL.Operation.updateBase + TriggerSQL.Operation.word(of: column.cid)), \(storedKey),
                     \(Int64(1) << Int64(TriggerSQL.Operation.bit(of: column.cid))), \(stamp)
              FROM \(quoteIdentifier(table.name)) AS \(alias)
              CROSS JOIN "_sqsync_snapshot" s ON s."tid" = \(table.tid) AND s."cid" = \(column.cid) AND s."pk" = \(metadataKey)
              WHERE s."value" IS NOT \(value) OR typeof(s."value") != typeof(\(value))
            """
    }
}

/// The copy of tracked values that `prepareMigration()` keeps until `refresh()`.
struct SnapshotSQL {
    let table: TableInfo

    static let forget = #"DELETE FROM "_sqsync_snapshot" WHERE "tid" = ?"#
    static let exists = #"SELECT EXISTS (SELECT 1 FROM "_sqsync_snapshot" WHERE "tid" = ?)"#

    func keep(_ column: ColumnInfo) -> String {
        let alias = quoteIdentifier("_sqsync_t")
        return """
            INSERT INTO "_sqsync_snapshot" ("tid", "cid", "pk", "value")
              SELECT \(table.tid), \(column.cid), \(MetadataKey.sql(TriggerSQL(table: table).keyExpression(alias))),
                     \(alias).\(quoteIdentifier(column.name))
              FROM \(quoteIdentifier(table.name)) AS \(alias)
            """
    }
}

extension Replica {
    /// The application's schema version, `PRAGMA user_version`, which its migrations set.
    public func schemaVersion() throws -> Int64 {
        try database.int64("PRAGMA user_version")
    }

    func isDroppedColumn(_ name: String, of tid: Int) throws -> Bool {
        try database.int64(
            #"SELECT EXISTS (SELECT 1 FROM "_sqsync_columns" WHERE "tid" = ? AND "name" = ? AND "dropped" = 1)"#,
            .integer(Int64(tid)), .text(name)) == 1
    }
}
