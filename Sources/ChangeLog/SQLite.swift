import CSQLite
import Foundation

/// A value of one of SQLite's five storage classes, kept exactly: REAL bit for bit, BLOBs of any size.
public enum SQLValue: Hashable, Sendable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])

    public static func == (lhs: SQLValue, rhs: SQLValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case (.integer(let a), .integer(let b)): return a == b
        case (.real(let a), .real(let b)): return a.bitPattern == b.bitPattern
        case (.text(let a), .text(let b)): return a == b
        case (.blob(let a), .blob(let b)): return a == b
        default: return false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0)
        case .integer(let v): hasher.combine(v)
        case .real(let v): hasher.combine(v.bitPattern)
        case .text(let v): hasher.combine(v)
        case .blob(let v): hasher.combine(v)
        }
    }
}

/// A failed SQLite call, with SQLite's own message and the SQL that was running.
/// Bound values are left out so that user data never lands in logs.
public struct SQLiteError: Error, CustomStringConvertible {
    public var code: Int32
    public var message: String
    public var sql: String?

    public var primaryCode: Int32 { code & 0xff }
    public var isBusy: Bool { primaryCode == SQLITE_BUSY || primaryCode == SQLITE_LOCKED }
    public var isPrimaryKeyConstraint: Bool { code == SQLITE_CONSTRAINT | (6 << 8) }

    public var isUniqueConstraint: Bool {
        // SQLITE_CONSTRAINT_UNIQUE and SQLITE_CONSTRAINT_PRIMARYKEY: macros Swift does not import.
        code == SQLITE_CONSTRAINT | (8 << 8) || code == SQLITE_CONSTRAINT | (6 << 8)
    }

    public var description: String {
        if let sql { return "\(message) (SQLite error \(code), while running: \(sql))" }
        return "\(message) (SQLite error \(code))"
    }
}

/// Quotes an identifier for SQL text: `my "table"` → `"my ""table"""`.
public func quoteIdentifier(_ name: String) -> String {
    "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
}

/// A string as an SQL literal, for trigger text, which cannot bind values.
func quoteLiteral(_ text: String) -> String {
    "'" + text.replacingOccurrences(of: "'", with: "''") + "'"
}

