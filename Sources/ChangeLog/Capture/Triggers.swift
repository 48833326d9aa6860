import SQLiteDatabase

/// The capture triggers sqsync installs on a tracked table.
///
/// They use only SQL built into SQLite, so that every writer (the app, the `sqlite3` shell,
/// a Python script) is captured without loading sqsync. Each trigger appends one row to
/// `_sqsync_log`, a rowid table, so a write costs one append at the right edge of a B-tree
/// instead of upserts into tables keyed by the row's (often random) key. An update stores
/// which columns changed as a bitmask computed in one expression.
///
/// A log row carries the wall clock (`MetadataSQL.logStamp`); ``Replica/fold()`` folds the log
/// into `_sqsync_rows` (with its column clocks) in bulk before anything reads them, giving each
/// change its hybrid-logical-clock value `max(last + 1, stamp)` in log order and its
/// sequence number, then empties the log, so storage stays bounded.
///
/// A delete's row carries no stamp, so it folds to `last + 1`, and the fold then moves the
/// replica's clock up to the wall clock (`FoldSQL.advanceClock`). Reading the clock is a function
/// call, and a statement whose trigger calls any function may abort halfway, so inside a
/// transaction SQLite opens a statement journal for each such statement and copies every page
/// it touches there first (`sqlite3VdbeAddFunctionCall` marks it). For a delete by key that
/// cost more than the rest of the trigger (docs/PERFORMANCE.md, "Capture"). A delete's clock
/// decides no merge: the causal
/// length settles a delete against inserts and updates, and only concurrent deletes of one life
/// compare clocks, which end the same either way (docs/MERGE_RULES.md).
/// The log statements read no other table: while sqsync applies a peer's changes it turns
/// triggers off on its own connection, or, where the app has triggers of its own that must
/// still run, removes the log rows its writes appended before the import commits
/// (``ChangeMerger``). Only the statements that undo a write a merge policy forbids check
/// `_sqsync_replica.applying`, which is 1 during an import.
struct TriggerSQL {
    /// The version of the SQL below. Replicas whose triggers an older version wrote get them
    /// rewritten when opened (``Replica``), since `doctor` compares them with this text.
    static let version = 10

    let table: TableInfo

    /// Log operations. An update of columns `cid` uses operation `updateBase + (cid - 1) / 62`
    /// and bit `(cid - 1) % 62` of the mask: column ids never change, so log rows written
    /// before a `refresh` still name the right columns after it.
    enum Operation {
        static let insert = 0
        static let delete = 1
        static let updateBase = 2
        /// A counter's delta: "mask" holds the column id, "delta" new − old.
        static let counterDelta = -1
        static let columnsPerMask = 62

        static func word(of cid: Int) -> Int { (cid - 1) / columnsPerMask }
        static func bit(of cid: Int) -> Int { (cid - 1) % columnsPerMask }
    }

    private var quotedTable: String { quoteIdentifier(table.name) }

    func triggerName(_ suffix: String) -> String {
        quoteIdentifier("_sqsync_\(table.name)_after_\(suffix)")
    }

    /// The stored key of the row `alias` (NEW or OLD), as the capture log holds it; the
    /// metadata holds its compact form (``MetadataKey``).
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

    private static let stamp = MetadataSQL.logStamp

    /// Appends one log row; `stamped`: with the wall clock (a delete's goes without, above).
    private func logRow(operation: Int, key: String, stamped: Bool = true) -> String {
        guard stamped else {
            return """
                  INSERT INTO "_sqsync_log" ("tid", "op", "pk")
                    VALUES (\(table.tid), \(operation), \(key));
                """
        }
        return """
              INSERT INTO "_sqsync_log" ("tid", "op", "pk", "stamp")
                VALUES (\(table.tid), \(operation), \(key), \(Self.stamp));
            """
    }

    /// A row that starts with NULL or text in a counter column gets 0 there instead.
    private var counterRepairs: String {
        counterColumns.map { column in
            undo(column, setTo: "0", when: Self.notANumber("NEW", column), kind: ConflictKind.counterNeedsANumber)
        }.joined()
    }

