import SQLiteDatabase

/// A column whose merge policy is not the default.
public struct ColumnPolicy: Sendable, Equatable, Codable {
    public var table: String
    public var column: String
    public var policy: MergePolicy

    public init(table: String, column: String, policy: MergePolicy) {
        self.table = table
        self.column = column
        self.policy = policy
    }
}

extension Replica {
    /// Every tracked column whose policy is not `lww`, by table and column name.
    public func policies() throws -> [ColumnPolicy] {
        try database.rows(PolicySQL.nonDefault).map {
            ColumnPolicy(
                table: try $0.string("table_name"), column: try $0.string("column_name"),
                policy: MergePolicy(rawValue: try $0.string("policy")) ?? .lww)
        }
    }

    /// Sets how a column merges, from the next change on: values already there stay as they
    /// are (a counter's current value becomes its base). Pending changes are folded first, so
    /// each is read under the policy it was written under; the triggers are rebuilt to capture
    /// what the new policy needs. Returns false when the column already had that policy.
    @discardableResult
    public func setPolicy(_ policy: MergePolicy, table tableName: String, column columnName: String) throws -> Bool {
        try refuseDuringMigration("setting a merge policy")
        return try database.inTransaction(immediate: true) {
            try fold()
            guard
                let tid = try database.optionalInt64(#"SELECT "tid" FROM "_sqsync_tables" WHERE "name" = ?"#, .text(tableName))
            else {
                throw ChangeLogError(.noSuchTable, "\(path): table \(tableName) is not tracked")
            }
            guard let table = try trackedTable(tid: Int(tid), name: tableName) else {
                throw ChangeLogError(
                    .schemaMismatch, "\(path): tracked table \(tableName) no longer exists; run `sqsync untrack \(path) \(tableName)`")
            }
            guard let column = table.column(named: columnName) else {
                throw ChangeLogError(.noSuchTable, "\(path): table \(tableName) has no tracked column \(columnName)")
            }
            guard !column.isPrimaryKey else {
                throw ChangeLogError(
                    .unsupportedTable, "\(path): \(tableName).\(columnName) is part of the primary key, which always merges as a whole row")
            }
            if column.policy == policy { return false }
            if policy == .counter {
                let bad = try database.int64(PolicySQL.nonNumericCount(tableName, columnName))
                if bad > 0 {
                    throw ChangeLogError(
                        .unsupportedTable,
                        "\(path): \(tableName).\(columnName) holds \(bad) value\(bad == 1 ? "" : "s") that \(bad == 1 ? "is" : "are") not a number (NULL or text); a counter needs INTEGER or REAL values: set them first"
                    )
                }
            }
            if column.policy == .counter {
                // The value stays as it is and travels as a write of this replica, so peers
                // that leave the counter policy too end with one value.
                try database.run(
                    CounterSQL.logValueAsWrite(tid: Int(tid), cid: column.cid), .integer(tid), .integer(Int64(column.cid)))
                try database.run(CounterSQL.dropCountersOfColumn, .integer(tid), .integer(Int64(column.cid)))
            }
            try database.run(PolicySQL.setPolicy, .text(policy.rawValue), .integer(tid), .integer(Int64(column.cid)))
            if let updated = try trackedTable(tid: Int(tid), name: tableName) { try installTriggers(for: updated) }
            return true
        }
    }

    /// Drops the counter entries that their replicas have folded into the value: this
    /// replica's own once every live peer acknowledged them, another replica's once its
    /// signed statement says it folded them and this replica holds what that replica held
    /// when it said so (docs/MERGE_RULES.md). Values do not change. Returns entries dropped.
    func foldCounters() throws -> Int {
        try database.run(CounterSQL.advanceOwnFoldMark, .integer(Int64(site)))
        try database.run(CounterSQL.foldEntries[0], .integer(Int64(site)))
        try database.run(CounterSQL.foldEntries[1], .integer(Int64(site)))
        return database.changes
    }

    /// Up to where this replica folded its own counter entries, for its signed statements.
    public func countersFolded() throws -> Int64 {
        try database.int64(#"SELECT "counters_folded" FROM "_sqsync_sites" WHERE "site" = ?"#, .integer(Int64(site)))
    }

    /// Records what a replica's signed statement says of its counter fold: it folded its
    /// entries up to `folded` when its own sequence number was `at`.
    public func recordCountersFolded(of knowledgeID: String, folded: Int64, at seq: Int64) throws {
        try database.run(CounterSQL.recordFoldMark, .integer(folded), .integer(seq), .text(knowledgeID))
    }
}

/// The SQL of merge policies, in one place.
enum PolicySQL {
    static let nonDefault = """
        SELECT t."name" AS "table_name", c."name" AS "column_name", c."policy"
        FROM "_sqsync_columns" c JOIN "_sqsync_tables" t ON t."tid" = c."tid"
        WHERE c."policy" != 'lww' AND c."dropped" = 0 ORDER BY t."name", c."cid"
        """

    static let policiesOfTable = """
        SELECT "cid", "policy" FROM "_sqsync_columns" WHERE "tid" = ? AND "policy" != 'lww'
        """

    static let setPolicy = #"UPDATE "_sqsync_columns" SET "policy" = ? WHERE "tid" = ? AND "cid" = ?"#

    static func nonNumericCount(_ table: String, _ column: String) -> String {
        "SELECT count(*) FROM \(quoteIdentifier(table)) WHERE typeof(\(quoteIdentifier(column))) NOT IN ('integer', 'real')"
    }
}

/// The SQL of counter entries (`_sqsync_counters`), in one place.
enum CounterSQL {
    /// Entries belong to one life of the row: a new life or a delete drops them.
    static let dropCountersOfRow = #"DELETE FROM "_sqsync_counters" WHERE "tid" = ?1 AND "pk" = ?2"#

    /// Whether a table has counter entries (``TableInfo/mayHaveCounters(in:)``).
    static let tableHasEntries = #"SELECT EXISTS (SELECT 1 FROM "_sqsync_counters" WHERE "tid" = ?)"#

    static let dropCountersOfColumn = #"DELETE FROM "_sqsync_counters" WHERE "tid" = ?1 AND "cid" = ?2"#

    /// The fold adds a local delta (?5) to this replica's (?4) entry; a new entry starts
    /// after what this replica has folded so far.
    static let addOwnDelta = """
        INSERT INTO "_sqsync_counters" ("tid", "pk", "cid", "site", "total", "folded", "hlc", "seq")
        VALUES (?1, ?2, ?3, ?4, ?5, (SELECT "counters_folded" FROM "_sqsync_sites" WHERE "site" = ?4), ?6, ?7)
        ON CONFLICT ("tid", "pk", "cid", "site") DO UPDATE SET
            "total" = "total" + excluded."total", "hlc" = excluded."hlc", "seq" = excluded."seq"
        """

    /// A row's entries: cid, site, total, folded, hlc, seq.
    static let countersOfRow = """
        SELECT "cid", "site", "total", "folded", "hlc", "seq" FROM "_sqsync_counters" WHERE "tid" = ?1 AND "pk" = ?2
        """

    static let entry = """
        SELECT "total", "folded", "hlc", "seq" FROM "_sqsync_counters"
        WHERE "tid" = ?1 AND "pk" = ?2 AND "cid" = ?3 AND "site" = ?4
        """

    static let writeEntry = """
        INSERT OR REPLACE INTO "_sqsync_counters" ("tid", "pk", "cid", "site", "total", "folded", "hlc", "seq")
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
        """

    /// The sum of a cell's entries: what its value holds beyond its base.
    static let sumOfCell = """
        SELECT coalesce(sum("total"), 0) FROM "_sqsync_counters" WHERE "tid" = ?1 AND "pk" = ?2 AND "cid" = ?3
        """

    /// This replica (?1) may fold its entries up to the least any live peer acknowledged of it.
    static let advanceOwnFoldMark = """
        UPDATE "_sqsync_sites" AS s SET "counters_folded" = max(s."counters_folded", coalesce(
            \(FoldSQL.leastAcknowledged), (SELECT "seq" FROM "_sqsync_replica")))
        WHERE s."site" = ?1
        """

    /// Entries that may be folded: their replica folded them (this replica ?1 by its own mark).
    private static let foldable = """
        EXISTS (SELECT 1 FROM "_sqsync_sites" s
                WHERE s."site" = c."site" AND c."seq" <= s."counters_folded"
                  AND (s."site" = ?1 OR s."known_seq" >= s."counters_folded_at"))
        """

    /// Folding adds an entry's total to the cell's folded sum, kept under site 0, so the base
    /// (value − entries − folded sum) stays the same on every replica whatever each has folded.
    static let foldEntries = [
        """
        INSERT INTO "_sqsync_counters" ("tid", "pk", "cid", "site", "total", "folded", "hlc", "seq")
          SELECT c."tid", c."pk", c."cid", 0, sum(c."total"), 0, 0, 0 FROM "_sqsync_counters" c
          WHERE \(foldable) GROUP BY c."tid", c."pk", c."cid"
        ON CONFLICT ("tid", "pk", "cid", "site") DO UPDATE SET "total" = "total" + excluded."total"
        """,
        #"DELETE FROM "_sqsync_counters" AS c WHERE \#(foldable)"#,
    ]

    /// Logs, as a write of this replica, every cell of a column leaving the counter policy
    /// that has entries: its value then travels as a last-writer-wins write.
    static func logValueAsWrite(tid: Int, cid: Int) -> String {
        """
        INSERT INTO "_sqsync_log" ("tid", "op", "pk", "mask", "stamp")
          SELECT DISTINCT ?1, \(TriggerSQL.Operation.updateBase + TriggerSQL.Operation.word(of: cid)), sqsync_stored_key("pk"),
                 \(1 << TriggerSQL.Operation.bit(of: cid)), \(MetadataSQL.wallClockMilliseconds)
          FROM "_sqsync_counters" WHERE "tid" = ?1 AND "cid" = ?2
        """
    }

    static let recordFoldMark = """
        UPDATE "_sqsync_sites" SET "counters_folded" = ?1, "counters_folded_at" = ?2
        WHERE "knowledge_id" = ?3 AND ?1 > "counters_folded"
        """

    /// Whether a table has counter entries the receiver lacks (the export's one-pass check).
    static let tableHasCounterChanges = """
        SELECT EXISTS (SELECT 1 FROM "_sqsync_counters" c LEFT JOIN temp."_sqsync_base" b ON b."site" = c."site"
                       WHERE c."tid" = ?1 AND c."seq" > coalesce(b."seq", 0))
        """
}

extension TableInfo {
    /// False when the table has no counter column and no counter entries (a column that was
    /// a counter may have left some): an ended life then has none to drop.
    func mayHaveCounters(in database: Database) throws -> Bool {
        if columns.contains(where: { $0.policy == .counter }) { return true }
        return try database.int64(CounterSQL.tableHasEntries, .integer(Int64(tid))) != 0
    }
}
