import SQLiteDatabase

/// A checksum of a row's values, as SQL function `sqsync_row_checksum(...)` on sqsync's own
/// connections (never in triggers, which must run for every writer): 64-bit FNV-1a folded to
/// a signed 32-bit integer, which SQLite stores in 4 bytes. It tells a changed row from an
/// unchanged one; a change goes unnoticed once in 2^32.
///
/// sqsync records it with each live row whenever it captures or applies the row's values,
/// so `refresh` and `doctor` can tell which rows changed while no trigger ran (a table
/// restored from a backup, rebuilt by a migration).
enum RowChecksum {
    static let functionName = "sqsync_row_checksum"

    /// `sqsync_row_checksum` and `sqsync_note_row_checksum`, registered where a replica
    /// opens its database; the second leaves its result in `note`.
    static func functions(note: Note) -> [SQLFunction] {
        [
            SQLFunction(functionName, argumentCount: -1) { arguments, result in
                result.setInt64(of(arguments))
            },
            // DIRECTONLY: it has a side effect, so no trigger or view may call it.
            SQLFunction(noteFunctionName, argumentCount: -1, options: [.directOnly]) { arguments, result in
                note.value = of(arguments)
                note.calls += 1
                result.setBool(true)
            },
        ]
    }

    /// `sqsync_note_row_checksum(...)`, true: the checksum of its arguments, left in the
    /// connection's ``Note``. In the WHERE clause of an UPDATE by key it sees the row the key
    /// found, before the write; given the new values for the columns the UPDATE sets and the
    /// stored ones for the rest, it hands over the checksum of the row the UPDATE leaves,
    /// without a second read of the row (``MergeSQL/updateRowNotingChecksum(_:columns:)``).
    static let noteFunctionName = "sqsync_note_row_checksum"

    /// What `sqsync_note_row_checksum` computed last on one connection, and how often it ran
    /// since the caller set ``calls`` to 0: once, for an UPDATE of one row.
    final class Note {
        var value: Int64 = 0
        var calls = 0
    }

    private static func of(_ arguments: SQLFunctionArguments) -> Int64 {
        var hash = Accumulator()
        for index in 0..<arguments.count {
            switch arguments.storageClass(index) {
            case .integer: hash.add(integer: arguments.int64(index))
            case .real: hash.add(real: arguments.double(index))
            case .text: hash.add(type: StorageCode.text, bytes: arguments.bytes(index) ?? UnsafeRawBufferPointer(start: nil, count: 0))
            case .blob: hash.add(type: StorageCode.blob, bytes: arguments.bytes(index) ?? UnsafeRawBufferPointer(start: nil, count: 0))
            case .null: hash.addNull()
            }
        }
        return hash.value
    }

    /// SQLite's storage-class codes (SQLITE_INTEGER … SQLITE_NULL), which the checksum mixes
    /// in: they are part of SQLite's stable interface, so stored checksums stay valid.
    enum StorageCode {
        static let integer: Int32 = 1
        static let real: Int32 = 2
        static let text: Int32 = 3
        static let blob: Int32 = 4
        static let null: Int32 = 5
    }

    /// What `sqsync_row_checksum` gives for these values as stored, computed without asking
    /// SQLite; the applier does the same value by value (``Accumulator``) for rows it just
    /// inserted (``storedAsGiven(_:in:)``).
    static func of(_ values: [SQLValue]) -> Int64 {
        var hash = Accumulator()
        for value in values { hash.add(value) }
        return hash.value
    }