    var insertTrigger: String {
        let repairs = counterRepairs
        return """
            CREATE TRIGGER \(triggerName("insert")) AFTER INSERT ON \(quotedTable)
            BEGIN
            \(repairs)\(logRow(operation: Operation.insert, key: insertedKey))
            END
            """
    }

    /// The inserted row's key as logged. A one-column key may be NULL in a rowid table (an
    /// SQLite quirk); no peer could find such a row, so the write is refused in the same
    /// expression: `coalesce` evaluates `RAISE` only for NULL, and the trigger runs one
    /// statement instead of two (version 9). An abort undoes the whole statement, whatever the
    /// trigger wrote before it included.
    private var insertedKey: String {
        guard table.primaryKey.count == 1 else { return keyExpression("NEW") }
        let message = quoteLiteral("sqsync: table \(table.name) cannot track a row whose primary key is NULL")
        return "coalesce(\(keyExpression("NEW")), RAISE(ABORT, \(message)))"
    }

    /// The kinds of conflict the triggers log when they undo a write a policy forbids.
    public enum ConflictKind {
        public static let counterNeedsANumber = "counter needs a number"
        public static let belowMax = "below max"
        public static let aboveMin = "above min"
    }

    private var counterColumns: [ColumnInfo] { table.columns.filter { !$0.isPrimaryKey && $0.policy == .counter } }

    private static func notANumber(_ alias: String, _ column: ColumnInfo) -> String {
        "typeof(\(alias).\(quoteIdentifier(column.name))) NOT IN ('integer', 'real')"
    }

    /// True when an update would move a max column down or a min column up. NULL counts as no
    /// value, as in SQL's max() and min(): any value replaces it, it never replaces one.
    private static func breaksExtremum(_ column: ColumnInfo) -> String {
        let name = quoteIdentifier(column.name)
        let wrongWay = column.policy == .max ? "<" : ">"
        return "((NEW.\(name) IS NULL AND OLD.\(name) IS NOT NULL) OR coalesce(NEW.\(name) \(wrongWay) OLD.\(name) COLLATE BINARY, 0))"
    }

    /// Puts the column back (to `value`) when `condition` holds, and logs the refused value,
    /// unless sqsync itself is applying a peer's changes.
    private func undo(_ column: ColumnInfo, setTo value: String, when condition: String, kind: String) -> String {
        let name = quoteIdentifier(column.name)
        let keyMatch = table.primaryKey.map { "\(quoteIdentifier($0.name)) IS NEW.\(quoteIdentifier($0.name))" }
            .joined(separator: " AND ")
        let keyText = table.primaryKey.map { "quote(NEW.\(quoteIdentifier($0.name)))" }.joined(separator: " || ', ' || ")
        return """
              UPDATE \(quotedTable) SET \(name) = \(value)
                WHERE \(keyMatch) AND \(condition) AND (SELECT "applying" FROM "_sqsync_replica") = 0;
              INSERT INTO "_sqsync_conflicts" ("kind", "table_name", "pk", "column_name", "lost_value", "lost_site", "lost_hlc")
                SELECT \(quoteLiteral(kind)), \(quoteLiteral(table.name)), \(keyText), \(quoteLiteral(column.name)), NEW.\(name),
                       s."knowledge_id", \(MetadataSQL.wallClockMilliseconds)
                FROM "_sqsync_replica" r JOIN "_sqsync_sites" s ON s."site" = r."site"
                WHERE r."applying" = 0 AND \(condition);

            """
    }

    var deleteTrigger: String {
        """
        CREATE TRIGGER \(triggerName("delete")) AFTER DELETE ON \(quotedTable)
        BEGIN
        \(logRow(operation: Operation.delete, key: keyExpression("OLD"), stamped: false))
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
            \(counterRepairs)\(logRow(operation: Operation.delete, key: keyExpression("OLD")))
            \(logRow(operation: Operation.insert, key: insertedKey))
            END
            """
    }

    /// The non-key columns captured by the mask, by mask word: most tables have one word (up
    /// to 62 columns). Counters are logged as deltas instead.
    private var columnsByWord: [(word: Int, columns: [ColumnInfo])] {
        let columns = table.columns.filter { !$0.isPrimaryKey && $0.policy != .counter }
        return Dictionary(grouping: columns) { Operation.word(of: $0.cid) }
            .sorted { $0.key < $1.key }.map { ($0.key, $0.value.sorted { $0.cid < $1.cid }) }
    }

