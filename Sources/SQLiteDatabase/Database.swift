import CSQLite
import FoundationEssentials
import Glibc

/// An open SQLite connection: the one owner of its handle, its statement cache and its
/// transactions. Not Sendable on purpose: a connection belongs to one thread.
public final class Database {
    let handle: OpaquePointer
    public let path: String
    /// The only statement cache: statements prepared once by SQL text, reset by this layer
    /// whenever one is handed out (``statement(_:)``).
    private var statementCache: [String: Statement] = [:]

    /// Opens (or creates) `path` with a busy timeout, so that sqsync and the application can
    /// write to the same file in turn. The journal mode is left alone until
    /// ``useWriteAheadLog()``: a file that turns out not to be a replica stays as it was.
    public init(path: String, create: Bool = true, readOnly: Bool = false) throws {
        // Before the open: sqlite3_config takes effect only before SQLite initializes.
        _ = Self.statementJournalsInOneBlock
        var pointer: OpaquePointer?
        var flags = readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE
        if create && !readOnly { flags |= SQLITE_OPEN_CREATE }
        flags |= SQLITE_OPEN_NOMUTEX
        let rc = sqlite3_open_v2(path, &pointer, flags, nil)
        guard let pointer else {
            throw SQLiteError(code: ResultCode(rawValue: rc), message: "cannot open \(path): out of memory")
        }
        guard rc == SQLITE_OK else {
            let message = String(cString: sqlite3_errmsg(pointer))
            sqlite3_close_v2(pointer)
            throw SQLiteError(code: ResultCode(rawValue: rc), message: "cannot open \(path): \(message)")
        }
        self.handle = pointer
        self.path = path
        sqlite3_extended_result_codes(handle, 1)
        sqlite3_busy_timeout(handle, Self.busyTimeoutMilliseconds)
        do {
            // Reading the schema is the first thing that fails on a file that is not a database.
            try execute("SELECT count(*) FROM sqlite_schema")
            if !Self.statementJournalsInOneBlock { try execute("PRAGMA temp_store = MEMORY") }
        } catch let error as SQLiteError {
            // deinit closes the handle: the object is fully initialized here.
            throw SQLiteError(code: error.code, message: "\(path): \(error.message)")
        }
    }

    deinit {
        statementCache.removeAll()
        sqlite3_close_v2(handle)
    }

    /// How long a write waits for another connection's write transaction before SQLite says
    /// the database is busy: `SQSYNC_BUSY_TIMEOUT` seconds (fractions allowed, at most an
    /// hour), 5 by default. A cron job then fails in bounded time and says a retry is safe.
    public static let busyTimeoutMilliseconds: Int32 = {
        guard let text = getenv("SQSYNC_BUSY_TIMEOUT").map({ String(cString: $0) }), let seconds = Double(text),
            seconds.isFinite, seconds >= 0
        else { return 5000 }
        return Int32(min(seconds, 3600) * 1000)
    }()

    /// Runs `body` with no wait on another connection's write transaction: what must never
    /// wait for a writer (a read-only command's fold) gets SQLITE_BUSY at once instead.
    public func withoutWaiting<T>(_ body: () throws -> T) rethrows -> T {
        sqlite3_busy_timeout(handle, 0)
        defer { sqlite3_busy_timeout(handle, Self.busyTimeoutMilliseconds) }
        return try body()
    }

