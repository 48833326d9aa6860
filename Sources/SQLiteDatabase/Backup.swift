import CSQLite

extension Database {
    /// Copies this live database to a new file with SQLite's online backup
    /// (https://sqlite.org/backup.html), so apps need not stop writing.
    ///
    /// `progress` is told the pages copied and the pages to copy after each step.
    public func backup(toPath destinationPath: String, progress: ((_ copied: Int, _ total: Int) -> Void)? = nil) throws {
        let destination = try Database(path: destinationPath, create: true)
        guard let backup = sqlite3_backup_init(destination.handle, "main", handle, "main") else {
            try destination.check(sqlite3_errcode(destination.handle), sql: "backup")
            return
        }
        // One read transaction on the source, so the copy is one consistent moment even while
        // apps keep writing (WAL readers do not block writers): all pages in one step, or, to
        // tell progress, steps of a few MB inside one read transaction held across them.
        let holdsSnapshot = progress != nil && !isInTransaction
        if holdsSnapshot {
            try execute("BEGIN")
            _ = try int64("SELECT count(*) FROM sqlite_schema")
        }
        defer { if holdsSnapshot { try? execute("COMMIT") } }
        var rc: Int32
        repeat {
            rc = sqlite3_backup_step(backup, progress == nil ? -1 : 1024)
            if let progress {
                let total = Int(sqlite3_backup_pagecount(backup))
                progress(total - Int(sqlite3_backup_remaining(backup)), total)
            }
            if rc == SQLITE_BUSY || rc == SQLITE_LOCKED { sqlite3_sleep(20) }
        } while rc == SQLITE_OK || rc == SQLITE_BUSY || rc == SQLITE_LOCKED
        sqlite3_backup_finish(backup)
        try destination.check(rc == SQLITE_DONE ? SQLITE_OK : rc, sql: "backup")
    }
}
