import Foundation

/// A SQLite database that sqsync manages: its identity, its tracked tables and its clock.
/// Not Sendable on purpose: it owns one connection.
public final class Replica {
    public let database: Database
    public let path: String
    /// This replica's row in `_sqsync_sites`.
    public private(set) var site: Int
    public private(set) var knowledgeID: String
    public private(set) var name: String
    /// How many changes a fold writes at a time (``foldBatch``): tests make a few log rows
    /// span many batches.
    var foldBatchSize = Replica.foldBatch

    /// Opens an existing replica; refuses a database that `sqsync init` has not prepared.
    public convenience init(path: String) throws {
        guard FileManager.default.fileExists(atPath: path) else {
            throw ChangeLogError(.noSuchFile, "\(path): no such file")
        }
        let database = try Database(path: path, create: false)
        guard try Self.isInitialized(database) else {
            throw ChangeLogError(.notAReplica, "\(path) is not an sqsync replica; run `sqsync init \(path)` first")
        }
        try self.init(database: database)
    }

    private init(database: Database) throws {
        self.database = database
        self.path = database.path
        try database.useWriteAheadLog()
        try Self.migrate(database)
        guard
            let row = try database.rows(
                """
                SELECT r."site", s."knowledge_id", coalesce(s."name", '') FROM "_sqsync_replica" r
                JOIN "_sqsync_sites" s ON s."site" = r."site"
                """
            ).first
        else { throw ChangeLogError(.notAReplica, "\(database.path): sqsync metadata is damaged (no replica row)") }
        site = Int(row[0].int64Value ?? 0)
        knowledgeID = row[1].stringValue ?? ""
        name = row[2].stringValue ?? ""
        if try database.scalar(#"SELECT "capture_log" FROM "_sqsync_replica""#)?.int64Value != 1 {
            try adoptCaptureLog()
        }
        if try database.scalar(#"SELECT "trigger_version" FROM "_sqsync_replica""#)?.int64Value ?? 0 < TriggerSQL.version {
            // Only faster: older triggers still check `applying`, which imports still set. So a
            // replica whose upgrade fails (read-only, locked, a trigger name taken) opens as it
            // is; the next open tries again, and `doctor` names the triggers meanwhile.
            try? upgradeTriggers()
        }
    }

