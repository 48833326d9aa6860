import FoundationEssentials
import Glibc
import SQLiteDatabase

/// A SQLite database that sqsync manages: its identity, its tracked tables and its clock.
/// Not Sendable on purpose: it owns one connection.
///
/// Its functions live beside the job they serve, one folder of ChangeLog each; this index
/// says where. A function added to a topic goes into its list here.
///
/// ## Topics
///
/// ### Opening and identity (Store/)
/// - ``init(path:)``, ``initialize(path:name:knowledgeID:)``, ``database``, ``path``, ``knowledgeID``, ``name``
/// - Copies and moves: ``copiedAt()``, ``confirmMoved()``, ``refuseWhileCopied(_:)`` (CopiedFiles.swift)
/// - Module tables: ``migrate(_:)``, ``hasMigrated(_:)`` (ModuleMigrations.swift); ``generation(watching:)`` (Generation.swift)
///
/// ### Tracked tables and policies (Store/)
/// - ``track(_:allowIntegerPrimaryKey:)``, ``untrack(_:)``, ``trackedTables()``, ``trackedTableNames()``,
///   ``trackableTables()``, ``userTableNames()``, ``untrackedTablesWithPrimaryKey()`` (TrackedTables.swift)
/// - ``policies()``, ``setPolicy(_:table:column:)``, ``countersFolded()`` (Policies.swift)
///
/// ### Capturing the app's writes (Capture/)
/// - ``fold()``: the trigger log into numbered changes
///
/// ### Sending (Export/)
/// - ``readSnapshot(_:)`` (ChangeExporter.swift), ``latestCheckpoint()``, ``recordCheckpoint(through:records:)``
/// - ``withheldValues(cap:)``, ``releaseWithheldValues(cap:)``: values too large for a bundle
///
/// ### Receiving (Apply/)
/// - ``admitSender(_:path:)``, ``checkNotOlder(thanPurgedBy:path:)``, ``recordSender(_:)``, ``observeClock(_:)`` (SenderAdmission.swift)
/// - ``planMerge(of:authorization:)`` (MergePlan.swift), then a ``ChangeMerger``; ``mergingWithTriggersOff(_:)``
///
/// ### Peers (Peers/)
/// - ``knowledge()``, ``peers()``, ``peer(named:)``, ``siteNumber(for:name:)``, ``siteName(of:)``,
///   ``recordAcknowledgement(of:name:knowledge:above:)``, ``retiredPeers()``, ``retiredPeerIDs()`` (Sites.swift)
/// - ``purge(dryRun:)``, ``retire(peer:)`` (Purge.swift), ``reidentify(as:)``, ``clone(to:name:knowledgeID:emptying:)``
///
/// ### Admin statements, scopes and grants (Scopes/)
/// - ``adminStatements()``, ``addAdminStatements(_:)``, ``issueAdminStatement(_:)``, ``adminRules()``,
///   ``adminRules(namedBy:)``, ``ownScope()``, ``adminEpochs()``, ``checkLabel(_:of:)``, ``removeRowsOutOfScope()`` (Scopes.swift)
/// - New lives and deletions announced again: ``startNewLives(of:)``, ``announceDeletions(of:)``
/// - What an origin signed it held: ``adminClaim(of:)``, ``recordAdminClaim(of:last:ids:)``,
///   ``recordStatementsNamed(_:by:from:)``, ``recordAdminEvidence(of:knowledge:ownSeq:)``,
///   ``adminStatementsBinding(changesOf:through:)`` (AdminEvidence.swift)
/// - Whether a label applies here, before anything is written: ``labelHold(judging:by:tables:path:)``,
///   ``labelHold(adding:path:)`` (LabelCheck.swift)
///
/// ### Schema changes (Refresh/)
/// - ``prepareMigration()``, ``isMigrating()``, ``refuseWhileMigrating(_:)``, ``refresh()``,
///   ``uncapturedWrites()``, ``refuseWithUncapturedColumns(_:)``, ``schemaVersion()``
///
/// ### Reports (Reports/)
/// - ``status()``, ``doctor()``, ``history(table:key:)``, ``conflicts()``, ``orphans()``, ``clearConflicts()``
public final class Replica {
    public let database: Database
    /// The last ``knowledge()`` read and the database's content stamp then: an import asks
    /// for it several times per segment, and it lists every replica.
    var knowledgeRead: (stamp: Database.ContentStamp, knowledge: Knowledge)?
    /// The sites as ``siteIDs()`` last read them.
    var sitesReadBefore: SitesRead?
    /// What ``leastAcknowledged(by:)`` last read, by the peers asked of, and the content
    /// stamp then: a mailbox sync asks for each scope group several times.
    var leastAcknowledgedRead: (stamp: Database.ContentStamp, byPeers: [[String]: [String: Int64]])?
    public let path: String
    /// This replica's row in `_sqsync_sites`.
    public internal(set) var site: Int
    public internal(set) var knowledgeID: String
    public internal(set) var name: String
    /// Where `sqsync_note_row_checksum` leaves its result on this replica's connection
    /// (``RowChecksum/Note``).
    let checksumNote: RowChecksum.Note
    /// How many changes a fold writes at a time (``foldBatch``): tests make a few log rows
    /// span many batches.
    var foldBatchSize = Replica.foldBatch
    /// Modules whose migrations ran on this connection (``migrate(_:)``).
    var migratedModules: Set<String> = []
    /// Told how far long work on this replica has got (a fold of a large log, a clone's copy,
    /// an import's merge, an export's changes); nil, nothing is counted for it.
    public var progress: ((WorkProgress) -> Void)?