    /// Bit set for each column whose value changed.
    private static func changedMask(_ columns: [ColumnInfo]) -> String {
        columns.map { column in
            let term = changedTerm(column)
            // A write a max or min column refuses is undone, so it changes nothing.
            return column.policy.isExtremum ? "(\(term) * NOT \(breaksExtremum(column)))" : term
        }.joined(separator: " | ")
    }

    static func changedTerm(_ column: ColumnInfo) -> String {
        changedTerm(column.name, cid: column.cid, comparingStorageClass: column.holdsAnyStorageClass)
    }

    /// One column's bit of the mask. `1 IS 1.0` is true in SQL, so where a column can hold
    /// both the term compares storage classes too: peers must receive the value exactly.
    /// `refresh` looks for the term in installed triggers: SQLite's RENAME COLUMN rewrites the
    /// name in it and leaves the bit, which is the column's id.
    static func changedTerm(_ column: String, cid: Int, comparingStorageClass: Bool) -> String {
        let name = quoteIdentifier(column)
        let storageClass = comparingStorageClass ? " OR typeof(OLD.\(name)) != typeof(NEW.\(name))" : ""
        return "((OLD.\(name) IS NOT NEW.\(name)\(storageClass)) << \(Operation.bit(of: cid)))"
    }

    /// One trigger for every update that keeps the key: it logs the changed columns (mask 0
    /// when a statement wrote the same values again).
    var updateTrigger: String? {
        let words = columnsByWord
        let counters = counterColumns
        guard !words.isEmpty || !counters.isEmpty else { return nil }
        let key = keyExpression("NEW")
        let undoes = table.columns.filter(\.policy.isExtremum).map { column in
            undo(
                column, setTo: "OLD.\(quoteIdentifier(column.name))", when: Self.breaksExtremum(column),
                kind: column.policy == .max ? ConflictKind.belowMax : ConflictKind.aboveMin)
        } + counters.map { column in
            undo(
                column, setTo: "OLD.\(quoteIdentifier(column.name))", when: Self.notANumber("NEW", column),
                kind: ConflictKind.counterNeedsANumber)
        }
        let deltas = counters.map { column in
            let name = quoteIdentifier(column.name)
            return """
                  INSERT INTO "_sqsync_log" ("tid", "op", "pk", "mask", "delta", "stamp")
                    SELECT \(table.tid), \(Operation.counterDelta), \(key), \(column.cid), NEW.\(name) - OLD.\(name), \(Self.stamp)
                    WHERE NOT \(Self.notANumber("NEW", column)) AND NOT \(Self.notANumber("OLD", column))
                      AND \(Self.changedTerm(column)) != 0;
                """
        }
        // The mask is computed once and logged even when 0: skipping such rows would need it a
        // second time (a FROM subquery naming it is worse, a temporary table on every row),
        // and a statement that writes the same values again is rare. The fold skips them.
        let statements = (undoes + deltas).joined(separator: "\n") + words.map { word in
            """
              INSERT INTO "_sqsync_log" ("tid", "op", "pk", "mask", "stamp")
                VALUES (\(table.tid), \(Operation.updateBase + word.word), \(key), \(Self.changedMask(word.columns)), \(Self.stamp));
            """
        }.joined(separator: "\n")
        return """
            CREATE TRIGGER \(triggerName("update")) AFTER UPDATE ON \(quotedTable)
            WHEN \(keyUnchanged)
            BEGIN
            \(statements)
            END
            """
    }

    /// Rows the table held before `track`, logged as inserts of this replica.
    var captureExistingRows: String {
        let alias = quoteIdentifier("_sqsync_t")
        let key = keyExpression(alias)
        return """
            INSERT INTO "_sqsync_log" ("tid", "op", "pk", "stamp")
              SELECT \(table.tid), \(Operation.insert), \(key), \(Self.stamp)
              FROM \(quotedTable) AS \(alias)
              WHERE NOT EXISTS (SELECT 1 FROM "_sqsync_rows" r WHERE r."tid" = \(table.tid) AND r."pk" = \(MetadataKey.sql(key)))
            """
    }

