/// The signing-key records of a replica: which key each replica signs with (its pin), the
/// latest acknowledgement statement each replica signed, and key moves. Keys are stored as
/// OpenSSH public key lines; checking signatures is the Bundle module's job (`KeyBinding`).
extension Replica {
    /// The key pinned for a replica (OpenSSH line), if any.
    public func pinnedKey(of knowledgeID: String) throws -> String? {
        try database.scalar(#"SELECT "signing_key" FROM "_sqsync_sites" WHERE "knowledge_id" = ?"#, .text(knowledgeID))?
            .stringValue
    }

    /// The replica a key is pinned to, other than `except`, if any.
    public func replica(pinnedTo key: String, except knowledgeID: String) throws -> (id: String, name: String)? {
        try database.rows(
            #"SELECT "knowledge_id", coalesce("name", '') FROM "_sqsync_sites" WHERE "signing_key" = ? AND "knowledge_id" != ?"#,
            .text(key), .text(knowledgeID)
        ).first.map { ($0[0].stringValue ?? "", $0[1].stringValue ?? "") }
    }

    /// The name this replica knows a replica by (empty when unknown).
    public func siteName(of knowledgeID: String) throws -> String {
        try database.scalar(#"SELECT coalesce("name", '') FROM "_sqsync_sites" WHERE "knowledge_id" = ?"#, .text(knowledgeID))?
            .stringValue ?? ""
    }

    /// Pins (or moves) the key of a replica, registering the replica when first heard of.
    public func pin(key: String, of knowledgeID: String, name: String?) throws {
        let site = try siteNumber(for: knowledgeID, name: name)
        try database.run(#"UPDATE "_sqsync_sites" SET "signing_key" = ? WHERE "site" = ?"#, .text(key), .integer(Int64(site)))
    }

    /// The stored acknowledgement statement of every replica: counter and signed bytes.
    public func acknowledgementStatements() throws -> [String: (counter: Int64, statement: [UInt8])] {
        var statements: [String: (counter: Int64, statement: [UInt8])] = [:]
        for row in try database.rows(#"SELECT "replica", "counter", "statement" FROM "_sqsync_statements""#) {
            statements[row[0].stringValue ?? ""] = (row[1].int64Value ?? 0, row[2].blobValue ?? [])
        }
        return statements
    }

    /// Keeps a replica's statement when it is newer than the one held.
    public func storeAcknowledgementStatement(of knowledgeID: String, counter: Int64, statement: [UInt8]) throws {
        try database.run(
            #"INSERT INTO "_sqsync_statements" ("replica", "counter", "statement") VALUES (?, ?, ?) ON CONFLICT DO UPDATE SET "counter" = excluded."counter", "statement" = excluded."statement" WHERE excluded."counter" > "counter""#,
            .text(knowledgeID), .integer(counter), .blob(statement))
    }

    /// Every key move held, signed bytes.
    public func keyMoves() throws -> [(from: String, replica: String, to: String, statement: [UInt8])] {
        try database.rows(#"SELECT "from_key", "replica", "to_key", "statement" FROM "_sqsync_key_moves" ORDER BY rowid"#).map {
            ($0[0].stringValue ?? "", $0[1].stringValue ?? "", $0[2].stringValue ?? "", $0[3].blobValue ?? [])
        }
    }

    /// The move away from `key`, if one is held: such a key is never pinned again.
    public func keyMove(from key: String) throws -> (replica: String, to: String)? {
        try database.rows(#"SELECT "replica", "to_key" FROM "_sqsync_key_moves" WHERE "from_key" = ?"#, .text(key)).first.map {
            ($0[0].stringValue ?? "", $0[1].stringValue ?? "")
        }
    }

    public func storeKeyMove(from: String, replica: String, to: String, statement: [UInt8]) throws {
        try database.run(
            #"INSERT OR IGNORE INTO "_sqsync_key_moves" ("from_key", "replica", "to_key", "statement") VALUES (?, ?, ?, ?)"#,
            .text(from), .text(replica), .text(to), .blob(statement))
    }
}

extension SQLValue {
    fileprivate var blobValue: [UInt8]? {
        if case .blob(let v) = self { return v }
        return nil
    }
}