    /// Inside a transaction, a statement that fires a trigger and may fail part-way first
    /// copies each page it changes into a statement journal, so nearly every tracked write
    /// keeps one. SQLite keeps that journal in one 64 KiB block of memory; once one statement
    /// journals 16 pages, it becomes a temporary file for the rest of the transaction, a
    /// write call per page for every later statement. `temp_store = MEMORY` never spills but
    /// builds the journal from 1 KiB blocks, a malloc and a free each. So the process raises
    /// the threshold to 120 KiB, set once, before SQLite initializes, by the first connection
    /// opened here (docs/PERFORMANCE.md, "Statement journals"). The setting moves statement
    /// journals (and TEMP tables' rollback journals) of every connection in the process;
    /// connections opened here then keep SQLite's default temp store, so TEMP tables and
    /// large sorts past their page cache go to temporary files in SQLite's temp directory
    /// (`SQLITE_TMPDIR`, else `/var/tmp` or `/tmp`), as in any SQLite program.
    /// At most 131,071 bytes: a journal that spills is written to its file a block per call,
    /// the block as full as the threshold allows, and SQLite's unix VFS writes at most 0x1ffff
    /// bytes a call (`seekAndWriteFd` masks the length), so a fuller block fails with
    /// SQLITE_FULL. Where other code in the process initialized SQLite first, the threshold
    /// cannot be set, and each connection opened here takes `temp_store = MEMORY` instead.
    public static let statementJournalsInOneBlock =
        sqsync_set_statement_journal_spill(statementJournalSpill) == SQLITE_OK
    public static let statementJournalSpill: Int32 = 120 * 1024

    /// SQLite counts every allocation it makes under a process-wide mutex unless told not
    /// to, and Debian's build (`SQLITE_OMIT_LOOKASIDE`) takes every record and bound value
    /// from malloc. It is the process's setting, and it also ends `sqlite3_status`,
    /// `sqlite3_memory_used`, `sqlite3_memory_highwater` and the heap limits: the `sqsync`
    /// command turns it off, a program that uses any of those does not call this. Takes
    /// effect only before SQLite initializes (the first database opened, or any
    /// `sqlite3_malloc`), and must be called before another thread uses SQLite; true if it
    /// took effect.
    @discardableResult
    public static func leaveOutMemoryStatistics() -> Bool { sqsync_disable_memory_statistics() == SQLITE_OK }

    /// WAL lets the app read while sqsync writes and the other way round; NORMAL sync is
    /// safe in WAL mode and much faster.
    public func useWriteAheadLog() throws {
        try execute("PRAGMA journal_mode = WAL")
        try execute("PRAGMA synchronous = NORMAL")
    }

    /// Runs `body` with a page cache of at least `kibibytes`, then gives the connection back
    /// the cache size it had. SQLite then frees the clean pages beyond it; dirty pages of a
    /// transaction still open stay until it commits. For one large operation on a connection
    /// whose owner chose a small cache, or kept SQLite's default of 2,000 KiB.
    public func withPageCache<T>(ofAtLeast kibibytes: Int64, _ body: () throws -> T) throws -> T {
        let setting = try int64("PRAGMA cache_size")
        let pageSize = try int64("PRAGMA page_size")
        // Negative: KiB; positive: pages.
        let currentKiB = setting < 0 ? -setting : setting * pageSize / 1024
        guard currentKiB < kibibytes else { return try body() }
        try execute("PRAGMA cache_size = -\(kibibytes)")
        defer { try? execute("PRAGMA cache_size = \(setting)") }
        return try body()
    }

    /// Turns triggers on or off for this connection only: other connections keep theirs, and
    /// foreign key actions still run. Prepared statements are prepared again on their next step
    /// (SQLITE_DBCONFIG_ENABLE_TRIGGER).
    public func setTriggersEnabled(_ enabled: Bool) throws {
        try check(sqsync_enable_triggers(handle, enabled ? 1 : 0))
        triggersEnabled = enabled
    }

    /// Whether this connection's triggers are on (``setTriggersEnabled(_:)``): a merge inside
    /// a run of merges that turned them off leaves them so, and knows what fires.
    public private(set) var triggersEnabled = true

    /// The one place a SQLite return code becomes a thrown ``SQLiteError`` carrying
    /// `sqlite3_errmsg`.
    @discardableResult
    func check(_ rc: Int32, sql: String? = nil) throws -> Int32 {
        switch rc {
        case SQLITE_OK, SQLITE_ROW, SQLITE_DONE: return rc
        default: throw error(rc, sql: sql)
        }
    }

