import CSQLite

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

    static func register(on handle: OpaquePointer) throws {
        let rc = sqlite3_create_function_v2(
            handle, functionName, -1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nil, checksum, nil, nil, nil)
        guard rc == SQLITE_OK else {
            throw SQLiteError(code: rc, message: String(cString: sqlite3_errmsg(handle)), sql: nil)
        }
    }

    private static let checksum: @convention(c) (OpaquePointer?, Int32, UnsafeMutablePointer<OpaquePointer?>?) -> Void = {
        context, count, values in
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        func mix(_ byte: UInt8) {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        func mix(_ word: UInt64) { for shift in stride(from: 0, to: 64, by: 8) { mix(UInt8(truncatingIfNeeded: word >> UInt64(shift))) } }
        for index in 0..<Int(count) {
            let value = values?[index]
            let type = sqlite3_value_type(value)
            mix(UInt8(truncatingIfNeeded: type))
            switch type {
            case SQLITE_INTEGER:
                mix(UInt64(bitPattern: sqlite3_value_int64(value)))
            case SQLITE_FLOAT:
                mix(sqlite3_value_double(value).bitPattern)
            case SQLITE_TEXT, SQLITE_BLOB:
                let bytes = type == SQLITE_TEXT ? UnsafeRawPointer(sqlite3_value_text(value)) : sqlite3_value_blob(value)
                let length = Int(sqlite3_value_bytes(value))
                mix(UInt64(length))
                if let bytes { for offset in 0..<length { mix(bytes.load(fromByteOffset: offset, as: UInt8.self)) } }
            default:
                break
            }
        }
        sqlite3_result_int64(context, Int64(Int32(truncatingIfNeeded: hash ^ (hash >> 32))))
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