    /// Logs, as local changes, the values a column added by a migration got before
    /// `refresh` installed its trigger (a migration that fills it, say). Values equal to the
    /// column's default are left out: every replica that migrates gets those by itself.
    func backfill(_ column: ColumnInfo, defaultSQL: String?) -> String {
        let alias = quoteIdentifier("_sqsync_t")
        let key = keyExpression(alias)
        return """
            INSERT INTO "_sqsync_log" ("tid", "op", "pk", "mask", "stamp")
              SELECT \(table.tid), \(Operation.updateBase + Operation.word(of: column.cid)), \(key),
                     \(1 << Operation.bit(of: column.cid)), \(Self.stamp)
              FROM \(quotedTable) AS \(alias)
              WHERE \(alias).\(quoteIdentifier(column.name)) IS NOT (\(defaultSQL ?? "NULL"))
            """
    }

    /// Between `refresh --before-migration` and `refresh`, in place of the capture triggers:
    /// it never fires and names no column (so a migration may drop any), but `ALTER TABLE …
    /// RENAME TO` carries it to the table's new name, where `refresh` finds it.
    var migrationMarker: (name: String, sql: String) {
        let name = "_sqsync_\(table.name)_migrating"
        return (name, "CREATE TRIGGER \(quoteIdentifier(name)) AFTER DELETE ON \(quotedTable) WHEN 0 BEGIN SELECT 0; END")
    }

    /// Every trigger for the table, by name (unquoted) → CREATE statement.
    var all: [(name: String, sql: String)] {
        var result = [
            ("_sqsync_\(table.name)_after_insert", insertTrigger),
            ("_sqsync_\(table.name)_after_delete", deleteTrigger),
            ("_sqsync_\(table.name)_after_update_key", keyUpdateTrigger),
        ]
        if let updateTrigger { result.append(("_sqsync_\(table.name)_after_update", updateTrigger)) }
        if let labelMoveTrigger { result.append(("_sqsync_\(table.name)_after_update_label", labelMoveTrigger)) }
        return result + grantTriggers
    }

    // MARK: Labels and grants (docs/SCOPES.md)

    /// The row's label, for the row `alias` (NEW or OLD): the admin's expression over its own
    /// columns, evaluated on them as a one-row table.
    func label(of alias: String) -> String {
        guard let expression = table.label else { return "NULL" }
        let columns = table.columns.map { "\(alias).\(quoteIdentifier($0.name)) AS \(quoteIdentifier($0.name))" }
            .joined(separator: ", ")
        return "(SELECT \(ScopeSQL.labelValue(expression)) FROM (SELECT \(columns)))"
    }

    /// A row that changes label starts a new life, logged as a delete and an insert: it
    /// reaches readers of its new label whole, and readers of the old one see it go.
    var labelMoveTrigger: String? {
        guard table.label != nil else { return nil }
        return """
            CREATE TRIGGER \(quoteIdentifier("_sqsync_\(table.name)_after_update_label")) AFTER UPDATE ON \(quotedTable)
            WHEN \(keyUnchanged) AND \(label(of: "OLD")) IS NOT \(label(of: "NEW"))
            BEGIN
            \(logRow(operation: Operation.delete, key: keyExpression("OLD")))
            \(logRow(operation: Operation.insert, key: keyExpression("NEW")))
            END
            """
    }

    /// SQL true when this replica's grants allow `operation` on the row `alias`; with
    /// `columnFree`, on a row whose label is not known (only a grant for any label covers it).
    private func granted(_ operation: GrantOperations, _ alias: String, columnFree: Bool = false) -> String {
        granted(operation, label: columnFree ? "NULL" : label(of: alias))
    }

    /// SQL true when this replica's grants allow `operation` on a row whose label is `label` (SQL).
    private func granted(_ operation: GrantOperations, label: String) -> String {
        let terms = (table.grants ?? []).filter { $0.operations.contains(operation) }.map { grant in
            grant.labels.isEmpty ? "1" : "coalesce(\(label) IN (\(grant.labels.map(quoteLiteral).joined(separator: ", "))), 0)"
        }
        return terms.isEmpty ? "0" : "(" + terms.joined(separator: " OR ") + ")"
    }

