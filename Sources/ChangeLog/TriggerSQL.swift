/// The capture triggers sqsync installs on a tracked table.
///
/// They use only SQL built into SQLite, so that every writer (the app, the `sqlite3` shell,
/// a Python script) is captured without loading sqsync. Each change bumps the replica's
/// sequence number and hybrid logical clock in `_sqsync_replica`, then records the row's
/// existence (insert, delete) in `_sqsync_rows` or one column's clock in `_sqsync_cells`.
/// Storage stays bounded: entries are replaced in place, never appended.
struct TriggerSQL {
    let table: TableInfo

    private var quotedTable: String { quoteIdentifier(table.name) }

    func triggerName(_ suffix: String) -> String {
        quoteIdentifier("_sqsync_\(table.name)_after_\(suffix)")
    }

    /// The key stored in `_sqsync_rows.pk` for the row `alias` (NEW or OLD).
    func keyExpression(_ alias: String) -> String {
        let parts = table.primaryKey.map { "\(alias).\(quoteIdentifier($0.name))" }
        if parts.count == 1 { return parts[0] }
        return parts.map { "quote(\($0))" }.joined(separator: " || ',' || ")
    }

    private static let silentUnlessApplying =
        #"(SELECT "applying" FROM "_sqsync_replica") = 0"#

    private static let tick = """
        UPDATE "_sqsync_replica" SET "seq" = "seq" + 1,
            "hlc" = max("hlc" + 1, \(MetadataSQL.wallClockMilliseconds));
        """

    /// A row starts a new life (insert) or ends one (delete): set its causal length to the
    /// next odd or even number and forget its column clocks.
    private func rowEvent(key: String, alive: Bool) -> String {
        let bump = alive ? #""cl" + ("cl" % 2 = 0)"# : #""cl" + ("cl" % 2)"#
        return """
              \(Self.tick)
              INSERT INTO "_sqsync_rows" ("tid", "pk", "cl", "hlc", "site", "seq")
                SELECT \(table.tid), \(key), \(alive ? 1 : 2), "hlc", "site", "seq" FROM "_sqsync_replica" WHERE true
                ON CONFLICT ("tid", "pk") DO UPDATE SET "cl" = \(bump),
                  "hlc" = excluded."hlc", "site" = excluded."site", "seq" = excluded."seq";
              DELETE FROM "_sqsync_cells" WHERE "tid" = \(table.tid) AND "pk" = \(key);
            """
    }

    var insertTrigger: String {
        """
        CREATE TRIGGER \(triggerName("insert")) AFTER INSERT ON \(quotedTable)
        WHEN \(Self.silentUnlessApplying)
        BEGIN
        \(rowEvent(key: keyExpression("NEW"), alive: true))
        END
        """
    }

    var deleteTrigger: String {
        """
        CREATE TRIGGER \(triggerName("delete")) AFTER DELETE ON \(quotedTable)
        WHEN \(Self.silentUnlessApplying)
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
            WHEN NOT (\(keyUnchanged)) AND \(Self.silentUnlessApplying)
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
        return """
            CREATE TRIGGER \(triggerName("update_\(column.cid)")) AFTER UPDATE OF \(name) ON \(quotedTable)
            WHEN (OLD.\(name) IS NOT NEW.\(name) OR typeof(OLD.\(name)) != typeof(NEW.\(name)))
              AND \(keyUnchanged) AND \(Self.silentUnlessApplying)
            BEGIN
              \(Self.tick)
              INSERT INTO "_sqsync_cells" ("tid", "pk", "cid", "hlc", "site", "seq")
                SELECT \(table.tid), \(keyExpression("NEW")), \(column.cid), "hlc", "site", "seq" FROM "_sqsync_replica" WHERE true
                ON CONFLICT ("tid", "pk", "cid") DO UPDATE SET
                  "hlc" = excluded."hlc", "site" = excluded."site", "seq" = excluded."seq";
            END
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
