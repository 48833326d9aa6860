/// The capture triggers sqsync installs on a tracked table.
///
/// They use only SQL built into SQLite, so that every writer (the app, the `sqlite3` shell,
/// a Python script) is captured without loading sqsync. A change is one upsert of the row's
/// entry in `_sqsync_rows` (insert, delete) or of one column's entry in `_sqsync_cells`
/// (update), so storage stays bounded: entries are replaced in place, never appended.
///
/// A trigger stamps its change with the hybrid logical clock, `max(last clock seen + 1,
/// wall clock ms)`, also kept above the entry it replaces and, for a column, above its
/// row's entry, so a later local change always orders after an earlier one even when the
/// wall clock steps back. It leaves the sequence number 0 ("not numbered yet"):
/// ``Replica/numberPendingChanges()`` numbers pending changes in bulk before anything
/// reads them, which spares every write an update of a shared counter row.
/// While sqsync itself applies a peer's changes, `_sqsync_replica.applying` is 1 and the
/// upserts select nothing.
struct TriggerSQL {
    let table: TableInfo

    private var quotedTable: String { quoteIdentifier(table.name) }

    func triggerName(_ suffix: String) -> String {
        quoteIdentifier("_sqsync_\(table.name)_after_\(suffix)")
    }

    /// The key stored in `_sqsync_rows.pk` for the row `alias` (NEW or OLD).
    func keyExpression(_ alias: String) -> String {
        Self.storedKey(table.primaryKey.map { "\(alias).\(quoteIdentifier($0.name))" })
    }

    /// One-column keys are stored as they are; composite keys as SQL literals joined by
    /// commas. REAL parts use 21 significant digits, which round-trip every double
    /// (SQLite 3.40's quote() keeps 15, which does not).
    static func storedKey(_ parts: [String]) -> String {
        if parts.count == 1 { return parts[0] }
        return parts.map { "CASE typeof(\($0)) WHEN 'real' THEN printf('%!.20e', \($0)) ELSE quote(\($0)) END" }
            .joined(separator: " || ',' || ")
    }

    /// Qualified: some statements also read a user table, which may have an `hlc` or `site`.
    private static let clock = #"max("_sqsync_replica"."hlc" + 1, \#(MetadataSQL.wallClockMilliseconds))"#
    private static let site = #""_sqsync_replica"."site""#

    /// A row starts a new life (insert) or ends one (delete): its causal length moves to the
    /// next odd or even number. A new life also forgets the column entries of the last one.
    private func rowEvent(key: String, alive: Bool) -> String {
        let bump = alive ? #""cl" + ("cl" % 2 = 0)"# : #""cl" + ("cl" % 2)"#
        var sql = """
              INSERT INTO "_sqsync_rows" ("tid", "pk", "cl", "hlc", "site", "seq")
                SELECT \(table.tid), \(key), \(alive ? 1 : 2), \(Self.clock), \(Self.site), 0 FROM "_sqsync_replica" WHERE "applying" = 0
                ON CONFLICT ("tid", "pk") DO UPDATE SET "cl" = \(bump),
                  "hlc" = max(excluded."hlc", "hlc" + 1), "site" = excluded."site", "seq" = 0;
            """
        if alive {
            sql += """

                  DELETE FROM "_sqsync_cells" WHERE "tid" = \(table.tid) AND "pk" = \(key);
                """
        }
        return sql
    }

    var insertTrigger: String {
        """
        CREATE TRIGGER \(triggerName("insert")) AFTER INSERT ON \(quotedTable)
        BEGIN
        \(rowEvent(key: keyExpression("NEW"), alive: true))
        END
        """
    }

    var deleteTrigger: String {
        """
        CREATE TRIGGER \(triggerName("delete")) AFTER DELETE ON \(quotedTable)
        BEGIN
        \(rowEvent(key: keyExpression("OLD"), alive: false))
        END
        """
    }

    private var keyUnchanged: String {
        table.primaryKey.map { "OLD.\(quoteIdentifier($0.name)) IS NEW.\(quoteIdentifier($0.name))" }
            .joined(separator: " AND ")
    }

