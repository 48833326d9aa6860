/// One result row, read by column name: a name the query does not return, or a value of
/// another type than asked for, is a ``RowDecodingError``, never a silent 0 or "".
public struct Row {
    public let values: [SQLValue]
    let columns: ColumnNames
    let sql: String

    init(values: [SQLValue], columns: ColumnNames, sql: String) {
        self.values = values
        self.columns = columns
        self.sql = sql
    }

    /// The value of a column, whatever its type.
    public func value(_ name: String) throws -> SQLValue {
        values[try columns.index(of: name, in: sql)]
    }

    public func int64(_ name: String) throws -> Int64 {
        let value = try value(name)
        guard case .integer(let number) = value else { throw mismatch(name, value, "an integer") }
        return number
    }

    /// An integer column that may be NULL.
    public func optionalInt64(_ name: String) throws -> Int64? {
        let value = try value(name)
        switch value {
        case .null: return nil
        case .integer(let number): return number
        default: throw mismatch(name, value, "an integer or NULL")
        }
    }

    public func int(_ name: String) throws -> Int { Int(try int64(name)) }

    public func string(_ name: String) throws -> String {
        let value = try value(name)
        guard case .text(let text) = value else { throw mismatch(name, value, "text") }
        return text
    }

    /// A text column that may be NULL.
    public func optionalString(_ name: String) throws -> String? {
        let value = try value(name)
        switch value {
        case .null: return nil
        case .text(let text): return text
        default: throw mismatch(name, value, "text or NULL")
        }
    }

    public func blob(_ name: String) throws -> [UInt8] {
        let value = try value(name)
        guard case .blob(let bytes) = value else { throw mismatch(name, value, "a BLOB") }
        return bytes
    }

    public func bool(_ name: String) throws -> Bool { try int64(name) != 0 }

    /// Every column by name, for rows shown whole (the conflict log).
    public var dictionary: [String: SQLValue] {
        Dictionary(zip(columns.names, values)) { first, _ in first }
    }

    private func mismatch(_ name: String, _ value: SQLValue, _ expected: String) -> RowDecodingError {
        RowDecodingError("column \(name) holds \(value.typeName), not \(expected), in the result of: \(sql)")
    }
}

/// A record made from one row, with the row's columns read by name.
public protocol RowDecodable {
    init(row: Row) throws
}

/// The names of a statement's result columns, shared by every row it returns.
final class ColumnNames {
    let names: [String]
    private let positions: [String: Int]

    init(_ names: [String]) {
        self.names = names
        positions = Dictionary(names.enumerated().map { ($0.element, $0.offset) }) { first, _ in first }
    }

    func index(of name: String, in sql: String) throws -> Int {
        guard let index = positions[name] else {
            throw RowDecodingError("no column named \(name) in the result of: \(sql)")
        }
        return index
    }
}
