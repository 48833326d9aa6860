import SQLiteDatabase

/// How concurrent changes to one column merge (docs/MERGE_RULES.md). Every replica must
/// merge a column the same way, so bundles carry the sender's policies and a bundle whose
/// policy for a column differs from the receiver's is held until they agree.
public enum MergePolicy: String, Sendable, CaseIterable, Codable {
    /// Last writer wins, by hybrid logical clock: the default.
    case lww
    /// Concurrent changes add up: each write is captured as a delta (new − old), and the
    /// value is the row's value at insert plus every replica's deltas in that life.
    case counter
    /// The greatest value written in the row's life wins (SQLite's ordering of values).
    case max
    /// The least value written in the row's life wins.
    case min

    /// The byte a bundle header stores for it.
    public var code: UInt8 {
        switch self {
        case .lww: return 0
        case .counter: return 1
        case .max: return 2
        case .min: return 3
        }
    }

    public init?(code: UInt8) {
        guard let policy = Self.allCases.first(where: { $0.code == code }) else { return nil }
        self = policy
    }

    /// max and min keep a value that only moves one way.
    var isExtremum: Bool { self == .max || self == .min }
}

/// SQLite's ordering of values across storage classes: NULL, then numbers (INTEGER and REAL
/// compared by value), then TEXT (bytewise, as the BINARY collation), then BLOB (bytewise).
public func sqliteOrder(_ a: SQLValue, _ b: SQLValue) -> Int {
    func rank(_ value: SQLValue) -> Int {
        switch value {
        case .null: return 0
        // SQLite stores a NaN it is given as NULL.
        case .real(let v) where v.isNaN: return 0
        case .integer, .real: return 1
        case .text: return 2
        case .blob: return 3
        }
    }
    let rankA = rank(a), rankB = rank(b)
    if rankA != rankB { return rankA < rankB ? -1 : 1 }
    func compare<T: Comparable>(_ x: T, _ y: T) -> Int { x < y ? -1 : (x > y ? 1 : 0) }
    func bytes(_ x: [UInt8], _ y: [UInt8]) -> Int {
        for (p, q) in zip(x, y) where p != q { return p < q ? -1 : 1 }
        return compare(x.count, y.count)
    }
    switch (a, b) {
    case (.integer(let x), .integer(let y)): return compare(x, y)
    case (.integer(let x), .real(let y)): return -compareReal(y, x)
    case (.real(let x), .integer(let y)): return compareReal(x, y)
    case (.real(let x), .real(let y)): return compare(x, y)
    case (.text(let x), .text(let y)):
        // UTF-8 bytes, compared in place: the fold sorts batches of keys with this.
        if x.utf8.elementsEqual(y.utf8) { return 0 }
        return x.utf8.lexicographicallyPrecedes(y.utf8) ? -1 : 1
    case (.blob(let x), .blob(let y)): return bytes(x, y)
    default: return 0
    }
}

/// A double against an integer without losing the integer's low bits. Beyond ±2^63 every
/// integer is nearer zero; within, rounding down gives an integer Int64 holds.
private func compareReal(_ real: Double, _ integer: Int64) -> Int {
    if real < -0x1p63 { return -1 }
    if real >= 0x1p63 { return 1 }
    let truncated = Int64(real.rounded(.down))
    if truncated != integer { return truncated < integer ? -1 : 1 }
    let fraction = real - real.rounded(.down)
    return fraction > 0 ? 1 : 0
}

/// Counter values add as SQLite adds them: INTEGER stays INTEGER unless it overflows, then
/// REAL, as does anything with a REAL in it. Anything else counts as 0 (the triggers let no
/// such value into a counter column).
enum CounterArithmetic {
    static func add(_ a: SQLValue, _ b: SQLValue) -> SQLValue {
        switch (a, b) {
        case (.integer(let x), .integer(let y)):
            let (sum, overflow) = x.addingReportingOverflow(y)
            return overflow ? .real(Double(x) + Double(y)) : .integer(sum)
        default:
            guard let x = number(a), let y = number(b) else { return number(a) == nil ? b : a }
            return .real(x + y)
        }
    }

    static func subtract(_ a: SQLValue, _ b: SQLValue) -> SQLValue {
        switch b {
        case .integer(let y) where y != .min: return add(a, .integer(-y))
        case .integer(let y): return add(a, .real(-Double(y)))
        case .real(let y): return add(a, .real(-y))
        default: return a
        }
    }

    private static func number(_ value: SQLValue) -> Double? {
        switch value {
        case .integer(let v): return Double(v)
        case .real(let v): return v
        default: return nil
        }
    }
}