/// An open SQLite connection. Not Sendable on purpose: a connection belongs to one thread.
public final class Database {
    let handle: OpaquePointer
    public let path: String
    private var statementCache: [String: Statement] = [:]
    /// Where `sqsync_note_row_checksum` leaves its result (``RowChecksum/Note``).
    let checksumNote = RowChecksum.Note()

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
            throw SQLiteError(code: rc, message: "cannot open \(path): out of memory", sql: nil)
        }
        guard rc == SQLITE_OK else {
            let message = String(cString: sqlite3_errmsg(pointer))
            sqlite3_close_v2(pointer)
            throw SQLiteError(code: rc, message: "cannot open \(path): \(message)", sql: nil)
        }
        self.handle = pointer
        self.path = path
        sqlite3_extended_result_codes(handle, 1)
        sqlite3_busy_timeout(handle, 5000)
        do {
            // Reading the schema is the first thing that fails on a file that is not a database.
            try execute("SELECT count(*) FROM sqlite_schema")
            if !Self.statementJournalsInOneBlock { try execute("PRAGMA temp_store = MEMORY") }
            try RowChecksum.register(on: handle, note: checksumNote)
            try CellClocks.register(on: handle)
            try MetadataKey.register(on: handle)
        } catch let error as SQLiteError {
            // deinit closes the handle: the object is fully initialized here.
            throw SQLiteError(code: error.code, message: "\(path): \(error.message)", sql: nil)
        }
    }

    /// Inside a transaction, a statement that fires a trigger and may fail part-way first
    /// copies each page it changes into a statement journal, so nearly every tracked write
    /// keeps one (README, "Speed and size"). SQLite keeps that journal in one 64 KiB block of
    /// memory; once one statement journals 16 pages, it becomes a temporary file for the rest
    /// of the transaction, a write call per page for every later statement (1M tracked inserts
    /// in one transaction: 2.5× plain). `temp_store = MEMORY` never spills but builds the
    /// journal from 1 KiB blocks, a malloc and a free each (100k tracked inserts: 1.86× plain,
    /// against 1.5× in one block). So the process raises the threshold to 120 KiB, set once,
    /// before SQLite initializes, by the first connection opened here. The setting moves
    /// statement journals (and TEMP tables' rollback journals) of every connection in the
    /// process; connections opened here then keep SQLite's default temp store, so TEMP tables
    /// and large sorts past their page cache go to temporary files in SQLite's temp directory
    /// (`SQLITE_TMPDIR`, else `/var/tmp` or `/tmp`), as in any SQLite program.
    /// At most 131,071 bytes: a journal that spills is written to its file a block per call,
    /// the block as full as the threshold allows, and SQLite's unix VFS writes at most 0x1ffff
    /// bytes a call (`seekAndWriteFd` masks the length), so a fuller block fails with
    /// SQLITE_FULL (`StatementJournalTests`). Where other code in the process initialized
    /// SQLite first, the threshold cannot be set, and each connection opened here takes
    /// `temp_store = MEMORY` instead.
    static let statementJournalsInOneBlock = sqsync_set_statement_journal_spill(statementJournalSpill) == SQLITE_OK
    static let statementJournalSpill: Int32 = 120 * 1024

    /// SQLite counts every allocation it makes under a process-wide mutex unless told not
    /// to, and Debian's build (`SQLITE_OMIT_LOOKASIDE`) takes every record and bound value
    /// from malloc: the counting is 7% of the instructions of an import of updates. It is the
    /// process's setting, and it also ends `sqlite3_status`, `sqlite3_memory_used`,
    /// `sqlite3_memory_highwater` and the heap limits: the `sqsync` command turns it off, a
    /// program that uses any of those does not call this. Takes effect only before SQLite
    /// initializes (the first database opened, or any `sqlite3_malloc`), and must be called
    /// before another thread uses SQLite; true if it took effect.
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
        let setting = try scalar("PRAGMA cache_size")?.int64Value ?? 0
        let pageSize = try scalar("PRAGMA page_size")?.int64Value ?? 4096
        // Negative: KiB; positive: pages.
        let currentKiB = setting < 0 ? -setting : setting * pageSize / 1024
        guard currentKiB < kibibytes else { return try body() }
        try execute("PRAGMA cache_size = -\(kibibytes)")
        defer { try? execute("PRAGMA cache_size = \(setting)") }
        return try body()
    }

    /// Turns triggers on or off for this connection only: other connections keep theirs, and
    /// foreign key actions still run. Prepared statements are prepared again on their next step.
    func setTriggersEnabled(_ enabled: Bool) throws {
        try check(sqsync_enable_triggers(handle, enabled ? 1 : 0))
    }

    deinit {
        statementCache.removeAll()
        sqlite3_close_v2(handle)
    }

    /// Turns a SQLite return code into a thrown ``SQLiteError`` carrying `sqlite3_errmsg`.
    @discardableResult
    func check(_ rc: Int32, sql: String? = nil) throws -> Int32 {
        switch rc {
        case SQLITE_OK, SQLITE_ROW, SQLITE_DONE: return rc
        default:
            throw SQLiteError(code: rc, message: String(cString: sqlite3_errmsg(handle)), sql: sql)
        }
    }

    /// Runs one or more statements that take no parameters.
    public func execute(_ sql: String) throws {
        var errorMessage: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &errorMessage)
        if rc != SQLITE_OK {
            let message = errorMessage.map { String(cString: $0) } ?? String(cString: sqlite3_errmsg(handle))
            sqlite3_free(errorMessage)
            throw SQLiteError(code: rc, message: message, sql: sql)
        }
    }

    /// How many parameters one statement may take (SQLITE_LIMIT_VARIABLE_NUMBER).
    public var parameterLimit: Int { Int(sqlite3_limit(handle, SQLITE_LIMIT_VARIABLE_NUMBER, -1)) }

    /// A prepared statement, cached by its SQL text so hot loops prepare once.
    public func cached(_ sql: String) throws -> Statement {
        if let statement = statementCache[sql] {
            statement.reset()
            return statement
        }
        let statement = try Statement(database: self, sql: sql, persistent: true)
        statementCache[sql] = statement
        return statement
    }

    /// A statement prepared for one use (for SQL built from a schema that may change).
    public func prepare(_ sql: String) throws -> Statement {
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
        let statement = try cached(sql)
        try statement.bind(values)
        try statement.run()
    }

    /// Every row of a query, each as an array of values.
    public func rows(_ sql: String, _ values: SQLValue...) throws -> [[SQLValue]] {
        try rows(sql, values)
    }

    public func rows(_ sql: String, _ values: [SQLValue]) throws -> [[SQLValue]] {
        let statement = try cached(sql)
        try statement.bind(values)
        var result: [[SQLValue]] = []
        while try statement.step() {
            result.append((0..<statement.columnCount).map { statement.value(at: $0) })
        }
        return result
    }

    /// The first column of the first row, or nil when there is no row.
    public func scalar(_ sql: String, _ values: SQLValue...) throws -> SQLValue? {
        let statement = try cached(sql)
        try statement.bind(values)
        defer { statement.reset() }
        return try statement.step() ? statement.value(at: 0) : nil
    }

    public var changes: Int { Int(sqlite3_changes(handle)) }

    /// The raw connection, for SQLite APIs sqsync does not wrap (the benchmark drives the
    /// session extension through it). The handle stays owned by this object.
    public var sqliteHandle: OpaquePointer { handle }
    public var isInTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }

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
                if !commit { try execute("ROLLBACK TO sqsync_nested") }
                try execute("RELEASE sqsync_nested")
                return result
            } catch {
                try? execute("ROLLBACK TO sqsync_nested")
                try? execute("RELEASE sqsync_nested")
                throw error
            }
        }
        try execute(immediate ? "BEGIN IMMEDIATE" : "BEGIN DEFERRED")
        do {
            let result = try body()
            try execute(commit ? "COMMIT" : "ROLLBACK")
            return result
        } catch {
            if isInTransaction { try? execute("ROLLBACK") }
            throw error
        }
    }
}

