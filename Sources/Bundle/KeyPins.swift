import ChangeLog
import SQLiteDatabase

/// The signing-key records a replica keeps (docs/KEYS.md): which key each replica signs with
/// (its pin), the latest acknowledgement statement each replica signed, and key moves. Keys
/// are stored as OpenSSH public key lines in the replica's own database; deciding what to
/// believe is ``KeyBinding``'s job.
struct KeyPins {
    let replica: Replica
    private var database: Database { replica.database }

    init(_ replica: Replica) { self.replica = replica }

    /// The key pinned for a replica (OpenSSH line), if any.
    func pinnedKey(of knowledgeID: String) throws -> String? {
        try database.optionalString(KeyPinSQL.pinnedKey, .text(knowledgeID))
    }

    /// The replica a key is pinned to, other than `except`, if any.
    func replica(pinnedTo key: String, except knowledgeID: String) throws -> (id: String, name: String)? {
        try database.row(KeyPinSQL.replicaPinnedTo, .text(key), .text(knowledgeID)).map {
            (try $0.string("knowledge_id"), try $0.optionalString("name") ?? "")
        }
    }

    /// Pins (or moves) the key of a replica, registering the replica when first heard of.
    func pin(key: String, of knowledgeID: String, name: String?) throws {
        let site = try replica.siteNumber(for: knowledgeID, name: name)
        try database.run(KeyPinSQL.pin, .text(key), .integer(Int64(site)))
    }

    /// The stored acknowledgement statement of every replica: counter and signed bytes.
    func acknowledgementStatements() throws -> [String: (counter: Int64, statement: [UInt8])] {
        var statements: [String: (counter: Int64, statement: [UInt8])] = [:]
        for row in try database.rows(KeyPinSQL.statements) {
            statements[try row.string("replica")] = (try row.int64("counter"), try row.blob("statement"))
        }
        return statements
    }

    /// Keeps a replica's statement when it is newer than the one held.
    func storeAcknowledgementStatement(of knowledgeID: String, counter: Int64, statement: [UInt8]) throws {
        try database.run(KeyPinSQL.storeStatement, .text(knowledgeID), .integer(counter), .blob(statement))
    }

    /// Every key move held, signed bytes.
    func keyMoves() throws -> [(from: String, replica: String, to: String, statement: [UInt8])] {
        try database.rows(KeyPinSQL.keyMoves).map {
            (try $0.string("from_key"), try $0.string("replica"), try $0.string("to_key"), try $0.blob("statement"))
        }
    }

    /// The move away from `key`, if one is held: such a key is never pinned again.
    func keyMove(from key: String) throws -> (replica: String, to: String)? {
        try database.row(KeyPinSQL.keyMoveFrom, .text(key)).map { (try $0.string("replica"), try $0.string("to_key")) }
    }

    func storeKeyMove(from: String, replica: String, to: String, statement: [UInt8]) throws {
        try database.run(KeyPinSQL.storeKeyMove, .text(from), .text(replica), .text(to), .blob(statement))
    }
}

/// The SQL of key pins, statements and key moves (tables of metadata migration 4).
enum KeyPinSQL {
    static let pinnedKey = #"SELECT "signing_key" FROM "_sqsync_sites" WHERE "knowledge_id" = ?"#
    static let replicaPinnedTo = """
        SELECT "knowledge_id", "name" FROM "_sqsync_sites" WHERE "signing_key" = ? AND "knowledge_id" != ?
        """
    static let pin = #"UPDATE "_sqsync_sites" SET "signing_key" = ? WHERE "site" = ?"#
    static let statements = #"SELECT "replica", "counter", "statement" FROM "_sqsync_statements""#
    static let storeStatement = """
        INSERT INTO "_sqsync_statements" ("replica", "counter", "statement") VALUES (?, ?, ?)
        ON CONFLICT DO UPDATE SET "counter" = excluded."counter", "statement" = excluded."statement"
        WHERE excluded."counter" > "counter"
        """
    static let keyMoves = #"SELECT "from_key", "replica", "to_key", "statement" FROM "_sqsync_key_moves" ORDER BY rowid"#
    static let keyMoveFrom = #"SELECT "replica", "to_key" FROM "_sqsync_key_moves" WHERE "from_key" = ?"#
    static let storeKeyMove = """
        INSERT OR IGNORE INTO "_sqsync_key_moves" ("from_key", "replica", "to_key", "statement") VALUES (?, ?, ?, ?)
        """
}
