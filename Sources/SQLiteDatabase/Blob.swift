import CSQLite

/// An open BLOB of one row, read and written in place (https://sqlite.org/c3ref/blob_open.html):
/// a value of many megabytes moves through it a piece at a time.
public final class Blob {
    private let handle: OpaquePointer
    private unowned let database: Database
    /// The BLOB's size in bytes, fixed when it was written.
    public let count: Int

    init(database: Database, table: String, column: String, rowid: Int64, writable: Bool) throws {
        var pointer: OpaquePointer?
        let rc = sqlite3_blob_open(database.handle, "main", table, column, rowid, writable ? 1 : 0, &pointer)
        guard rc == SQLITE_OK, let pointer else {
            if let pointer { sqlite3_blob_close(pointer) }
            throw database.error(rc, sql: "open blob \(table).\(column)")
        }
        handle = pointer
        self.database = database
        count = Int(sqlite3_blob_bytes(pointer))
    }

    deinit { sqlite3_blob_close(handle) }

    public func read(at offset: Int, count: Int) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        let rc = bytes.withUnsafeMutableBytes { sqlite3_blob_read(handle, $0.baseAddress, Int32(count), Int32(offset)) }
        try database.check(rc, sql: "read blob")
        return bytes
    }

    public func write(_ bytes: [UInt8], at offset: Int) throws {
        let rc = bytes.withUnsafeBytes { sqlite3_blob_write(handle, $0.baseAddress, Int32(bytes.count), Int32(offset)) }
        try database.check(rc, sql: "write blob")
    }
}

extension Database {
    /// Opens the BLOB in `column` of the row `rowid` of `table`.
    public func openBlob(table: String, column: String, rowid: Int64, writable: Bool) throws -> Blob {
        try Blob(database: self, table: table, column: column, rowid: rowid, writable: writable)
    }
}
