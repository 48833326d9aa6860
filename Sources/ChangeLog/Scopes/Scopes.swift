import FoundationEssentials
import Glibc
import SQLiteDatabase

/// An admin statement as a replica keeps it, after its signature and signer were checked.
public struct StoredAdminStatement: Sendable, Equatable {
    /// SHA-256 of the signed message, first 16 bytes: names it in segments.
    public var id: [UInt8]
    /// Unix time in milliseconds the admin gave it: statements replay in (issued, id) order.
    public var issued: Int64
    public var act: AdminAct
    /// The message and its signature, as carried in bundles.
    public var signed: [UInt8]

    public init(id: [UInt8], issued: Int64, act: AdminAct, signed: [UInt8]) {
        self.id = id
        self.issued = issued
        self.act = act
        self.signed = signed
    }
}

extension Replica {
    /// Every admin statement held here, in the order they replay.
    public func adminStatements() throws -> [StoredAdminStatement] {
        try database.rows(ScopeSQL.statements).map { row in
            StoredAdminStatement(
                id: try row.blob("id"), issued: try row.int64("issued"),
                act: try JSONDecoder().decode(AdminAct.self, from: Data(try row.string("act").utf8)), signed: try row.blob("signed"))
        }
    }

    /// Keeps statements whose signatures the caller checked; when any is new, applies what the
    /// statements now say (``applyAdminRules()``). Returns the number new here.
    @discardableResult
    public func addAdminStatements(_ statements: [StoredAdminStatement]) throws -> Int {
        var added = 0
        for statement in statements {
            let act = String(decoding: try JSONEncoder().encode(statement.act), as: UTF8.self)
            try database.run(
                ScopeSQL.insertStatement, .blob(statement.id), .integer(statement.issued), .text(act), .blob(statement.signed))
            added += database.changes
        }
        if added > 0 { try applyAdminRules() }
        return added
    }

    /// Keeps a statement this replica's admin key just signed. Holding it starts a new epoch,
    /// numbered as a change of this replica's (``applyAdminRules()``): every peer then lacks
    /// something of it, so the next export or sync carries the statement to them, and relays
    /// pass it on.
    public func issueAdminStatement(_ statement: StoredAdminStatement) throws {
        try refuseDuringMigration("an admin statement")
        try database.inTransaction(immediate: true) { _ = try addAdminStatements([statement]) }
    }

    /// Starts a new life, as this replica's own write, for every row here whose label was
    /// outside `before` and is inside `after` (nil: every label): a replica whose scope grew
    /// receives those rows whole with the next export, as it does a row moved to its labels.
    /// Values stay as they are. Returns the rows.
    @discardableResult
    public func startNewLives(outside before: [String], inside after: [String]?) throws -> Int {
        // New lives no grant check saw would be denied elsewhere: a restricted replica does not.
        guard try !adminRules().isRestricted(knowledgeID) else { return 0 }
        return try database.inTransaction(immediate: true) {
            try fold()
            var rows = 0
            let json = { (labels: [String]) in String(decoding: try JSONEncoder().encode(labels), as: UTF8.self) }
            for table in try trackedTables(skippingMissing: true) where table.label != nil {
                try database.run(ScopeSQL.logNewLives(table), .text(try json(before)), after.map { .text(try json($0)) } ?? .null)
                rows += database.changes / 2
            }
            try fold()
            return rows
        }
    }

    /// Starts a new life, as this replica's own write, of every row of `table` here whose
    /// label under `previous` (the table's label expression before a new one) differs from its
    /// label now: a reader of its new label never received it, and receives it whole with the
    /// next export, as it does a row moved to its labels. Returns the rows.
    @discardableResult
    public func startNewLives(ofRowsRelabelledFrom previous: String, in table: String) throws -> Int {
        guard try !adminRules().isRestricted(knowledgeID) else { return 0 }
        return try database.inTransaction(immediate: true) {
            try fold()
            guard let info = try trackedTables(skippingMissing: true).first(where: { $0.name == table }), info.label != nil
            else { return 0 }
            try database.execute(ScopeSQL.logNewLives(info, relabelledFrom: previous))
            let rows = database.changes / 2
            try fold()
            return rows
        }
    }

