extension Replica {
    /// Gives the changes the triggers left unnumbered (sequence number 0) this replica's next
    /// sequence numbers, in clock order, and moves the replica's clock past their stamps.
    /// Runs before anything reads changes (export, import, status, clone, purge), so
    /// knowledge always describes numbered changes only.
    public func numberPendingChanges() throws {
        try database.inTransaction {
            for (table, keyColumns) in [("_sqsync_rows", ["tid", "pk"]), ("_sqsync_cells", ["tid", "pk", "cid"])] {
                try database.execute(NumberingSQL.collectPending(table: table, keyColumns: keyColumns))
                let pending = try database.rows(#"SELECT count(*), max("hlc") FROM temp."_sqsync_pending""#)[0]
                let count = pending[0].int64Value ?? 0
                if count > 0 {
                    try database.execute(NumberingSQL.assign(table: table, keyColumns: keyColumns))
                    try database.run(NumberingSQL.advanceClock, .integer(count), pending[1])
                }
                try database.execute(#"DROP TABLE temp."_sqsync_pending""#)
            }
        }
    }
}

/// The statements that number pending changes.
enum NumberingSQL {
    static func collectPending(table: String, keyColumns: [String]) -> String {
        let keys = keyColumns.map(quoteIdentifier).joined(separator: ", ")
        return """
            CREATE TEMP TABLE "_sqsync_pending" AS
              SELECT \(keys), "hlc", row_number() OVER (ORDER BY "hlc") AS "n"
              FROM \(quoteIdentifier(table))
              WHERE "seq" = 0 AND "site" = (SELECT "site" FROM "_sqsync_replica")
            """
    }

    static func assign(table: String, keyColumns: [String]) -> String {
        let match = keyColumns.map { "t.\(quoteIdentifier($0)) = p.\(quoteIdentifier($0))" }.joined(separator: " AND ")
        return """
            UPDATE \(quoteIdentifier(table)) AS t
              SET "seq" = (SELECT "seq" FROM "_sqsync_replica") + p."n"
              FROM temp."_sqsync_pending" AS p WHERE \(match)
            """
    }

    static let advanceClock = """
        UPDATE "_sqsync_replica" SET "seq" = "seq" + ?1, "hlc" = max("hlc", coalesce(?2, 0))
        """
}