    /// Opens an existing replica; refuses a database that `sqsync init` has not prepared.
    public convenience init(path: String) throws {
        guard FileManager.default.fileExists(atPath: path) else {
            throw ChangeLogError(.noSuchFile, "\(path): no such file")
        }
        let (database, note) = try Self.openDatabase(path: path, create: false)
        guard try Self.isInitialized(database) else {
            throw ChangeLogError(.notAReplica, "\(path) is not an sqsync replica; run `sqsync init \(path)` first")
        }
        try self.init(database: database, checksumNote: note)
    }

    /// Opens a connection with sqsync's SQL functions, which its metadata queries and
    /// migrations call. They exist on sqsync's connections only: the triggers never call them.
    static func openDatabase(path: String, create: Bool) throws -> (Database, RowChecksum.Note) {
        let database = try Database(path: path, create: create)
        let note = RowChecksum.Note()
        do {
            for function in RowChecksum.functions(note: note) + CellClocks.functions + MetadataKey.functions {
                try database.register(function)
            }
        } catch let error as SQLiteError {
            throw SQLiteError(code: error.code, message: "\(path): \(error.message)")
        }
        return (database, note)
    }

    private init(database: Database, checksumNote: RowChecksum.Note) throws {
        self.database = database
        self.checksumNote = checksumNote
        self.path = database.path
        try database.useWriteAheadLog()
        try Self.migrate(database)
        guard
            let row = try database.row(
                """
                SELECT r."site", s."knowledge_id", s."name", r."capture_log", r."trigger_version"
                FROM "_sqsync_replica" r JOIN "_sqsync_sites" s ON s."site" = r."site"
                """)
        else { throw ChangeLogError(.notAReplica, "\(database.path): sqsync metadata is damaged (no replica row)") }
        site = try row.int("site")
        knowledgeID = try row.string("knowledge_id")
        name = try row.optionalString("name") ?? ""
        // Before anything is folded: a copy's writes since it was copied are its own.
        try noteFileIdentity()
        if try row.int64("capture_log") != 1 {
            try adoptCaptureLog()
        }
        if try row.int64("trigger_version") < TriggerSQL.version {
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
            try numberLegacyEntries()
            // A table dropped since it was tracked keeps no triggers; doctor reports it.
            for table in try trackedTables(skippingMissing: true) { try installTriggers(for: table) }
            // Changes made before `_sqsync_changes` existed are not in it.
            try database.execute(MetadataSQL.changesBeforeTheChangeTable)
            try database.execute(#"UPDATE "_sqsync_replica" SET "capture_log" = 1"#)
            try applyMigrationsHeldForTheCaptureLog()
        }
    }

    static func isInitialized(_ database: Database) throws -> Bool {
        try database.int64("SELECT count(*) FROM sqlite_schema WHERE name = '_sqsync_replica'") == 1
    }

    /// Creates sqsync's tables and a new identity, or opens the replica when it already
    /// exists (renaming it when `name` is given), so running `init` twice is harmless.
    /// `knowledgeID`: the ID to take, made by the caller from the replica's first key (Bundle's
    /// `ReplicaIdentity`); a random one when nil.
    public static func initialize(path: String, name: String?, knowledgeID: String? = nil) throws -> (
        replica: Replica, created: Bool
    ) {
        let (database, note) = try openDatabase(path: path, create: true)
        if try isInitialized(database) {
            let replica = try Replica(database: database, checksumNote: note)
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
                SitesSQL.addSite,
                .text(knowledgeID ?? newKnowledgeID()), .text(replicaName))
            try database.run(
                #"INSERT INTO "_sqsync_replica" ("id", "site", "seq", "hlc", "capture_log", "trigger_version") SELECT 0, "site", 0, 0, 1, ? FROM "_sqsync_sites""#,
                .integer(Int64(TriggerSQL.version)))
        }
        return (try Replica(database: database, checksumNote: note), true)
    }