    /// True when SQLite stores `value` in a column of this declared type exactly as given,
    /// so that ``of(_:)`` gives what `sqsync_row_checksum` will read. Conservative: a value
    /// that column affinity might convert ("Type Affinity" in SQLite's datatype rules: text
    /// that looks like a number in a numeric column, a number in a TEXT column, an integral
    /// REAL in an INTEGER or NUMERIC one, an INTEGER in a REAL one, NaN anywhere, −0.0 in a
    /// REAL column, which SQLite stores as the integer 0 and reads back as 0.0) answers false.
    static func storedAsGiven(_ value: SQLValue, in affinity: ColumnInfo.Affinity) -> Bool {
        switch value {
        case .null, .blob: return true
        case .integer: return affinity == .integer || affinity == .numeric || affinity == .blob
        case .real(let v):
            if v.isNaN { return false }
            switch affinity {
            case .real: return !(v == 0 && v.sign == .minus)
            case .blob: return true
            case .integer, .numeric: return !v.isFinite || v != v.rounded(.towardZero)
            case .text: return false
            }
        case .text(let v):
            if affinity == .text || affinity == .blob { return true }
            // Digits, signs, points, exponents and spaces are all a numeric literal can hold.
            return v.utf8.contains { byte in
                !((byte >= 0x30 && byte <= 0x39) || byte == 0x2B || byte == 0x2D || byte == 0x2E || byte == 0x45
                    || byte == 0x65 || byte == 0x20 || (byte >= 0x09 && byte <= 0x0D))
            }
        }
    }

    /// 64-bit FNV-1a over each value's storage class and bytes, folded to a signed 32-bit
    /// integer. One definition for the SQL function and for ``of(_:)``.
    struct Accumulator {
        private var hash: UInt64 = 0xcbf2_9ce4_8422_2325

        private mutating func mix(_ byte: UInt8) {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }

        private mutating func mix(_ word: UInt64) {
            for shift in stride(from: 0, to: 64, by: 8) { mix(UInt8(truncatingIfNeeded: word >> UInt64(shift))) }
        }

        mutating func addNull() { mix(UInt8(StorageCode.null)) }

        mutating func add(integer: Int64) {
            mix(UInt8(StorageCode.integer))
            mix(UInt64(bitPattern: integer))
        }

        mutating func add(real: Double) {
            mix(UInt8(StorageCode.real))
            mix(real.bitPattern)
        }

        mutating func add(type: Int32, bytes: UnsafeRawBufferPointer) {
            mix(UInt8(truncatingIfNeeded: type))
            mix(UInt64(bytes.count))
            for byte in bytes { mix(byte) }
        }

        mutating func add(_ value: SQLValue) {
            switch value {
            case .null: addNull()
            case .integer(let v): add(integer: v)
            case .real(let v): add(real: v)
            case .text(var v): v.withUTF8 { add(type: StorageCode.text, bytes: UnsafeRawBufferPointer($0)) }
            case .blob(let v): v.withUnsafeBytes { add(type: StorageCode.blob, bytes: $0) }
            }
        }

        var value: Int64 { Int64(Int32(truncatingIfNeeded: hash ^ (hash >> 32))) }
    }

    /// Records the checksum of one live row's current values with its entry; the key
    /// values are bound from ?2 on, the metadata key at ?1.
    static func update(_ table: TableInfo) -> String {
        """
        UPDATE "_sqsync_rows" SET "sum" = \(ofRow(table, firstKeyParameter: 2))
        WHERE "tid" = \(table.tid) AND "pk" = ?1
        """
    }

    /// A subquery: the checksum of the row whose key values are bound from `?firstKeyParameter` on.
    static func ofRow(_ table: TableInfo, firstKeyParameter: Int) -> String {
        let columns = table.columns.map { quoteIdentifier($0.name) }.joined(separator: ", ")
        let condition = table.primaryKey.enumerated()
            .map { "\(quoteIdentifier($0.element.name)) IS ?\($0.offset + firstKeyParameter)" }
            .joined(separator: " AND ")
        return "(SELECT \(functionName)(\(columns)) FROM \(quoteIdentifier(table.name)) WHERE \(condition))"
    }

    /// The checksum of the row `alias`, for comparing with the recorded one.
    static func of(_ table: TableInfo, alias: String) -> String {
        "\(functionName)(\(table.columns.map { "\(alias).\(quoteIdentifier($0.name))" }.joined(separator: ", ")))"
    }
}
