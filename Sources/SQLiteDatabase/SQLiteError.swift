import CSQLite

/// An SQLite result code, extended codes included, by name: `.constraintUnique` rather
/// than `SQLITE_CONSTRAINT | (8 << 8)` (https://sqlite.org/rescode.html).
public struct ResultCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int32

    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// The primary code an extended code belongs to (its low byte).
    public var primary: ResultCode { ResultCode(rawValue: rawValue & 0xff) }

    public var description: String { String(rawValue) }

    public static let ok = ResultCode(rawValue: SQLITE_OK)
    public static let error = ResultCode(rawValue: SQLITE_ERROR)
    public static let busy = ResultCode(rawValue: SQLITE_BUSY)
    public static let locked = ResultCode(rawValue: SQLITE_LOCKED)
    public static let noMemory = ResultCode(rawValue: SQLITE_NOMEM)
    public static let readOnly = ResultCode(rawValue: SQLITE_READONLY)
    public static let ioError = ResultCode(rawValue: SQLITE_IOERR)
    public static let corrupt = ResultCode(rawValue: SQLITE_CORRUPT)
    public static let full = ResultCode(rawValue: SQLITE_FULL)
    public static let cannotOpen = ResultCode(rawValue: SQLITE_CANTOPEN)
    public static let constraint = ResultCode(rawValue: SQLITE_CONSTRAINT)
    public static let misuse = ResultCode(rawValue: SQLITE_MISUSE)
    public static let notADatabase = ResultCode(rawValue: SQLITE_NOTADB)
    public static let row = ResultCode(rawValue: SQLITE_ROW)
    public static let done = ResultCode(rawValue: SQLITE_DONE)

    public static let constraintCheck = ResultCode(rawValue: SQLITE_CONSTRAINT | (1 << 8))
    public static let constraintForeignKey = ResultCode(rawValue: SQLITE_CONSTRAINT | (3 << 8))
    public static let constraintNotNull = ResultCode(rawValue: SQLITE_CONSTRAINT | (5 << 8))
    public static let constraintPrimaryKey = ResultCode(rawValue: SQLITE_CONSTRAINT | (6 << 8))
    public static let constraintTrigger = ResultCode(rawValue: SQLITE_CONSTRAINT | (7 << 8))
    public static let constraintUnique = ResultCode(rawValue: SQLITE_CONSTRAINT | (8 << 8))
}

/// A failed SQLite call, with SQLite's own message and the SQL that was running.
/// Bound values are left out so that user data never lands in logs.
public struct SQLiteError: Error, CustomStringConvertible {
    public var code: ResultCode
    public var message: String
    public var sql: String?
    /// The database file, when the message does not name it already ("database is locked"
    /// must say which database).
    public var path: String?

    public init(code: ResultCode, message: String, sql: String? = nil, path: String? = nil) {
        self.code = code
        self.message = message
        self.sql = sql
        self.path = path
    }

    public var isBusy: Bool { code.primary == .busy || code.primary == .locked }
    public var isConstraint: Bool { code.primary == .constraint }
    public var isPrimaryKeyConstraint: Bool { code == .constraintPrimaryKey }
    /// A UNIQUE index or the primary key refused a second row with the same values.
    public var isUniqueConstraint: Bool { code == .constraintUnique || code == .constraintPrimaryKey }

    public var description: String {
        if let sql { return "\(message) (SQLite error \(code), while running: \(sql))" }
        return "\(message) (SQLite error \(code))"
    }
}

/// A row read by a column name its query does not have, or as a type its value is not: a
/// query and its reader disagree, which is a bug, never a reason to read 0.
public struct RowDecodingError: Error, CustomStringConvertible {
    public var description: String

    public init(_ description: String) { self.description = description }
}
