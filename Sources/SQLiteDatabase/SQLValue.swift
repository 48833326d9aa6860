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

    public var int64Value: Int64? {
        if case .integer(let v) = self { return v }
        return nil
    }

    public var stringValue: String? {
        if case .text(let v) = self { return v }
        return nil
    }

    public var blobValue: [UInt8]? {
        if case .blob(let v) = self { return v }
        return nil
    }

    /// The storage class's name as SQLite's `typeof()` spells it, for messages.
    public var typeName: String {
        switch self {
        case .null: return "null"
        case .integer: return "integer"
        case .real: return "real"
        case .text: return "text"
        case .blob: return "blob"
        }
    }

    /// The value as an SQL literal, for messages and the conflict log.
    public var literal: String {
        switch self {
        case .null: return "NULL"
        case .integer(let v): return String(v)
        case .real(let v): return "\(v)"
        case .text(let v): return quoteLiteral(v)
        case .blob(let v): return "X'" + v.map { hexDigits[Int($0 >> 4)] + hexDigits[Int($0 & 0xf)] }.joined() + "'"
        }
    }
}

private let hexDigits = (0..<16).map { String($0, radix: 16, uppercase: true) }

/// Quotes an identifier for SQL text: `my "table"` → `"my ""table"""`.
public func quoteIdentifier(_ name: String) -> String { quoted(name, by: "\"") }

/// A string as an SQL literal, for SQL that cannot bind values (trigger bodies).
public func quoteLiteral(_ text: String) -> String { quoted(text, by: "'") }

/// `text` between two `quote`s, each `quote` in it doubled. Scalar by scalar, as SQLite reads
/// it: a quote followed by a combining mark is one Character to Swift, and replacing
/// Characters would leave it alone (and the quoting open).
private func quoted(_ text: String, by quote: Unicode.Scalar) -> String {
    var result = String.UnicodeScalarView()
    result.append(quote)
    for scalar in text.unicodeScalars {
        if scalar == quote { result.append(quote) }
        result.append(scalar)
    }
    result.append(quote)
    return String(result)
}