    func error(_ rc: Int32, sql: String?) -> SQLiteError {
        SQLiteError(code: ResultCode(rawValue: rc), message: String(cString: sqlite3_errmsg(handle)), sql: sql, path: path)
    }

    /// Runs one or more statements that take no parameters.
    public func execute(_ sql: String) throws {
        var errorMessage: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &errorMessage)
        if rc != SQLITE_OK {
            let message = errorMessage.map { String(cString: $0) } ?? String(cString: sqlite3_errmsg(handle))
            sqlite3_free(errorMessage)
            throw SQLiteError(code: ResultCode(rawValue: rc), message: message, sql: sql, path: path)
        }
    }

    /// How many parameters one statement may take (SQLITE_LIMIT_VARIABLE_NUMBER).
    public var parameterLimit: Int { Int(sqlite3_limit(handle, SQLITE_LIMIT_VARIABLE_NUMBER, -1)) }

    /// A prepared statement from the connection's cache, keyed by its SQL text and prepared
    /// once (SQLITE_PREPARE_PERSISTENT), reset with its bindings cleared: ready to bind.
    /// Hot loops keep the statement they were given and bind it again for each row.
    public func statement(_ sql: String) throws -> Statement {
        if let statement = statementCache[sql] {
            statement.reset()
            return statement
        }
        let statement = try Statement(database: self, sql: sql, persistent: true)
        statementCache[sql] = statement
        return statement
    }

    /// A statement prepared for one use and not cached: for SQL built from a schema that a
    /// migration may change, which a cache would keep alive past the change.
    public func uncachedStatement(_ sql: String) throws -> Statement {
        try Statement(database: self, sql: sql, persistent: false)
    }

    /// Drops cached statements; needed after DDL that changes what they refer to.
    public func clearStatementCache() {
        statementCache.removeAll()
    }

    /// Runs one statement with bound values.
    public func run(_ sql: String, _ values: SQLValue...) throws {
        try run(sql, values)
    }

    public func run(_ sql: String, _ values: [SQLValue]) throws {
        let statement = try statement(sql)
        try statement.bind(values)
        try statement.run()
    }

    /// Every row of a query, read by column name.
    public func rows(_ sql: String, _ values: SQLValue...) throws -> [Row] {
        try rows(sql, values)
    }

    public func rows(_ sql: String, _ values: [SQLValue]) throws -> [Row] {
        let statement = try statement(sql)
        try statement.bind(values)
        return try statement.fetchAll()
    }

    /// The first row of a query, or nil when there is none.
    public func row(_ sql: String, _ values: SQLValue...) throws -> Row? {
        try row(sql, values)
    }

    public func row(_ sql: String, _ values: [SQLValue]) throws -> Row? {
        let statement = try statement(sql)
        try statement.bind(values)
        return try statement.fetchOne { $0.row() }
    }

    /// Every row of a query decoded into records.
    public func records<Record: RowDecodable>(_ type: Record.Type, _ sql: String, _ values: SQLValue...) throws -> [Record] {
        try rows(sql, values).map { try Record(row: $0) }
    }

    /// The first column of the first row, or nil when there is no row.
    public func scalar(_ sql: String, _ values: SQLValue...) throws -> SQLValue? {
        try scalar(sql, values)
    }

    public func scalar(_ sql: String, _ values: [SQLValue]) throws -> SQLValue? {
        let statement = try statement(sql)
        try statement.bind(values)
        return try statement.fetchOne { $0.value(at: 0) }
    }

    /// The first column of the first row as an integer: for counts, pragmas and other queries
    /// that always return one. No row or another type is an error, never 0.
    public func int64(_ sql: String, _ values: SQLValue...) throws -> Int64 {
        try int64(sql, values)
    }

    public func int64(_ sql: String, _ values: [SQLValue]) throws -> Int64 {
        let value = try scalar(sql, values)
        guard case .integer(let number) = value else {
            throw RowDecodingError("expected an integer, got \(value?.typeName ?? "no row") from: \(sql)")
        }
        return number
    }

    /// The first column of the first row as an integer, nil when there is no row or it is
    /// NULL; another type is an error.
    public func optionalInt64(_ sql: String, _ values: SQLValue...) throws -> Int64? {
        try optionalInt64(sql, values)
    }

    public func optionalInt64(_ sql: String, _ values: [SQLValue]) throws -> Int64? {
        switch try scalar(sql, values) {
        case nil, .null?: return nil
        case .integer(let number)?: return number
        case let value?: throw RowDecodingError("expected an integer, got \(value.typeName) from: \(sql)")
        }
    }

    /// The first column of the first row as text, nil when there is no row or it is NULL;
    /// another type is an error.
    public func optionalString(_ sql: String, _ values: SQLValue...) throws -> String? {
        try optionalString(sql, values)
    }

    public func optionalString(_ sql: String, _ values: [SQLValue]) throws -> String? {
        switch try scalar(sql, values) {
        case nil, .null?: return nil
        case .text(let text)?: return text
        case let value?: throw RowDecodingError("expected text, got \(value.typeName) from: \(sql)")
        }
    }

    /// Rows changed by the last INSERT, UPDATE or DELETE.
    public var changes: Int { Int(sqlite3_changes(handle)) }

    /// The rowid of the last row inserted on this connection.
    public var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }

    /// The raw connection, for SQLite APIs sqsync does not wrap (the benchmark drives the
    /// session extension through it). The handle stays owned by this object.
    public var sqliteHandle: OpaquePointer { handle }
    public var isInTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }

    /// Changes whenever what this connection reads may have changed: a row written through
    /// it (SQLite counts them, triggers included), a commit by another connection (`PRAGMA
    /// data_version`), or work undone by ``inTransaction(immediate:commit:_:)``. Lets a caller
    /// keep something it derived from the tables (a replica's knowledge) while it holds.
    public func contentStamp() throws -> ContentStamp {
        ContentStamp(
            written: sqlite3_total_changes64(handle), committedElsewhere: try int64("PRAGMA data_version"), undone: undone)
    }

    public struct ContentStamp: Equatable, Sendable {
        let written: Int64
        let committedElsewhere: Int64
        let undone: Int

        /// Transactions and savepoints rolled back on this connection so far.
        public var rollbacks: Int { undone }
    }

    /// Transactions and savepoints rolled back, or left by an error, so far.
    private var undone = 0

    /// Runs `body` in a transaction that commits when it returns and rolls back when it
    /// throws, rethrowing the first error. `IMMEDIATE` takes the write lock up front, so a
    /// concurrent writer waits on the busy timeout instead of failing half-way.
    /// With `commit: false` the work is rolled back even when it succeeds (a dry run).
    /// Inside another transaction it nests as a savepoint.
    public func inTransaction<T>(immediate: Bool = true, commit: Bool = true, _ body: () throws -> T) throws -> T {
        if isInTransaction {
            try execute("SAVEPOINT sqsync_nested")
            do {
                let result = try body()
                if !commit {
                    undone += 1
                    try execute("ROLLBACK TO sqsync_nested")
                }
                try execute("RELEASE sqsync_nested")
                return result
            } catch {
                undone += 1
                try? execute("ROLLBACK TO sqsync_nested")
                try? execute("RELEASE sqsync_nested")
                throw error
            }
        }
        try execute(immediate ? "BEGIN IMMEDIATE" : "BEGIN DEFERRED")
        do {
            let result = try body()
            if !commit { undone += 1 }
            try execute(commit ? "COMMIT" : "ROLLBACK")
            return result
        } catch {
            undone += 1
            if isInTransaction { try? execute("ROLLBACK") }
            throw error
        }
    }
}