/// One prepared statement, finalized when released.
public final class Statement {
    let handle: OpaquePointer
    unowned let database: Database
    public let sql: String

    init(database: Database, sql: String, persistent: Bool) throws {
        var pointer: OpaquePointer?
        let flags: UInt32 = persistent ? UInt32(SQLITE_PREPARE_PERSISTENT) : 0
        let rc = sqlite3_prepare_v3(database.handle, sql, -1, flags, &pointer, nil)
        try database.check(rc, sql: sql)
        guard let pointer else {
            throw SQLiteError(code: SQLITE_MISUSE, message: "empty statement", sql: sql)
        }
        self.handle = pointer
        self.database = database
        self.sql = sql
    }

    deinit { sqlite3_finalize(handle) }

    public var columnCount: Int { Int(sqlite3_column_count(handle)) }

    public func columnName(_ index: Int) -> String {
        String(cString: sqlite3_column_name(handle, Int32(index)))
    }

    public func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    public func bind(_ values: [SQLValue]) throws {
        sqlite3_reset(handle)
        try bind(values, from: 1)
    }

    /// Binds `values` to the parameters from `first` on, leaving the others as they are:
    /// a statement's parameters can come from several arrays without joining them.
    public func bind(_ values: [SQLValue], from first: Int) throws {
        for (offset, value) in values.enumerated() {
            try bind(value, at: first + offset)
        }
    }

    public func bind(_ value: SQLValue, at index: Int) throws {
        let position = Int32(index)
        let rc: Int32
        switch value {
        case .null: rc = sqlite3_bind_null(handle, position)
        case .integer(let v): rc = sqlite3_bind_int64(handle, position, v)
        case .real(let v): rc = sqlite3_bind_double(handle, position, v)
        case .text(let v):
            rc =
                v.utf8.withContiguousStorageIfAvailable { bytes in
                    bytes.withMemoryRebound(to: CChar.self) {
                        sqsync_bind_text(handle, position, $0.baseAddress, Int32($0.count))
                    }
                } ?? sqsync_bind_text(handle, position, v, -1)
        case .blob(let v):
            rc = v.withUnsafeBytes {
                sqsync_bind_blob(handle, position, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32($0.count))
            }
        }
        if rc != SQLITE_OK { try database.check(rc, sql: sql) }
    }

    /// Steps once; true when a row is available.
    @discardableResult
    public func step() throws -> Bool {
        let rc = sqlite3_step(handle)
        if rc == SQLITE_ROW { return true }
        if rc == SQLITE_DONE { return false }
        let error = SQLiteError(code: rc, message: String(cString: sqlite3_errmsg(database.handle)), sql: sql)
        sqlite3_reset(handle)
        throw error
    }

    /// Steps to completion, for statements that return no rows.
    public func run() throws {
        while try step() {}
        sqlite3_reset(handle)
    }

    public func value(at index: Int) -> SQLValue {
        let column = Int32(index)
        switch sqlite3_column_type(handle, column) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(handle, column))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(handle, column))
        case SQLITE_TEXT:
            guard let text = sqlite3_column_text(handle, column) else { return .text("") }
            let count = Int(sqlite3_column_bytes(handle, column))
            return .text(String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self))
        case SQLITE_BLOB:
            let count = Int(sqlite3_column_bytes(handle, column))
            guard count > 0, let bytes = sqlite3_column_blob(handle, column) else { return .blob([]) }
            return .blob(Array(UnsafeRawBufferPointer(start: bytes, count: count)))
        default: return .null
        }
    }

    public func int64(at index: Int) -> Int64 { sqlite3_column_int64(handle, Int32(index)) }

    public func isNull(at index: Int) -> Bool { sqlite3_column_type(handle, Int32(index)) == SQLITE_NULL }

    public func string(at index: Int) -> String? {
        if case .text(let s) = value(at: index) { return s }
        return nil
    }
}

extension SQLValue {
    public var int64Value: Int64? {
        if case .integer(let v) = self { return v }
        return nil
    }

    public var stringValue: String? {
        if case .text(let v) = self { return v }
        return nil
    }
}
