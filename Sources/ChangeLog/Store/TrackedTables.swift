import FoundationEssentials
import Glibc
import SQLiteDatabase

extension Replica {
    /// The tracked tables with their columns as sqsync recorded them, ordered so that a
    /// table comes after the tables it references (parents before children).
    public func trackedTables() throws -> [TableInfo] { try trackedTables(skippingMissing: false) }

    func trackedTables(skippingMissing: Bool) throws -> [TableInfo] {
        var tables: [TableInfo] = []
        for row in try database.rows(#"SELECT "tid", "name" FROM "_sqsync_tables" ORDER BY "tid""#) {
            let name = try row.string("name")
            guard let table = try trackedTable(tid: try row.int("tid"), name: name) else {
                if skippingMissing { continue }
                throw ChangeLogError(
                    .schemaMismatch, "\(path): tracked table \(name) no longer exists; run `sqsync untrack \(path) \(name)`")
            }
            tables.append(table)
        }
        return try orderedParentsFirst(tables)
    }

    /// One tracked table as sqsync recorded it; nil when the table no longer exists.
    func trackedTable(tid: Int, name: String) throws -> TableInfo? {
        guard let declared = try DeclaredTable.read(name, in: database) else { return nil }
        let ids = try columnIDs(tid: tid)
        let policies = try columnPolicies(tid: tid)
        let columns = declared.columns.compactMap { column -> ColumnInfo? in
            guard let cid = ids[column.name] else { return nil }
            return ColumnInfo(
                cid: cid, name: column.name, primaryKeyPosition: column.primaryKeyPosition, policy: policies[cid] ?? .lww,
                declaredType: column.declaredType)
        }
        var table = TableInfo(tid: tid, name: name, columns: columns)
        try loadRules(into: &table)
        return table
    }

    /// The table's label and this replica's grants on it, as ``applyAdminRules()`` recorded them.
    private func loadRules(into table: inout TableInfo) throws {
        guard let rules = try database.row(ScopeSQL.tableRules, .integer(Int64(table.tid))) else { return }
        table.label = try rules.optionalString("label")
        if let grants = try rules.optionalString("grants") {
            table.grants = try JSONDecoder().decode([TableGrant].self, from: Data(grants.utf8))
        }
    }

    func columnIDs(tid: Int) throws -> [String: Int] {
        var ids: [String: Int] = [:]
        for row in try database.rows(#"SELECT "name", "cid" FROM "_sqsync_columns" WHERE "tid" = ?"#, .integer(Int64(tid))) {
            ids[try row.string("name")] = try row.int("cid")
        }
        return ids
    }

    /// The columns whose merge policy is not the default, by column id.
    func columnPolicies(tid: Int) throws -> [Int: MergePolicy] {
        var policies: [Int: MergePolicy] = [:]
        for row in try database.rows(PolicySQL.policiesOfTable, .integer(Int64(tid))) {
            policies[try row.int("cid")] = MergePolicy(rawValue: try row.string("policy")) ?? .lww
        }
        return policies
    }

    private func orderedParentsFirst(_ tables: [TableInfo]) throws -> [TableInfo] {
        var parents: [String: Set<String>] = [:]
        for table in tables { parents[table.name] = try DeclaredTable.parents(of: table.name, in: database) }
        var ordered: [TableInfo] = []
        var placed: Set<String> = []
        var remaining = tables
        while !remaining.isEmpty {
            let waiting = Set(remaining.map(\.name))
            let ready = remaining.filter { table in
                parents[table.name, default: []].allSatisfy { $0 == table.name || !waiting.contains($0) }
            }
            let next = ready.isEmpty ? [remaining[0]] : ready
            for table in next { ordered.append(table); placed.insert(table.name) }
            remaining.removeAll { placed.contains($0.name) }
        }
        return ordered
    }

    /// User tables that could be tracked: everything but SQLite's and sqsync's own.
    public func userTableNames() throws -> [String] {
        try database.rows(
            """
            SELECT name FROM sqlite_schema WHERE type = 'table'
              AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name NOT LIKE '\\_sqsync\\_%' ESCAPE '\\'
            ORDER BY name
            """
        ).map { try $0.string("name") }
    }

