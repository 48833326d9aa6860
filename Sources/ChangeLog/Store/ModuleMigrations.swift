import SQLiteDatabase

/// The migrations of a module above ChangeLog (Bundle, Transport) whose tables live in the
/// replica too: each module creates and changes only its own tables, and ChangeLog only runs
/// the steps, in order, recording each as `offset + version` in `_sqsync_migrations` beside its
/// own versions (which stay below ``ModuleMigrations/firstOffset``).
///
/// A step may carry a condition (`runIf`, an SQL expression): its SQL runs only where the
/// condition is true, and the step is recorded either way. That is how a module takes over
/// tables an older sqsync created through ChangeLog's migrations: the step creates what is
/// missing and leaves what exists.
public struct ModuleMigrations: Sendable {
    public struct Step: Sendable {
        public var version: Int
        public var runIf: String?
        public var sql: String

        public init(_ version: Int, runIf: String? = nil, _ sql: String) {
            self.version = version
            self.runIf = runIf
            self.sql = sql
        }
    }

    public var module: String
    public var offset: Int
    public var steps: [Step]

    /// Module version numbers start here; ChangeLog's own stay below.
    public static let firstOffset = 1000

    public init(module: String, offset: Int, steps: [Step]) {
        precondition(offset >= Self.firstOffset && offset % Self.firstOffset == 0, "a module's offset is a multiple of 1000")
        self.module = module
        self.offset = offset
        self.steps = steps
    }
}

extension Replica {
    /// Applies the steps of a module's migrations this replica lacks, each in its own
    /// transaction; once per module on each open replica.
    public func migrate(_ migrations: ModuleMigrations) throws {
        guard !migratedModules.contains(migrations.module) else { return }
        let recorded = try database.rows(
            #"SELECT "version" FROM "_sqsync_migrations" WHERE "version" > ? AND "version" < ?"#,
            .integer(Int64(migrations.offset)), .integer(Int64(migrations.offset + ModuleMigrations.firstOffset))
        ).map { try $0.int64("version") - Int64(migrations.offset) }
        let applied = Set(recorded)
        let newestKnown = Int64(migrations.steps.last?.version ?? 0)
        if let newest = applied.max(), newest > newestKnown {
            throw ChangeLogError(
                .notAReplica,
                "\(path): a newer sqsync (\(migrations.module) metadata version \(newest), this one knows up to \(newestKnown)) has used this replica; upgrade sqsync to use it"
            )
        }
        for step in migrations.steps where !applied.contains(Int64(step.version)) {
            try database.inTransaction {
                if try step.runIf.map({ try database.int64("SELECT (\($0))") != 0 }) ?? true {
                    try database.execute(step.sql)
                }
                try database.run(
                    #"INSERT INTO "_sqsync_migrations" ("version") VALUES (?)"#, .integer(Int64(migrations.offset + step.version)))
            }
        }
        // Inside a transaction the steps may yet roll back (a refused import): asked again next time.
        if !database.isInTransaction { migratedModules.insert(migrations.module) }
    }

    /// Whether every step of a module's migrations has been applied here: before that, the
    /// module has kept nothing in this replica.
    public func hasMigrated(_ migrations: ModuleMigrations) throws -> Bool {
        if migratedModules.contains(migrations.module) { return true }
        let newest = migrations.offset + (migrations.steps.last?.version ?? 0)
        return try database.int64(#"SELECT count(*) FROM "_sqsync_migrations" WHERE "version" = ?"#, .integer(Int64(newest))) == 1
    }
}