    /// Starts a new life, as this replica's own write, of each row given (table, key) that
    /// is here: after a merge that changed their labels (``ChangeMerger/relabelled``).
    public func startNewLives(of rows: [(table: String, key: [SQLValue])]) throws {
        try announce(rows, ScopeSQL.logNewLife)
    }

    /// Starts a new life of each row given that is here, above the causal length a denied
    /// change gave it, to undo that change wherever it was taken
    /// (``ChangeMerger/undoneByNewLife``). A replica with a scope does so too: it holds such a
    /// row whole, as it is here, and may be the only one to hold the evidence that denied it.
    /// The row's own length is raised first (it stays alive here), so the new life is above
    /// both; a denied length at the top of the range cannot be passed, and is left.
    func startNewLives(undoing rows: [(table: String, key: [SQLValue], above: Int64)]) throws {
        guard !rows.isEmpty else { return }
        let rules = try adminRules()
        guard !rules.isRestricted(knowledgeID) else { return }
        let tables = Dictionary(try trackedTables(skippingMissing: true).map { ($0.name, $0) }) { first, _ in first }
        try database.inTransaction {
            for (name, key, above) in rows where above < RowChange.maxCausalLength - 2 {
                guard let table = tables[name], key.count == table.primaryKey.count else { continue }
                try database.run(ScopeSQL.raiseLiveLength(table), key + [.integer(above | 1)])
                try database.run(ScopeSQL.logNewLife(table), key)
            }
            try fold()
        }
    }

    /// Ends each new row given, which a denied life made and which is held nowhere here, with
    /// a deletion of this replica's own above the life (``ChangeMerger/deniedNewRows``): the
    /// row stays at its writer and wherever it was taken (a replica that lacked the evidence
    /// that denies it), and the deletion wins there whatever the clocks say. Its reach is the
    /// life's label (under this replica's expression and its writer's), so it reaches those
    /// readers and tells the key to no other scope. A key with a live entry here (a ghost) is
    /// left; a deletion below keeps its reach, joined with the life's.
    func endDeniedNewRows(_ rows: [DeniedNewRow]) throws {
        guard !rows.isEmpty else { return }
        guard !(try adminRules()).isRestricted(knowledgeID) else { return }
        let tables = Dictionary(try trackedTables(skippingMissing: true).map { ($0.name, $0) }) { first, _ in first }
        let reaches = try ReachStatements(database)
        try database.inTransaction {
            for row in rows where row.above < RowChange.maxCausalLength - 1 {
                guard let table = tables[row.table], row.key.count == table.primaryKey.count else { continue }
                let key = try metadataKey(row.key)
                let tid = SQLValue.integer(Int64(table.tid))
                let hadEntry = try database.optionalInt64(ScopeSQL.entryLength, tid, key) != nil
                try database.run(ScopeSQL.deletionAbove, tid, key, .integer(row.above + 1), .integer(Int64(site)))
                guard database.changes > 0 else { continue }
                if table.label != nil {
                    // A deletion below it held the row's reach: it stays, with the life's.
                    let reach = hadEntry ? try reaches.reach(tid: table.tid, key: key).joined(row.reach) : row.reach
                    try reaches.record(reach, tid: table.tid, key: key)
                }
                try database.run(ScopeSQL.logDeletion(table), row.key)
            }
            try fold()
        }
    }