    static func newKnowledgeID() -> String { UUID().uuidString.lowercased() }

    /// ChangeLog's metadata versions applied to this database (other modules' lie above).
    private static func appliedMigrations(_ database: Database) throws -> Set<Int64> {
        guard try database.int64("SELECT count(*) FROM sqlite_schema WHERE name = '_sqsync_migrations'") == 1 else {
            return []
        }
        return Set(
            try database.rows(#"SELECT "version" FROM "_sqsync_migrations" WHERE "version" < ?"#, .integer(Int64(ModuleMigrations.firstOffset)))
                .map { try $0.int64("version") })
    }

    /// Applies the migrations this database lacks, each in its own transaction.
    static func migrate(_ database: Database) throws {
        let applied = try appliedMigrations(database)
        let newestKnown = Int64(MetadataSQL.migrations.last?.version ?? 0)
        // A newer sqsync's metadata may need that version's triggers and rules (this version's
        // own triggers, for one, rely on its imports to remove the log rows they write).
        if let newest = applied.max(), newest > newestKnown {
            throw ChangeLogError(
                .notAReplica,
                "\(database.path): a newer sqsync (metadata version \(newest), this one knows up to \(newestKnown)) has used this replica; upgrade sqsync to use it"
            )
        }
        // Migration 8 turns legacy_alter_table on for its rebuild; a failure must not leave it on.
        defer { try? database.execute("PRAGMA legacy_alter_table = OFF") }
        for migration in MetadataSQL.migrations where !applied.contains(Int64(migration.version)) {
            // The triggers of a replica from before the capture log write `_sqsync_cells`:
            // migration 9 drops it in the transaction that replaces them (adoptCaptureLog).
            // A database being initialized has no replica row yet, and needs no wait.
            if migration.version == MetadataSQL.packedCellsVersion,
                try database.optionalInt64(#"SELECT "capture_log" FROM "_sqsync_replica""#) == 0
            {
                break
            }
            try database.inTransaction { try apply(migration, to: database) }
        }
    }

    private static func apply(_ migration: (version: Int, sql: String), to database: Database) throws {
        if migration.version == MetadataSQL.packedCellsVersion { try numberLegacyEntries(in: database) }
        try database.execute(migration.sql)
        try database.run(#"INSERT INTO "_sqsync_migrations" ("version") VALUES (?)"#, .integer(Int64(migration.version)))
    }

    /// The migrations `migrate` left for after the capture log's triggers are in place.
    private func applyMigrationsHeldForTheCaptureLog() throws {
        let applied = try Self.appliedMigrations(database)
        for migration in MetadataSQL.migrations where !applied.contains(Int64(migration.version)) {
            try Self.apply(migration, to: database)
        }
    }
}

/// Every site a replica knows, as read at one time (``Replica/siteIDs()``).
struct SitesRead {
    var stamp: Database.ContentStamp
    var count: Int64
    var largest: Int64
    var ids: [Int: String] = [:]
    var numbers: [String: Int] = [:]
}
