import CSQLite

extension Database {
    /// Copies this live database to a new file with SQLite's online backup
    /// (https://sqlite.org/backup.html), so apps need not stop writing.
    public func backup(toPath destinationPath: String) throws {
        let destination = try Database(path: destinationPath, create: true)
        guard let backup = sqlite3_backup_init(destination.handle, "main", handle, "main") else {
            try destination.check(sqlite3_errcode(destination.handle), sql: "backup")
            return
        }
        // All pages in one step: one read transaction on the source, so the copy is one
        // consistent moment even while apps keep writing (WAL readers do not block writers).
        var rc: Int32
        repeat {
            rc = sqlite3_backup_step(backup, -1)
            if rc == SQLITE_BUSY || rc == SQLITE_LOCKED { sqlite3_sleep(20) }
        } while rc == SQLITE_OK || rc == SQLITE_BUSY || rc == SQLITE_LOCKED
        sqlite3_backup_finish(backup)
        try destination.check(rc == SQLITE_DONE ? SQLITE_OK : rc, sql: "backup")
    }
}