    /// Announces again, as this replica's own deletion, each row given (table, key) that is
    /// deleted here: readers the deletion's origin did not reach may hold the row
    /// (``ChangeMerger/deletedAgain``). The row's length stays; its deletion's stamp becomes
    /// this replica's, which changes nothing where it arrives but the stamp.
    public func announceDeletions(of rows: [(table: String, key: [SQLValue])]) throws {
        try announce(rows, ScopeSQL.logDeletion)
    }

    /// Whether this replica may announce rows as its own writes: only one that holds every row
    /// (no scope) knows a merged row's state for certain, and one whose grants restrict it
    /// leaves that to others, whose announcements no grant can deny.
    public func holdsEveryRow() throws -> Bool {
        let rules = try adminRules()
        return rules.scope(of: knowledgeID) == nil && !rules.isRestricted(knowledgeID)
    }

    /// Logs, as this replica's own changes, what `logging` writes for each row, and folds
    /// (``holdsEveryRow()``).
    private func announce(_ rows: [(table: String, key: [SQLValue])], _ logging: (TableInfo) -> String) throws {
        guard !rows.isEmpty, try holdsEveryRow() else { return }
        let tables = Dictionary(try trackedTables(skippingMissing: true).map { ($0.name, $0) }) { first, _ in first }
        try database.inTransaction {
            for (name, key) in rows {
                guard let table = tables[name], key.count == table.primaryKey.count else { continue }
                try database.run(logging(table), key)
            }
            try fold()
        }
    }

    /// The labels, scopes and grants every statement held here makes.
    public func adminRules() throws -> AdminRules {
        AdminRules(acts: try adminStatements().map(\.act))
    }

    /// The rules only the statements `ids` make (the set another replica's changes were made
    /// under); nil when one of them is not held here.
    public func adminRules(namedBy ids: [[UInt8]]) throws -> AdminRules? {
        AdminRules(named: ids, among: try adminStatements())
    }

    /// What `origin` named for its latest changes merged here: through `last`, under the
    /// statements `ids`. Its later changes must name at least those.
    public func adminClaim(of origin: String) throws -> (last: Int64, ids: [[UInt8]])? {
        guard let row = try database.row(ScopeSQL.claim, .text(origin)) else { return nil }
        return (try row.int64("last"), ScopeSQL.ids(joined: try row.blob("statements")))
    }

    public func recordAdminClaim(of origin: String, last: Int64, ids: [[UInt8]]) throws {
        let site = try siteNumber(for: origin, name: nil)
        try database.run(ScopeSQL.recordClaim, .integer(Int64(site)), .integer(last), .blob(ScopeSQL.joined(ids)))
    }

    /// The labels this replica receives; nil: every row.
    public func ownScope() throws -> [String]? {
        try adminRules().scope(of: knowledgeID)
    }

    /// The statements this replica's own changes after each sequence number were made under,
    /// oldest first.
    public func adminEpochs() throws -> [(afterSeq: Int64, ids: [[UInt8]])] {
        try database.rows(ScopeSQL.epochs).map { row in
            (try row.int64("after_seq"), ScopeSQL.ids(joined: try row.blob("statements")))
        }
    }