    /// A key change is a delete of the old key and an insert of the new one.
    var keyUpdateTrigger: String {
        let keyColumns = table.primaryKey.map { quoteIdentifier($0.name) }.joined(separator: ", ")
        return """
            CREATE TRIGGER \(triggerName("update_key")) AFTER UPDATE OF \(keyColumns) ON \(quotedTable)
            WHEN NOT (\(keyUnchanged))
            BEGIN
            \(rowEvent(key: keyExpression("OLD"), alive: false))
            \(rowEvent(key: keyExpression("NEW"), alive: true))
            END
            """
    }

    /// One trigger per column: SQLite then runs only the triggers of the columns an
    /// UPDATE names, and a value written again unchanged costs nothing.
    func columnUpdateTrigger(_ column: ColumnInfo) -> String {
        let name = quoteIdentifier(column.name)
        let key = keyExpression("NEW")
        return """
            CREATE TRIGGER \(triggerName("update_\(column.cid)")) AFTER UPDATE OF \(name) ON \(quotedTable)
            WHEN (OLD.\(name) IS NOT NEW.\(name) OR typeof(OLD.\(name)) != typeof(NEW.\(name))) AND \(keyUnchanged)
            BEGIN
              INSERT INTO "_sqsync_cells" ("tid", "pk", "cid", "hlc", "site", "seq")
                SELECT \(table.tid), \(key), \(column.cid),
                       max(\(Self.clock), coalesce((SELECT r."hlc" + 1 FROM "_sqsync_rows" r WHERE r."tid" = \(table.tid) AND r."pk" = \(key)), 0)),
                       \(Self.site), 0
                FROM "_sqsync_replica" WHERE "applying" = 0
                ON CONFLICT ("tid", "pk", "cid") DO UPDATE SET
                  "hlc" = max(excluded."hlc", "hlc" + 1), "site" = excluded."site", "seq" = 0;
            END
            """
    }

    /// Rows the table held before `track`, as inserts of this replica.
    var captureExistingRows: String {
        let alias = quoteIdentifier("_sqsync_t")
        let key = keyExpression(alias)
        return """
            INSERT INTO "_sqsync_rows" ("tid", "pk", "cl", "hlc", "site", "seq")
              SELECT \(table.tid), \(key), 1, \(Self.clock), \(Self.site), 0
              FROM \(quotedTable) AS \(alias), "_sqsync_replica"
              WHERE NOT EXISTS (SELECT 1 FROM "_sqsync_rows" r WHERE r."tid" = \(table.tid) AND r."pk" = \(key))
            """
    }

    /// Records, as local changes, the values a column added by a migration got before
    /// `refresh` installed its trigger (a migration that fills it, say). Values equal to the
    /// column's default are left out: every replica that migrates gets those by itself.
    func backfill(_ column: ColumnInfo, defaultSQL: String?) -> String {
        let alias = quoteIdentifier("_sqsync_t")
        let key = keyExpression(alias)
        return """
            INSERT INTO "_sqsync_cells" ("tid", "pk", "cid", "hlc", "site", "seq")
              SELECT \(table.tid), \(key), \(column.cid),
                     max(\(Self.clock), coalesce((SELECT r."hlc" + 1 FROM "_sqsync_rows" r WHERE r."tid" = \(table.tid) AND r."pk" = \(key)), 0)),
                     \(Self.site), 0
              FROM \(quotedTable) AS \(alias), "_sqsync_replica"
              WHERE \(alias).\(quoteIdentifier(column.name)) IS NOT (\(defaultSQL ?? "NULL"))
              ON CONFLICT ("tid", "pk", "cid") DO UPDATE SET
                "hlc" = max(excluded."hlc", "hlc" + 1), "site" = excluded."site", "seq" = 0
            """
    }

    /// Every trigger for the table, by name (unquoted) → CREATE statement.
    var all: [(name: String, sql: String)] {
        var result = [
            ("_sqsync_\(table.name)_after_insert", insertTrigger),
            ("_sqsync_\(table.name)_after_delete", deleteTrigger),
            ("_sqsync_\(table.name)_after_update_key", keyUpdateTrigger),
        ]
        for column in table.columns where !column.isPrimaryKey {
            result.append(("_sqsync_\(table.name)_after_update_\(column.cid)", columnUpdateTrigger(column)))
        }
        return result
    }
}