    /// Installs capture triggers on `names`. Rows already in a table become this replica's
    /// changes, so peers receive them with the next export. Returns rows captured per table.
    @discardableResult
    public func track(_ names: [String], allowIntegerPrimaryKey: Bool) throws -> [(table: String, rows: Int)] {
        var declared: [DeclaredTable] = []
        for name in names {
            let checked = try checkTrackable(name, allowIntegerPrimaryKey: allowIntegerPrimaryKey)
            if let refusal = checked.refusal { throw refusal }
            declared.append(checked.table!)
        }
        return try database.inTransaction {
            var captured: [(String, Int)] = []
            for table in declared {
                let info = try register(table)
                try installTriggers(for: info)
                captured.append((table.name, try captureExistingRows(of: info)))
            }
            try fold()
            // A table tracked after the admin labelled it, or granted on it, follows at once.
            if try database.int64(#"SELECT EXISTS (SELECT 1 FROM "_sqsync_admin")"#) == 1 { try applyAdminRules() }
            return captured
        }
    }

    /// The tables `track --all` takes, and those it leaves out with the reason: a table without
    /// a primary key (which no flag makes trackable) does not stop the others. An INTEGER
    /// PRIMARY KEY without `allowIntegerPrimaryKey` still fails the command: that is a choice.
    public func trackableTables() throws -> (tables: [String], leftOut: [ChangeLogError]) {
        var tables: [String] = []
        var leftOut: [ChangeLogError] = []
        for name in try userTableNames() {
            if let refusal = try checkTrackable(name, allowIntegerPrimaryKey: true).refusal {
                leftOut.append(refusal)
            } else {
                tables.append(name)
            }
        }
        return (tables, leftOut)
    }

    /// Tables with a primary key that are not tracked (most often one a migration created):
    /// `status` and `doctor` name them, since nothing else would say they do not sync.
    public func untrackedTablesWithPrimaryKey() throws -> [String] {
        let tracked = Set(try trackedTableNames())
        return try trackableTables().tables.filter { !tracked.contains($0) }.sorted()
    }

    private func checkTrackable(_ name: String, allowIntegerPrimaryKey: Bool) throws -> (table: DeclaredTable?, refusal: ChangeLogError?) {
        guard let table = try DeclaredTable.read(name, in: database), !name.hasPrefix("_sqsync_") else {
            return (nil, ChangeLogError(.noSuchTable, "\(path): no table named \(name)"))
        }
        guard !table.primaryKey.isEmpty else {
            return (
                nil,
                ChangeLogError(
                    .unsupportedTable,
                    "\(path): table \(name) has no primary key; sqsync needs one to match rows across replicas (add a UUID TEXT PRIMARY KEY)"
                )
            )
        }
        if table.hasIntegerPrimaryKey && !allowIntegerPrimaryKey {
            return (
                nil,
                ChangeLogError(
                    .unsupportedTable,
                    "\(path): table \(name) has an INTEGER PRIMARY KEY, which replicas fill with the same local numbers; use UUIDv7 text keys, or pass --allow-integer-pk if every replica hands out distinct keys"
                )
            )
        }
        return (table, nil)
    }

    /// Records the table and gives new columns the next free ids.
    func register(_ table: DeclaredTable) throws -> TableInfo {
        try database.run(#"INSERT INTO "_sqsync_tables" ("name") VALUES (?) ON CONFLICT DO NOTHING"#, .text(table.name))
        let tid = Int(try database.int64(#"SELECT "tid" FROM "_sqsync_tables" WHERE "name" = ?"#, .text(table.name)))
        var ids = try columnIDs(tid: tid)
        let policies = try columnPolicies(tid: tid)
        var nextID = (ids.values.max() ?? 0) + 1
        var columns: [ColumnInfo] = []
        for column in table.columns {
            let cid: Int
            if let existing = ids[column.name] {
                cid = existing
            } else {
                cid = nextID
                nextID += 1
                ids[column.name] = cid
                try database.run(
                    #"INSERT INTO "_sqsync_columns" ("tid", "cid", "name", "is_pk") VALUES (?, ?, ?, ?)"#,
                    .integer(Int64(tid)), .integer(Int64(cid)), .text(column.name),
                    .integer(Int64(column.primaryKeyPosition)))
            }
            columns.append(
                ColumnInfo(
                    cid: cid, name: column.name, primaryKeyPosition: column.primaryKeyPosition, policy: policies[cid] ?? .lww,
                    declaredType: column.declaredType))
        }
        var info = TableInfo(tid: tid, name: table.name, columns: columns)
        try loadRules(into: &info)
        return info
    }

    func installTriggers(for table: TableInfo) throws {
        try dropTriggers(of: table.name)
        for trigger in TriggerSQL(table: table).all { try database.execute(trigger.sql) }
        database.clearStatementCache()
    }

    func dropTriggers(of tableName: String) throws {
        let names = try database.rows(
            "SELECT name FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = ? AND name LIKE '\\_sqsync\\_%' ESCAPE '\\'",
            .text(tableName)
        ).map { try $0.string("name") }
        for name in names { try database.execute("DROP TRIGGER \(quoteIdentifier(name))") }
        database.clearStatementCache()
    }

    /// Rows already in the table become this replica's inserts, logged like the triggers'
    /// changes for ``fold()``.
    private func captureExistingRows(of table: TableInfo) throws -> Int {
        try database.execute(TriggerSQL(table: table).captureExistingRows)
        return database.changes
    }

    /// Removes triggers and metadata of `names`; the tables and their rows stay.
    public func untrack(_ names: [String]) throws {
        let tracked = Set(try trackedTableNames())
        for name in names where !tracked.contains(name) {
            throw ChangeLogError(.noSuchTable, "\(path): table \(name) is not tracked")
        }
        // Untracking drops the grant checks: a restricted replica may only where its grants
        // allow everything on the table anyway.
        let rules = try adminRules()
        for name in names {
            if let grants = rules.grants(of: knowledgeID, on: name),
                !grants.contains(where: { $0.operations == .all && $0.labels.isEmpty })
            {
                throw ChangeLogError(
                    .forbidden,
                    "\(path): this replica's grants restrict table \(name), and untrack would take their checks off; an admin must grant it every operation first (sqsync grant)"
                )
            }
        }
        try database.inTransaction {
            for name in names {
                guard let tid = try database.scalar(#"SELECT "tid" FROM "_sqsync_tables" WHERE "name" = ?"#, .text(name)) else {
                    continue
                }
                try dropTriggers(of: name)
                for metadata in [
                    "_sqsync_log", "_sqsync_changes", "_sqsync_snapshot", "_sqsync_rows", "_sqsync_reach", "_sqsync_counters",
                    "_sqsync_columns", "_sqsync_tables",
                ] {
                    try database.run("DELETE FROM \(quoteIdentifier(metadata)) WHERE \"tid\" = ?", tid)
                }
            }
        }
    }

    public func trackedTableNames() throws -> [String] {
        try database.rows(#"SELECT "name" FROM "_sqsync_tables" ORDER BY "name""#).map { try $0.string("name") }
    }
}
