import CSQLite

/// One prepared statement, finalized when released. The layer owns its resets: binding
/// resets it, stepping past the last row or failing resets it, and ``fetchOne(_:)`` resets
/// it after the row it reads.
public final class Statement {
    let handle: OpaquePointer
    unowned let database: Database
    public let sql: String
    /// Column names to positions, made on the first read by name.
    private var columns: ColumnNames?

    init(database: Database, sql: String, persistent: Bool) throws {
        var pointer: OpaquePointer?
        let flags: UInt32 = persistent ? UInt32(SQLITE_PREPARE_PERSISTENT) : 0
        let rc = sqlite3_prepare_v3(database.handle, sql, -1, flags, &pointer, nil)
        try database.check(rc, sql: sql)
        guard let pointer else {
            throw SQLiteError(code: .misuse, message: "empty statement", sql: sql)
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

    /// The position of a result column, for loops that read it by position afterwards.
    public func columnIndex(named name: String) throws -> Int {
        try columnNames().index(of: name, in: sql)
    }

    func columnNames() -> ColumnNames {
        if let columns { return columns }
        let names = ColumnNames((0..<columnCount).map(columnName))
        columns = names
        return names
    }

    func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    /// Resets the statement and binds `values` to its first parameters.
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

    /// Steps once; true when a row is available. Past the last row, or on an error, the
    /// statement is reset.
    @discardableResult
    public func step() throws -> Bool {
        let rc = sqlite3_step(handle)
        if rc == SQLITE_ROW { return true }
        if rc == SQLITE_DONE {
            sqlite3_reset(handle)
            return false
        }
        let error = database.error(rc, sql: sql)
        sqlite3_reset(handle)
        throw error
    }

    /// Steps to completion, for statements that return no rows.
    public func run() throws {
        while try step() {}
    }

    /// Every remaining row, read by column name.
    public func fetchAll() throws -> [Row] {
        var rows: [Row] = []
        while try step() { rows.append(row()) }
        return rows
    }

    /// Reads the first row with `read`, then resets the statement; nil when there is no row.
    public func fetchOne<T>(_ read: (Statement) throws -> T) throws -> T? {
        guard try step() else { return nil }
        defer { sqlite3_reset(handle) }
        return try read(self)
    }

    /// The current row, to read by column name.
    public func row() -> Row {
        Row(values: (0..<columnCount).map { value(at: $0) }, columns: columnNames(), sql: sql)
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

    /// A column known to hold an integer (a NOT NULL INTEGER column of sqsync's own tables),
    /// in hot loops: no value is built.
    public func int64(at index: Int) -> Int64 { sqlite3_column_int64(handle, Int32(index)) }

    public func isNull(at index: Int) -> Bool { sqlite3_column_type(handle, Int32(index)) == SQLITE_NULL }
}