    /// An insert whose key is taken (INSERT OR REPLACE, an upsert) changes that row: it needs
    /// update on the row there and on the new one too. A key this replica holds only as a
    /// ghost (its row left the scope) is another label's row elsewhere, of a label not known
    /// here: only update on any label covers it.
    private func insertGranted(columnFree: Bool = false) -> String {
        if columnFree { return granted(.insert, "NEW", columnFree: true) + " AND " + granted(.update, "NEW", columnFree: true) }
        let keyMatch = table.primaryKey.map { "\(quoteIdentifier($0.name)) IS NEW.\(quoteIdentifier($0.name))" }
            .joined(separator: " AND ")
        let existingLabel = table.label.map { "(SELECT \(ScopeSQL.labelValue($0)) FROM \(quotedTable) WHERE \(keyMatch))" } ?? "NULL"
        let ghost = """
            EXISTS (SELECT 1 FROM "_sqsync_ghosts" WHERE "tid" = \(table.tid) AND "stored_pk" = \(keyExpression("NEW")))
            """
        return """
            \(granted(.insert, "NEW")) AND (NOT EXISTS (SELECT 1 FROM \(quotedTable) WHERE \(keyMatch)) \
            OR (\(granted(.update, label: existingLabel)) AND \(granted(.update, "NEW")))) \
            AND (NOT \(ghost) OR (\(granted(.update, label: "NULL")) AND \(granted(.update, "NEW"))))
            """
    }

    /// What a refused write says: the table, the operation and what the grants allow.
    private func refusal(_ operation: String) -> String {
        let held = (table.grants ?? []).map { grant in
            "\(grant.operations)" + (grant.labels.isEmpty ? "" : " on labels \(grant.labels.joined(separator: ", "))")
        }
        let allowed = held.isEmpty ? "nothing" : held.joined(separator: "; ")
        return quoteLiteral(
            "sqsync: this replica's grants do not allow \(operation) on \(table.name) (granted: \(allowed)); see `sqsync grant`")
    }

    /// With grants, a write they do not allow fails in the writer, whoever writes; a peer's
    /// changes that sqsync applies are judged on import instead.
    var grantTriggers: [(name: String, sql: String)] { grantTriggers(columnFree: false) }

    /// The names of the grant triggers a table with grants has.
    static func grantTriggerNames(of table: String) -> [String] {
        ["insert", "update", "delete"].map { "_sqsync_\(table)_grant_\($0)" }
    }

    /// The grant triggers, `columnFree`: naming no column but the key's, for the time between
    /// `refresh --before-migration` and `refresh`, when a migration may drop or rename any
    /// other column. Rows' labels are not read then: only grants for any label allow a write.
    func grantTriggers(columnFree: Bool) -> [(name: String, sql: String)] {
        guard table.grants != nil else { return [] }
        let notApplying = #"(SELECT "applying" FROM "_sqsync_replica") = 0"#
        let checks: [(String, String, String)] = [
            ("insert", "INSERT", insertGranted(columnFree: columnFree)),
            // A new key is a delete of the old row and an insert of the new one, as peers see it.
            (
                "update", "UPDATE",
                "CASE WHEN \(keyUnchanged) THEN \(granted(.update, "OLD", columnFree: columnFree)) AND \(granted(.update, "NEW", columnFree: columnFree)) "
                    + "ELSE \(granted(.delete, "OLD", columnFree: columnFree)) AND \(insertGranted(columnFree: columnFree)) END"
            ),
            ("delete", "DELETE", granted(.delete, "OLD", columnFree: columnFree)),
        ]
        return zip(checks, Self.grantTriggerNames(of: table.name)).map { check, name in
            let (operation, event, allowed) = check
            return (
                name,
                """
                CREATE TRIGGER \(quoteIdentifier(name)) BEFORE \(event) ON \(quotedTable)
                WHEN \(notApplying) AND NOT (\(allowed))
                BEGIN
                  SELECT RAISE(ABORT, \(refusal(operation)));
                END
                """
            )
        }
    }
}