    /// Gives tracked tables the triggers of this version (same capture, faster SQL) where the
    /// installed ones still match the table. A table between `refresh --before-migration` and
    /// `refresh`, or migrated since its last `refresh`, keeps what it has: that `refresh`
    /// installs them, and `doctor` says so meanwhile.
    private func upgradeTriggers() throws {
        try database.inTransaction {
            if try !isMigrating() {
                for table in try trackedTables(skippingMissing: true) where try hasCaptureTriggers(table) {
                    let declaredColumns = try DeclaredTable.read(table.name, in: database)?.columns.count
                    if declaredColumns == table.columns.count { try installTriggers(for: table) }
                }
            }
            try database.run(#"UPDATE "_sqsync_replica" SET "trigger_version" = ?"#, .integer(Int64(TriggerSQL.version)))
        }
    }

    /// A replica made before the capture log still has triggers that write the metadata
    /// directly, leaving their changes unnumbered. Numbers what they wrote, gives every
    /// tracked table the log's triggers, and marks the replica done, in one transaction: a
    /// failure (the app holding the lock too long) leaves it to the next open, never half done.
    private func adoptCaptureLog() throws {
        try database.inTransaction {
            try numberUnnumberedEntries()
            // A table dropped since it was tracked keeps no triggers; doctor reports it.
            for table in try trackedTables(skippingMissing: true) { try installTriggers(for: table) }
            // Changes made before `_sqsync_changes` existed are not in it.
            try database.execute(MetadataSQL.changesBeforeTheChangeTable)
            try database.execute(#"UPDATE "_sqsync_replica" SET "capture_log" = 1"#)
            try applyMigrationsHeldForTheCaptureLog()
        }
    }

    static func isInitialized(_ database: Database) throws -> Bool {
        try database.scalar("SELECT count(*) FROM sqlite_schema WHERE name = '_sqsync_replica'")?.int64Value == 1
    }

    /// Creates sqsync's tables and a new identity, or opens the replica when it already
    /// exists (renaming it when `name` is given), so running `init` twice is harmless.
    public static func initialize(path: String, name: String?) throws -> (replica: Replica, created: Bool) {
        let database = try Database(path: path, create: true)
        if try isInitialized(database) {
            let replica = try Replica(database: database)
            if let name, name != replica.name {
                try database.run(
                    #"UPDATE "_sqsync_sites" SET "name" = ? WHERE "site" = ?"#, .text(name), .integer(Int64(replica.site)))
                replica.name = name
            }
            return (replica, false)
        }
        let replicaName = name ?? URL(fileURLWithPath: path).deletingPathExtension().lastPathComponent
        try database.inTransaction {
            try migrate(database)
            try database.run(
                #"INSERT INTO "_sqsync_sites" ("knowledge_id", "name") VALUES (?, ?)"#,
                .text(newKnowledgeID()), .text(replicaName))
            try database.run(
                #"INSERT INTO "_sqsync_replica" ("id", "site", "seq", "hlc", "capture_log", "trigger_version") SELECT 0, "site", 0, 0, 1, ? FROM "_sqsync_sites""#,
                .integer(Int64(TriggerSQL.version)))
        }
        return (try Replica(database: database), true)
    }

    static func newKnowledgeID() -> String { UUID().uuidString.lowercased() }

    /// Applies the migrations this database lacks, each in its own transaction.
    static func migrate(_ database: Database) throws {
        let hasTable =
            try database.scalar(
                "SELECT count(*) FROM sqlite_schema WHERE name = '_sqsync_migrations'")?.int64Value == 1
        let applied =
            hasTable
            ? Set(try database.rows(#"SELECT "version" FROM "_sqsync_migrations""#).compactMap { $0[0].int64Value })
            : []
        // A newer sqsync's metadata may need that version's triggers and rules (this version's
        // own triggers, for one, rely on its imports to remove the log rows they write).
        if let newest = applied.max(), newest > Int64(MetadataSQL.migrations.last?.version ?? 0) {
            throw ChangeLogError(
                .notAReplica,
                "\(database.path): a newer sqsync (metadata version \(newest), this one knows up to \(MetadataSQL.migrations.last?.version ?? 0)) has used this replica; upgrade sqsync to use it"
            )
        }
        // Migration 8 turns legacy_alter_table on for its rebuild; a failure must not leave it on.
        defer { try? database.execute("PRAGMA legacy_alter_table = OFF") }
        for migration in MetadataSQL.migrations where !applied.contains(Int64(migration.version)) {
            // The triggers of a replica from before the capture log write `_sqsync_cells`:
            // migration 9 drops it in the transaction that replaces them (adoptCaptureLog).
            if migration.version == MetadataSQL.packedCellsVersion,
                try database.scalar(#"SELECT "capture_log" FROM "_sqsync_replica""#)?.int64Value == 0
            {
                break
            }
            try database.inTransaction { try apply(migration, to: database) }
        }
    }

    private static func apply(_ migration: (version: Int, sql: String), to database: Database) throws {
        if migration.version == MetadataSQL.packedCellsVersion { try numberUnnumberedEntries(in: database) }
        try database.execute(migration.sql)
        try database.run(#"INSERT INTO "_sqsync_migrations" ("version") VALUES (?)"#, .integer(Int64(migration.version)))
    }

    /// The migrations `migrate` left for after the capture log's triggers are in place.
    private func applyMigrationsHeldForTheCaptureLog() throws {
        let applied = Set(try database.rows(#"SELECT "version" FROM "_sqsync_migrations""#).compactMap { $0[0].int64Value })
        for migration in MetadataSQL.migrations where !applied.contains(Int64(migration.version)) {
            try Self.apply(migration, to: database)
        }
    }

    // MARK: Tracked tables

    /// The tracked tables with their columns as sqsync recorded them, ordered so that a
    /// table comes after the tables it references (parents before children).
    public func trackedTables() throws -> [TableInfo] { try trackedTables(skippingMissing: false) }

    func trackedTables(skippingMissing: Bool) throws -> [TableInfo] {
        var tables: [TableInfo] = []
        for row in try database.rows(#"SELECT "tid", "name" FROM "_sqsync_tables" ORDER BY "tid""#) {
            let name = row[1].stringValue ?? ""
            guard let table = try trackedTable(tid: Int(row[0].int64Value ?? 0), name: name) else {
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
        return TableInfo(tid: tid, name: name, columns: columns)
    }

    func columnIDs(tid: Int) throws -> [String: Int] {
        var ids: [String: Int] = [:]
        for row in try database.rows(#"SELECT "name", "cid" FROM "_sqsync_columns" WHERE "tid" = ?"#, .integer(Int64(tid))) {
            ids[row[0].stringValue ?? ""] = Int(row[1].int64Value ?? 0)
        }
        return ids
    }

    /// The columns whose merge policy is not the default, by column id.
    func columnPolicies(tid: Int) throws -> [Int: MergePolicy] {
        var policies: [Int: MergePolicy] = [:]
        for row in try database.rows(PolicySQL.policiesOfTable, .integer(Int64(tid))) {
            policies[Int(row[0].int64Value ?? 0)] = MergePolicy(rawValue: row[1].stringValue ?? "") ?? .lww
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
        ).compactMap { $0[0].stringValue }
    }

    /// Installs capture triggers on `names`. Rows already in a table become this replica's
    /// changes, so peers receive them with the next export. Returns rows captured per table.
    @discardableResult
    public func track(_ names: [String], allowIntegerPrimaryKey: Bool) throws -> [(table: String, rows: Int)] {
        var declared: [DeclaredTable] = []
        for name in names {
            guard let table = try DeclaredTable.read(name, in: database), !name.hasPrefix("_sqsync_") else {
                throw ChangeLogError(.noSuchTable, "\(path): no table named \(name)")
            }
            guard !table.primaryKey.isEmpty else {
                throw ChangeLogError(
                    .unsupportedTable,
                    "\(path): table \(name) has no primary key; sqsync needs one to match rows across replicas (add a UUID TEXT PRIMARY KEY)"
                )
            }
            if table.hasIntegerPrimaryKey && !allowIntegerPrimaryKey {
                throw ChangeLogError(
                    .unsupportedTable,
                    "\(path): table \(name) has an INTEGER PRIMARY KEY, which replicas fill with the same local numbers; use UUIDv7 text keys, or pass --allow-integer-pk if every replica hands out distinct keys"
                )
            }
            declared.append(table)
        }
        return try database.inTransaction {
            var captured: [(String, Int)] = []
            for table in declared {
                let info = try register(table)
                try installTriggers(for: info)
                captured.append((table.name, try captureExistingRows(of: info)))
            }
            try numberPendingChanges()
            return captured
        }
    }

    /// Records the table and gives new columns the next free ids.
    func register(_ table: DeclaredTable) throws -> TableInfo {
        try database.run(#"INSERT INTO "_sqsync_tables" ("name") VALUES (?) ON CONFLICT DO NOTHING"#, .text(table.name))
        let tid = Int(
            try database.scalar(#"SELECT "tid" FROM "_sqsync_tables" WHERE "name" = ?"#, .text(table.name))?.int64Value ?? 0)
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
        return TableInfo(tid: tid, name: table.name, columns: columns)
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
        ).compactMap { $0[0].stringValue }
        for name in names { try database.execute("DROP TRIGGER \(quoteIdentifier(name))") }
        database.clearStatementCache()
    }

    /// Rows already in the table become this replica's inserts, logged like the triggers'
    /// changes for ``numberPendingChanges()``.
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
        try database.inTransaction {
            for name in names {
                guard let tid = try database.scalar(#"SELECT "tid" FROM "_sqsync_tables" WHERE "name" = ?"#, .text(name)) else {
                    continue
                }
                try dropTriggers(of: name)
                for metadata in [
                    "_sqsync_log", "_sqsync_changes", "_sqsync_snapshot", "_sqsync_rows", "_sqsync_counters", "_sqsync_columns",
                    "_sqsync_tables",
                ] {
                    try database.run("DELETE FROM \(quoteIdentifier(metadata)) WHERE \"tid\" = ?", tid)
                }
            }
        }
    }

    public func trackedTableNames() throws -> [String] {
        try database.rows(#"SELECT "name" FROM "_sqsync_tables" ORDER BY "name""#).compactMap { $0[0].stringValue }
    }

    /// Problems that make capture or merge unsafe, each one line; empty when healthy.
    public func doctor() throws -> [String] {
        try numberPendingChanges()
        var problems: [String] = []
        for name in try trackedTableNames() {
            guard let declared = try DeclaredTable.read(name, in: database) else {
                problems.append("tracked table \(name) no longer exists; run `sqsync untrack \(path) \(name)`")
                continue
            }
            let tid = Int(
                try database.scalar(#"SELECT "tid" FROM "_sqsync_tables" WHERE "name" = ?"#, .text(name))?.int64Value ?? 0)
            let ids = try columnIDs(tid: tid)
            let uncovered = declared.columns.map(\.name).filter { ids[$0] == nil }
            if !uncovered.isEmpty {
                problems.append(
                    "table \(name) has columns the triggers do not capture (\(uncovered.joined(separator: ", "))); run `sqsync refresh \(path)`"
                )
            }
            let policies = try columnPolicies(tid: tid)
            let columns = declared.columns.compactMap { column in
                ids[column.name].map {
                    ColumnInfo(
                        cid: $0, name: column.name, primaryKeyPosition: column.primaryKeyPosition, policy: policies[$0] ?? .lww,
                        declaredType: column.declaredType)
                }
            }
            let expected = TriggerSQL(table: TableInfo(tid: tid, name: name, columns: columns)).all
            for trigger in expected {
                let installed = try database.scalar(
                    "SELECT sql FROM sqlite_schema WHERE type = 'trigger' AND name = ?", .text(trigger.name))?.stringValue
                if installed == nil {
                    problems.append("table \(name) is missing trigger \(trigger.name); run `sqsync refresh \(path)`")
                } else if installed != trigger.sql {
                    problems.append("trigger \(trigger.name) does not match table \(name)'s schema; run `sqsync refresh \(path)`")
                }
            }
            let liveEntries =
                try database.scalar(
                    #"SELECT count(*) FROM "_sqsync_rows" WHERE "tid" = ? AND "cl" % 2 = 1"#, .integer(Int64(tid)))?.int64Value
                ?? 0
            let rows = try database.scalar("SELECT count(*) FROM \(quoteIdentifier(name))")?.int64Value ?? 0
            if liveEntries != rows {
                problems.append(
                    "table \(name) has \(rows) rows but sqsync records \(liveEntries) live rows; a write bypassed the triggers (for example INSERT OR REPLACE removing another row through a UNIQUE column)"
                )
            }
        }
        let orphans = try database.rows("SELECT \"table\", rowid, parent FROM pragma_foreign_key_check")
        for orphan in orphans.prefix(20) {
            problems.append(
                "row \(orphan[1].int64Value.map(String.init) ?? "?") of \(orphan[0].stringValue ?? "?") refers to a missing row of \(orphan[2].stringValue ?? "?") (a parent deleted concurrently)"
            )
        }
        return problems
    }

    // MARK: Clone

    /// Copies this replica with SQLite's online backup, which is safe while apps write, and
    /// gives the copy a new knowledge ID. The copy keeps this replica's data and knowledge,
    /// and knows this replica as a peer.
    public func clone(to destination: String, name newName: String?) throws -> Replica {
        guard !FileManager.default.fileExists(atPath: destination) else {
            throw ChangeLogError(.usage, "\(destination) already exists; clone writes a new file")
        }
        try numberPendingChanges()
        let knowledgeAtCopy = try knowledge()
        // The copy gets its new identity under a temporary name, so a failure never leaves a
        // second file with this replica's knowledge ID.
        let temporary = destination + ".sqsync-clone-tmp"
        defer { Self.removeDatabaseFiles(temporary) }
        Self.removeDatabaseFiles(temporary)
        try Backup.copy(from: database, toPath: temporary)
        let newID = Self.newKnowledgeID()
        do {
            let copy = try Database(path: temporary, create: false)
            let cloneName = newName ?? URL(fileURLWithPath: destination).deletingPathExtension().lastPathComponent
            try copy.inTransaction {
                try copy.execute(CloneSQL.rememberOriginal)
                try copy.run(CloneSQL.addIdentity, .text(newID), .text(cloneName))
                for statement in CloneSQL.adopt { try copy.run(statement, .text(newID)) }
                for statement in CloneSQL.forgetSourceState { try copy.execute(statement) }
            }
        }
        guard rename(temporary, destination) == 0 else {
            throw ChangeLogError(.noSuchFile, "\(destination): cannot create: \(String(cString: strerror(errno)))")
        }
        // This replica knows its clone from the start, holding what was copied: a purge here
        // then waits for it instead of leaving it behind.
        let cloneSite = try siteNumber(for: newID, name: newName)
        var acknowledged: [Int: Int64] = [:]
        for (id, seq) in knowledgeAtCopy.seqs { acknowledged[try siteNumber(for: id, name: nil)] = seq }
        try recordAcknowledgement(peer: cloneSite, acknowledged)
        return try Replica(path: destination)
    }

    private static func removeDatabaseFiles(_ path: String) {
        for suffix in ["", "-wal", "-shm", "-journal"] { unlink(path + suffix) }
    }
}
