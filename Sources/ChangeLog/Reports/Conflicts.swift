import SQLiteDatabase

extension Replica {
    /// The conflict log, oldest first.
    public func conflicts() throws -> [[String: SQLValue]] {
        let statement = try database.statement(ConflictSQL.conflicts)
        var result: [[String: SQLValue]] = []
        while try statement.step() {
            var row: [String: SQLValue] = [:]
            for index in 0..<statement.columnCount { row[statement.columnName(index)] = statement.value(at: index) }
            result.append(row)
        }
        return result
    }

    /// A conflict's key as values (the log keeps it as SQL literals), nil when unreadable.
    public static func conflictKey(_ text: String) -> [SQLValue]? { KeyCodec.decodeLiterals(text) }

    /// Knowledge ID → name, for every replica heard of that has one (this one included).
    public func replicaNames() throws -> [String: String] {
        var names: [String: String] = [knowledgeID: name]
        for row in try database.rows(#"SELECT "knowledge_id", "name" FROM "_sqsync_sites" WHERE coalesce("name", '') != ''"#) {
            names[try row.string("knowledge_id")] = try row.string("name")
        }
        return names
    }

    public func clearConflicts() throws -> Int {
        try database.execute(#"DELETE FROM "_sqsync_conflicts""#)
        return database.changes
    }

    /// Child rows whose parent is missing (a parent deleted while a child was added elsewhere).
    /// `rowid` is nil for a WITHOUT ROWID table (and differs from replica to replica, so
    /// messages name the row by `key`, its primary key as SQL literals, the same everywhere);
    /// `reference` is the child's columns that name the missing parent, as `column = literal`.
    public func orphans() throws -> [(table: String, rowid: Int64?, parent: String, key: String?, reference: String?)] {
        try database.rows(#"SELECT "table", "rowid", "parent", "fkid" FROM pragma_foreign_key_check"#).map { row in
            let table = try row.string("table"), rowid = try row.optionalInt64("rowid")
            var key: String?, reference: String?
            if let rowid {
                let keyColumns = try database.rows(
                    #"SELECT "name" FROM pragma_table_info(?) WHERE "pk" > 0 ORDER BY "pk""#, .text(table)
                ).map { try $0.string("name") }
                let fromColumns = try database.rows(
                    #"SELECT "from" FROM pragma_foreign_key_list(?) WHERE "id" = ? ORDER BY "seq""#, .text(table),
                    .integer(try row.int64("fkid"))
                ).map { try $0.string("from") }
                let quotedTable = quoteIdentifier(table)
                func literals(_ columns: [String]) throws -> [String] {
                    guard !columns.isEmpty else { return [] }
                    let select = columns.map { "quote(\(quoteIdentifier($0)))" }.joined(separator: ", ")
                    return try database.row("SELECT \(select) FROM \(quotedTable) WHERE rowid = ?", .integer(rowid))?
                        .values.map { $0.stringValue ?? "NULL" } ?? []
                }
                let keyValues = try literals(keyColumns)
                key = keyValues.isEmpty ? nil : keyValues.joined(separator: ", ")
                let fromValues = try literals(fromColumns)
                reference = zip(fromColumns, fromValues).map { "\($0) = \($1)" }.joined(separator: ", ")
            }
            return (table, rowid, try row.string("parent"), key, reference)
        }
    }

    /// Notes in the conflict log that a held bundle was dropped, so the user can see why
    /// its changes never arrived.
    public func recordDroppedBundle(path: String, reason: String) throws {
        try database.run(
            #"INSERT INTO "_sqsync_conflicts" ("kind", "table_name", "pk", "lost_row", "lost_site", "lost_hlc") VALUES ('held bundle dropped', '', '', ?, '', 0)"#,
            .text(path + ": " + reason))
    }
}

extension Replica {
    /// Notes in the conflict log that changes signed as this replica, which it never made,
    /// were refused (once per identity and range): every sync says so until the operator
    /// acts and clears the log (`conflicts --clear`), or this replica takes a new identity.
    /// `from` is the first of its own numbers the file shows made otherwise: `reidentify` keeps
    /// this replica's own changes from there on as the new identity's, so that nothing it
    /// wrote after its numbers went back (a restored backup) is lost.
    public func recordSignedAsThisReplica(last: Int64, from: Int64, message: String) throws {
        try database.run(ConflictSQL.recordSignedAsThisReplica, .text(knowledgeID), .integer(last), .text(message), .integer(from))
        try database.run(ConflictSQL.lowerFirstClash, .text(knowledgeID), .integer(from))
    }