    /// Makes the replica follow its statements: each table's label and this replica's grants
    /// go into the triggers (and an index on the label), a new epoch starts for its own
    /// changes, and rows that left its scope leave its tables.
    func applyAdminRules() throws {
        try fold()
        let rules = try adminRules()
        let me = knowledgeID
        var relabelled: [TableInfo] = []
        for table in try trackedTables(skippingMissing: true) {
            let label = rules.labels[table.name]
            let grants = rules.grants(of: me, on: table.name)
            guard label != table.label || grants != table.grants else { continue }
            let grantsText = try grants.map { String(decoding: try JSONEncoder().encode($0), as: UTF8.self) }
            try database.run(
                ScopeSQL.setTableRules, label.map(SQLValue.text) ?? .null, grantsText.map(SQLValue.text) ?? .null,
                .integer(Int64(table.tid)))
            if label != table.label {
                try database.execute("DROP INDEX IF EXISTS \(ScopeSQL.labelIndex(table.name))")
                if let label {
                    do {
                        try database.execute(
                            "CREATE INDEX \(ScopeSQL.labelIndex(table.name)) ON \(quoteIdentifier(table.name)) (\(ScopeSQL.labelValue(label)))")
                    } catch let error as SQLiteError {
                        // A column this replica does not have yet: as with a bundle from a newer
                        // schema, the statement waits for the migration.
                        throw MergeHeld(
                            HoldReason(
                                .labelNotApplicable(table: table.name),
                                "\(path): the label of \(table.name), \(label), does not apply here (\(error.message))"))
                    }
                }
            }
            var updated = table
            updated.label = label
            updated.grants = grants
            if label != table.label { try reachRowsHeld(in: updated, labelledBefore: table.label) }
            try installTriggers(for: updated)
            if label != nil && label != table.label { relabelled.append(updated) }
        }
        // This replica's own changes made before it knew the label went as plain updates: a
        // reader of a label that a row entered by one of them would get only that column. Those
        // its peers still lack become new lives, which carry the whole row.
        if !relabelled.isEmpty {
            try database.execute(ScopeSQL.createUndelivered)
            try database.execute(#"DELETE FROM temp."_sqsync_undelivered""#)
            try database.run(ScopeSQL.collectUndelivered, .integer(Int64(site)))
            for table in relabelled { try database.execute(ScopeSQL.logNewLivesOfUndelivered(table)) }
            try fold()
        }
        let ids = try adminStatements().map(\.id).sorted { $0.lexicographicallyPrecedes($1) }
        if try adminEpochs().last?.ids != ids {
            try database.run(ScopeSQL.startEpoch, .blob(ScopeSQL.joined(ids)))
            try recordOwnStatementsNamed(ids)
            // The statements held now bind this replica's later changes wherever they arrive:
            // a change of its own without rows, in the new epoch, makes that word signed
            // evidence that travels as its changes do (through relays, digests and sticks), and
            // every receiver must merge it before any later change of this replica's. A key
            // taken after it cannot shed them (docs/SCOPES.md, "What a stolen key can still do").
            try database.run(ScopeSQL.numberStatement)
        }
        try removeRowsOutOfScope()
    }

    /// Removes from the tables, without a tombstone, the rows whose label is outside this
    /// replica's scope, except those with a change of its own that a live peer still lacks
    /// (they go once delivered). Their entries stay: a stale copy cannot come back, and a new
    /// life that brings the row back into scope inserts it whole. Returns the rows removed.
    @discardableResult
    public func removeRowsOutOfScope() throws -> Int {
        guard let scope = try ownScope() else { return 0 }
        return try database.inTransaction {
            // Writes still in the log are not numbered yet: they must count as undelivered.
            try fold()
            return try removeRows(outside: scope)
        }
    }

    private func removeRows(outside scope: [String]) throws -> Int {
        let labelled = try trackedTables(skippingMissing: true).filter { $0.label != nil }
        guard !labelled.isEmpty else { return 0 }
        let scopeJSON = String(decoding: try JSONEncoder().encode(scope), as: UTF8.self)
        try database.execute(ScopeSQL.createUndelivered)
        try database.execute(#"DELETE FROM temp."_sqsync_undelivered""#)
        try database.run(ScopeSQL.collectUndeliveredToVouched, .integer(Int64(site)))
        var removed = 0
        // The app's triggers run (its derived tables follow); sqsync's own log rows of these
        // deletes are dropped, and its grant triggers stand aside while "applying" is set.
        let lastLogRow = try database.int64(MergeSQL.lastLogRow)
        try database.execute(MergeSQL.startApplying)
        for table in labelled {
            // A ghost whose key is back in the table (a new row under it) is no ghost.
            try database.execute(ScopeSQL.forgetGhostsBack(table))
            try database.run(ScopeSQL.markOutOfScope(table), .text(scopeJSON))
            try database.run(ScopeSQL.removeOutOfScope(table), .text(scopeJSON))
            removed += database.changes
            // Only the log rows of these removals: what the app's triggers wrote to other
            // tracked tables is a local change like any other.
            try database.run(ScopeSQL.forgetRemovalLogRows, .integer(lastLogRow), .integer(Int64(table.tid)))
        }
        try database.execute(MergeSQL.stopApplying)
        return removed
    }

    /// Refuses a label that is not an expression over the table's own columns (an empty one
    /// removes the label). A label read from another table would change without the row
    /// changing, and no replica could tell its rows moved.
    public func checkLabel(_ expression: String, of table: String) throws {
        guard try trackedTableNames().contains(table) else {
            throw ChangeLogError(.noSuchTable, "\(path): table \(table) is not tracked")
        }
        guard !expression.isEmpty else { return }
        guard AdminAct.isAcceptableLabel(expression) else {
            throw ChangeLogError(
                .usage,
                "\(path): a label is one expression over \(table)'s own columns, without a subquery, comment, `;`, RAISE, ATTACH or PRAGMA"
            )
        }
        do {
            _ = try database.rows(LabelCheckSQL.readLabel(expression, of: table))
        } catch let error as SQLiteError {
            throw ChangeLogError(.usage, "\(path): \(expression) is not an expression over \(table)'s columns (\(error.message))")
        }
    }
}

extension TableInfo {
    /// The columns the label expression reads, found by name (as an identifier, quoted or
    /// not): what a reader outside the row's scope is sent of a row, so that it can tell the
    /// row left (docs/SCOPES.md).
    public var labelColumns: [ColumnInfo] {
        guard let label else { return [] }
        let text = Array(label.lowercased().utf8)
        // As the pattern `(^|[^A-Za-z0-9_$])NAME($|[^A-Za-z0-9_$])` read it: any other byte ends a name.
        let isNamePart: (UInt8) -> Bool = { byte in
            byte == UInt8(ascii: "_") || byte == UInt8(ascii: "$")
                || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
        }
        return columns.filter { column in
            let name = Array(column.name.lowercased().utf8)
            guard !name.isEmpty, text.count >= name.count else { return false }
            return (0...(text.count - name.count)).contains { start in
                text[start..<start + name.count].elementsEqual(name)
                    && (start == 0 || !isNamePart(text[start - 1]))
                    && (start + name.count == text.count || !isNamePart(text[start + name.count]))
            }
        }
    }
}

/// The SQL of labels, scopes and grants, in one place.
enum ScopeSQL {
    /// Statement ids as a blob keeps them: sorted, 16 bytes each, joined.
    static func joined(_ ids: [[UInt8]]) -> [UInt8] { ids.sorted { $0.lexicographicallyPrecedes($1) }.flatMap { $0 } }

    static func ids(joined bytes: [UInt8]) -> [[UInt8]] {
        stride(from: 0, to: bytes.count, by: 16).map { Array(bytes[$0..<min($0 + 16, bytes.count)]) }
    }

    static let statements = #"SELECT "id", "issued", "act", "signed" FROM "_sqsync_admin" ORDER BY "issued", "id""#

    static let insertStatement = """
        INSERT OR IGNORE INTO "_sqsync_admin" ("id", "issued", "act", "signed") VALUES (?, ?, ?, ?)
        """

    /// A change of this replica's without rows: what it numbers is the epoch it starts.
    static let numberStatement = """
        UPDATE "_sqsync_replica" SET "seq" = "seq" + 1, "hlc" = max("hlc" + 1, \(MetadataSQL.wallClockMilliseconds))
        """

    static let claim = """
        SELECT c."last", c."statements" FROM "_sqsync_admin_claims" c JOIN "_sqsync_sites" s ON s."site" = c."site"
        WHERE s."knowledge_id" = ?
        """

    static let recordClaim = """
        INSERT INTO "_sqsync_admin_claims" ("site", "last", "statements") VALUES (?1, ?2, ?3)
        ON CONFLICT ("site") DO UPDATE SET "last" = excluded."last", "statements" = excluded."statements"
        WHERE excluded."last" > "last"
        """

    static let tableRules = #"SELECT "label", "grants" FROM "_sqsync_tables" WHERE "tid" = ?"#

    static let setTableRules = #"UPDATE "_sqsync_tables" SET "label" = ?, "grants" = ? WHERE "tid" = ?"#

    static let epochs = #"SELECT "after_seq", "statements" FROM "_sqsync_admin_epochs" ORDER BY "after_seq""#

    /// Own changes after the current sequence number are made under the statements ?1.
    static let startEpoch = """
        INSERT OR REPLACE INTO "_sqsync_admin_epochs" ("after_seq", "statements")
        VALUES ((SELECT "seq" FROM "_sqsync_replica"), ?1)
        """

    /// A row's label as every comparison uses it: the expression's value as text, so that
    /// `region_id` labels compare with the labels a scope names.
    static func labelValue(_ expression: String) -> String { "CAST((\(expression)) AS TEXT)" }

    static let anyStatement = #"SELECT EXISTS (SELECT 1 FROM "_sqsync_admin")"#

    static let firstEpoch = #"INSERT INTO "_sqsync_admin_epochs" ("after_seq", "statements") VALUES (0, ?)"#

    static func labelIndex(_ table: String) -> String { quoteIdentifier("_sqsync_\(table)_label") }

    static let createUndelivered = """
        CREATE TEMP TABLE IF NOT EXISTS "_sqsync_undelivered" ("tid" INTEGER NOT NULL, "pk" NOT NULL,
            PRIMARY KEY ("tid", "pk")) WITHOUT ROWID
        """

    /// Rows with a change of this replica's own (?1) that some live peer has not acknowledged.
    static let collectUndelivered = """
        INSERT OR IGNORE INTO temp."_sqsync_undelivered" ("tid", "pk")
          SELECT c."tid", c."pk" FROM "_sqsync_changes" c, "_sqsync_sites" s
          WHERE s."site" = ?1 AND c."site" = ?1 AND c."seq" > coalesce(\(FoldSQL.leastAcknowledged), 0)
        """

    /// The same, as far as peers that ever spoke for themselves here lack them: what keeps a
    /// row that left this replica's scope.
    static let collectUndeliveredToVouched = """
        INSERT OR IGNORE INTO temp."_sqsync_undelivered" ("tid", "pk")
          SELECT c."tid", c."pk" FROM "_sqsync_changes" c, "_sqsync_sites" s
          WHERE s."site" = ?1 AND c."site" = ?1 AND c."seq" > coalesce(\(leastAcknowledgedByVouched), 0)
        """

    /// The least of ?1's own changes every live peer acknowledged, counting only peers that
    /// ever spoke for themselves here (``LifecycleSQL/vouched(_:)``): a replica never seen
    /// signing anything (a clone never deployed, a name in another's envelope) holds no row
    /// that left this replica's scope here for good.
    static let leastAcknowledgedByVouched = """
        (SELECT min(coalesce((SELECT a."seq" FROM "_sqsync_acks" a WHERE a."peer" = p."site" AND a."site" = s."site"), 0))
             FROM "_sqsync_sites" p WHERE p."site" != ?1 AND p."retired" = 0 AND \(LifecycleSQL.vouched("p")))
        """

    /// Rows whose label is not in the scope ?1 (a JSON list) and that have no undelivered
    /// own change.
    private static func outOfScope(_ table: TableInfo) -> String {
        let key = MetadataKey.sql(TriggerSQL(table: table).keyExpression(quoteIdentifier(table.name)))
        return """
            coalesce(\(labelValue(table.label ?? "NULL")) NOT IN (SELECT "value" FROM json_each(?1)), 1)
              AND NOT EXISTS (SELECT 1 FROM temp."_sqsync_undelivered" u WHERE u."tid" = \(table.tid) AND u."pk" = \(key))
            """
    }

    /// Remembers the rows about to leave as ghosts: `refresh` and `doctor` then do not take
    /// their absence for a delete made while no trigger ran.
    static func markOutOfScope(_ table: TableInfo) -> String {
        let key = MetadataKey.sql(TriggerSQL(table: table).keyExpression(quoteIdentifier(table.name)))
        return """
            INSERT OR IGNORE INTO "_sqsync_ghosts" ("tid", "pk", "stored_pk")
              SELECT \(table.tid), \(key), \(TriggerSQL(table: table).keyExpression(quoteIdentifier(table.name))) FROM \(quoteIdentifier(table.name)) WHERE \(outOfScope(table))
            """
    }

    static func removeOutOfScope(_ table: TableInfo) -> String {
        "DELETE FROM \(quoteIdentifier(table.name)) WHERE \(outOfScope(table))"
    }

    /// A delete and an insert of each row whose label is not in ?1 but is in ?2 (NULL: any).
    static func logNewLives(_ table: TableInfo) -> String {
        let label = labelValue(table.label ?? "NULL")
        return logNewLives(
            table,
            where: """
                coalesce(\(label) NOT IN (SELECT "value" FROM json_each(?1)), 0)
                  AND (?2 IS NULL OR \(label) IN (SELECT "value" FROM json_each(?2)))
                """)
    }

    /// A delete and an insert of each row whose label differs under `previous`.
    static func logNewLives(_ table: TableInfo, relabelledFrom previous: String) -> String {
        logNewLives(table, where: "\(labelValue(previous)) IS NOT \(labelValue(table.label ?? "NULL"))")
    }

    /// A delete and an insert of each row of `table` (as `_sqsync_t`) that `condition` picks,
    /// key by key, as the label-move trigger logs them.
    private static func logNewLives(_ table: TableInfo, where condition: String) -> String {
        let alias = quoteIdentifier("_sqsync_t")
        let chosen = """
            SELECT \(TriggerSQL(table: table).keyExpression(alias)) AS "k" FROM \(quoteIdentifier(table.name)) AS \(alias)
            WHERE \(condition)
            """
        return """
            INSERT INTO "_sqsync_log" ("tid", "op", "pk", "stamp")
              SELECT \(table.tid), "op", "k", \(MetadataSQL.logStamp)
              FROM (SELECT "k", \(TriggerSQL.Operation.delete) AS "op", 0 AS "o" FROM (\(chosen))
                    UNION ALL SELECT "k", \(TriggerSQL.Operation.insert), 1 FROM (\(chosen)))
              ORDER BY "k", "o"
            """
    }

    static let markGhost = """
        INSERT OR IGNORE INTO "_sqsync_ghosts" ("tid", "pk", "stored_pk") VALUES (?1, ?2, sqsync_stored_key(?2))
        """

    /// A delete and an insert of each row with an undelivered change of this replica's own.
    static func logNewLivesOfUndelivered(_ table: TableInfo) -> String {
        let key = MetadataKey.sql(TriggerSQL(table: table).keyExpression(quoteIdentifier("_sqsync_t")))
        return logNewLives(
            table, where: #"EXISTS (SELECT 1 FROM temp."_sqsync_undelivered" u WHERE u."tid" = \#(table.tid) AND u."pk" = \#(key))"#)
    }

    /// A delete and an insert of the row whose key columns are ?1, ?2…
    static func logNewLife(_ table: TableInfo) -> String {
        let alias = quoteIdentifier("_sqsync_t")
        let condition = table.primaryKey.enumerated().map { "\(alias).\(quoteIdentifier($0.element.name)) IS ?\($0.offset + 1)" }
            .joined(separator: " AND ")
        return """
            INSERT INTO "_sqsync_log" ("tid", "op", "pk", "stamp")
              SELECT \(table.tid), o."op", \(TriggerSQL(table: table).keyExpression(alias)), \(MetadataSQL.logStamp)
              FROM \(quoteIdentifier(table.name)) AS \(alias),
                   (SELECT \(TriggerSQL.Operation.delete) AS "op", 0 AS "n" UNION ALL SELECT \(TriggerSQL.Operation.insert), 1) AS o
              WHERE \(condition) ORDER BY o."n"
            """
    }

    /// A deletion of the row whose key values are ?1…, logged as the delete trigger would,
    /// while the row is still deleted here (a later life may have arrived meanwhile).
    static func logDeletion(_ table: TableInfo) -> String {
        let key = TriggerSQL.storedKey(table.primaryKey.indices.map { "?\($0 + 1)" })
        return """
            INSERT INTO "_sqsync_log" ("tid", "op", "pk")
              SELECT \(table.tid), \(TriggerSQL.Operation.delete), \(key)
              WHERE EXISTS (SELECT 1 FROM "_sqsync_rows" WHERE "tid" = \(table.tid) AND "pk" = \(MetadataKey.sql(key)) AND "cl" % 2 = 0)
            """
    }

    /// An entry for key ?2 of table ?1, deleted at causal length ?3 (even), where there is
    /// none or only a deletion below it; the fold then stamps the deletion logged after it as
    /// this replica's (site ?4).
    static let entryLength = #"SELECT "cl" FROM "_sqsync_rows" WHERE "tid" = ?1 AND "pk" = ?2"#

    static let deletionAbove = """
        INSERT INTO "_sqsync_rows" ("tid", "pk", "cl", "hlc", "site", "seq") VALUES (?1, ?2, ?3, 0, ?4, 0)
        ON CONFLICT ("tid", "pk") DO UPDATE SET "cl" = excluded."cl", "cells" = NULL
        WHERE "cl" % 2 = 0 AND "cl" < excluded."cl"
        """

    /// The live row's causal length raised to ?(n+1) (odd; n: the key's columns) where it is
    /// lower: a new life logged next starts above a denied one (``startNewLives(undoing:)``).
    static func raiseLiveLength(_ table: TableInfo) -> String {
        let count = table.primaryKey.count
        let key = MetadataKey.sql(TriggerSQL.storedKey((0..<count).map { "?\($0 + 1)" }))
        return """
            UPDATE "_sqsync_rows" SET "cl" = ?\(count + 1)
            WHERE "tid" = \(table.tid) AND "pk" = \(key) AND "cl" % 2 = 1 AND "cl" < ?\(count + 1)
            """
    }

    static let forgetRemovalLogRows = #"DELETE FROM "_sqsync_log" WHERE "id" > ?1 AND "tid" = ?2"#

    static func forgetGhostsBack(_ table: TableInfo) -> String {
        let key = MetadataKey.sql(TriggerSQL(table: table).keyExpression(quoteIdentifier(table.name)))
        return """
            DELETE FROM "_sqsync_ghosts" WHERE "tid" = \(table.tid) AND "pk" IN (SELECT \(key) FROM \(quoteIdentifier(table.name)))
            """
    }

    /// A row back in scope is no ghost.
    static let forgetGhost = #"DELETE FROM "_sqsync_ghosts" WHERE "tid" = ?1 AND "pk" = ?2"#
}

extension AdminRules {
    /// The rules only the statements `ids` make, of those held (`statements`); nil when one
    /// of them is not held.
    init?(named ids: [[UInt8]], among statements: [StoredAdminStatement]) {
        let wanted = Set(ids)
        let named = statements.filter { wanted.contains($0.id) }
        guard named.count == wanted.count else { return nil }
        self.init(acts: named.map(\.act))
    }
}