    /// Notes that a file with this replica's identity wrote in a mailbox after this one's last
    /// word there (a copy, or this file before a backup was restored over it), from its own
    /// change `from` on: not a message every sync repeats (the file in the mailbox says it
    /// again), only where ``reidentify`` starts the new identity's changes.
    public func recordOwnChangesMadeElsewhere(from: Int64, message: String) throws {
        try database.run(ConflictSQL.recordMadeElsewhere, .text(knowledgeID), .integer(from), .text(message))
    }

    /// The first own change number any file showed made otherwise, under this identity.
    func firstOwnChangeClash() throws -> Int64? {
        try database.row(ConflictSQL.firstClash, .text(knowledgeID)).flatMap { try $0.optionalInt64("first") }
    }

    /// What ``recordSignedAsThisReplica(last:from:message:)`` noted under this replica's current
    /// identity and the log still holds, oldest first.
    public func standingSignedAsThisReplica() throws -> [String] {
        try database.rows(ConflictSQL.signedAsThisReplica, .text(knowledgeID)).map { try $0.string("lost_row") }
    }
}

enum ConflictSQL {
    static let signedAsThisReplicaKind = "signed as this replica"

    static let recordSignedAsThisReplica = """
        INSERT INTO "_sqsync_conflicts" ("kind", "table_name", "pk", "lost_row", "lost_site", "lost_hlc", "won_hlc")
        SELECT '\(signedAsThisReplicaKind)', '', '', ?3, ?1, ?2, ?4
        WHERE NOT EXISTS (SELECT 1 FROM "_sqsync_conflicts"
                          WHERE "kind" = '\(signedAsThisReplicaKind)' AND "lost_site" = ?1 AND "lost_hlc" >= ?2)
        """

    static let lowerFirstClash = """
        UPDATE "_sqsync_conflicts" SET "won_hlc" = ?2
        WHERE "kind" = '\(signedAsThisReplicaKind)' AND "lost_site" = ?1 AND ("won_hlc" IS NULL OR "won_hlc" > ?2)
        """

    static let madeElsewhereKind = "own changes made elsewhere"

    static let recordMadeElsewhere = """
        INSERT INTO "_sqsync_conflicts" ("kind", "table_name", "pk", "lost_row", "lost_site", "lost_hlc", "won_hlc")
        SELECT '\(madeElsewhereKind)', '', '', ?3, ?1, ?2, ?2
        WHERE NOT EXISTS (SELECT 1 FROM "_sqsync_conflicts"
                          WHERE "kind" = '\(madeElsewhereKind)' AND "lost_site" = ?1 AND "won_hlc" <= ?2)
        """

    static let firstClash = """
        SELECT min("won_hlc") AS "first" FROM "_sqsync_conflicts"
        WHERE "kind" IN ('\(signedAsThisReplicaKind)', '\(madeElsewhereKind)') AND "lost_site" = ?
        """

    static let signedAsThisReplica = """
        SELECT "lost_row" FROM "_sqsync_conflicts" WHERE "kind" = '\(signedAsThisReplicaKind)' AND "lost_site" = ? ORDER BY "id"
        """

    static let conflicts = """
        SELECT "id", "recorded_at", "kind", "table_name", "pk", "column_name", "lost_value", "lost_value_known", "lost_row",
               "lost_site", "lost_hlc", "won_site", "won_hlc", "won_value"
        FROM "_sqsync_conflicts" ORDER BY "id"
        """
}
