import ChangeLog
import SQLiteDatabase

/// The keys a replica knows other replicas (and itself) to sign with, kept in its own
/// database (`_sqsync_keys`, metadata migration 13), with the acknowledgement statements it
/// relays. Deciding what to believe is ``KeyBinding``'s job; this is storage.
struct KeyPins {
    /// One key of a replica's chain: it signs that replica's changes up to `untilSeq`
    /// (nil while it is the current key).
    struct ChainKey: Equatable {
        var key: SSHPublicKey
        var afterSeq: Int64
        var untilSeq: Int64?
        /// The signed move that made it current; nil for a replica's first key.
        var move: KeyMove?
        /// For a replica's first key, the replica's birth (``ReplicaIdentity``); else empty.
        var birth: [UInt8] = []
    }

    let replica: Replica
    private var database: Database { replica.database }

    init(_ replica: Replica) throws {
        try BundleTables.ready(replica)
        self.replica = replica
    }

    /// A replica's keys, first to current.
    func chain(of knowledgeID: String) throws -> [ChainKey] {
        try database.rows(KeyPinSQL.chain, .text(knowledgeID)).map { row in
            ChainKey(
                key: try SSHPublicKey(openSSHLine: try row.string("key")), afterSeq: try row.int64("after_seq"),
                untilSeq: try row.optionalInt64("until_seq"),
                move: try row.value("move").blobValue.map { try KeyMove(stored: $0) }, birth: try row.value("birth").blobValue ?? [])
        }
    }

    /// The key a replica signs with now.
    func currentKey(of knowledgeID: String) throws -> SSHPublicKey? {
        try chain(of: knowledgeID).last { $0.untilSeq == nil }?.key
    }

    /// The replicas a key belongs to (one key may be the first key of several replicas whose
    /// IDs were made from it, each with its own birth), with whether it moved away there.
    func owners(of key: SSHPublicKey) throws -> [(id: String, name: String, movedAway: Bool)] {
        try database.rows(KeyPinSQL.owners, .text(key.openSSHLine)).map {
            (try $0.string("knowledge_id"), try $0.optionalString("name") ?? "", try $0.optionalInt64("until_seq") != nil)
        }
    }

    /// By replica, the other replicas one of its keys (first, moved away or current) also
    /// signs for: what binds a restricted key's restrictions to every replica it gives birth
    /// to (``AdminRules/binding(keySharers:)``).
    func keySharers() throws -> [String: Set<String>] {
        var sharers: [String: Set<String>] = [:]
        for row in try database.rows(KeyPinSQL.sharers) {
            sharers[try row.string("replica"), default: []].insert(try row.string("sharer"))
        }
        return sharers
    }

    /// Records a replica's first key (and its birth, for an ID made from both), registering
    /// the replica when first heard of.
    func bindFirst(_ key: SSHPublicKey, to knowledgeID: String, name: String?, birth: [UInt8] = []) throws {
        let site = try replica.siteNumber(for: knowledgeID, name: name)
        try database.run(
            KeyPinSQL.insert, .text(key.openSSHLine), .integer(Int64(site)), .integer(0), .null, birth.isEmpty ? .null : .blob(birth))
        try database.run(KeyPinSQL.setCurrent, .text(key.openSSHLine), .integer(Int64(site)))
    }

    /// Records a verified move: the old key signs up to its `afterSeq`, the new one after it.
    func record(_ move: KeyMove) throws {
        let site = try replica.siteNumber(for: move.replica, name: nil)
        try database.run(KeyPinSQL.endKey, .integer(move.afterSeq), .text(move.from.openSSHLine), .integer(Int64(site)))
        try database.run(
            KeyPinSQL.insert, .text(move.to.openSSHLine), .integer(Int64(site)), .integer(move.afterSeq), .blob(try move.stored()),
            .null)
        try database.run(KeyPinSQL.setCurrent, .text(move.to.openSSHLine), .integer(Int64(site)))
    }

    /// Every move held, of replicas not retired, for bundles to carry.
    func moves() throws -> [KeyMove] {
        try database.rows(KeyPinSQL.moves).map { try KeyMove(stored: try $0.blob("move")) }
    }

    /// The stored acknowledgement statement of every replica.
    func acknowledgementStatements() throws -> [String: AcknowledgementStatement] {
        var statements: [String: AcknowledgementStatement] = [:]
        for row in try database.rows(KeyPinSQL.statements) {
            if let statement = try? AcknowledgementStatement(stored: try row.blob("statement")) {
                statements[try row.string("replica")] = statement
            }
        }
        return statements
    }

    /// Each replica's latest statement's counter, without reading the statements (each lists
    /// every replica): what a mailbox writer compares every sync.
    func statementCounters() throws -> [(replica: String, counter: Int64)] {
        try database.rows(KeyPinSQL.statementCounters).map { (try $0.string("replica"), try $0.int64("counter")) }
    }

    /// One replica's latest statement: every sync checks its own, and each statement lists
    /// every replica, so it is not read through ``acknowledgementStatements()``.
    func acknowledgementStatement(of replica: String) throws -> AcknowledgementStatement? {
        try database.row(KeyPinSQL.statement, .text(replica)).flatMap { try? AcknowledgementStatement(stored: try $0.blob("statement")) }
    }

    /// Keeps a replica's statement when it is newer than the one held, or when the one held
    /// was signed by a key the replica has since moved from and this one by its current key:
    /// a stolen key could sign a counter no later statement reaches, and freeze the replica's
    /// word everywhere; moving to a new key (`keygen --rotate`) ends that (docs/KEYS.md).
    func store(_ statement: AcknowledgementStatement) throws {
        let replica = SQLValue.text(statement.replica), stored = SQLValue.blob(try statement.stored())
        try database.run(KeyPinSQL.storeStatement, replica, .integer(statement.counter), stored)
        // Only a held one as far or further ahead, and not this one, is read (each lists every replica).
        guard database.changes == 0, try database.int64(KeyPinSQL.heldAheadOtherwise, replica, .integer(statement.counter), stored) == 1,
            let held = try acknowledgementStatement(of: statement.replica), let key = try currentKey(of: statement.replica),
            !held.isSigned(by: key), statement.isSigned(by: key)
        else { return }
        try database.run(KeyPinSQL.replaceStatement, replica, .integer(statement.counter), stored)
    }
}

/// The SQL of key chains and statements (tables of metadata migrations 4 and 13).
enum KeyPinSQL {
    static let chain = """
        SELECT k."key", k."after_seq", k."until_seq", k."move", k."birth" FROM "_sqsync_keys" k
        JOIN "_sqsync_sites" s ON s."site" = k."site" WHERE s."knowledge_id" = ?
        ORDER BY k."until_seq" IS NULL, k."after_seq", k."rowid"
        """
    static let owners = """
        SELECT s."knowledge_id", s."name", k."until_seq" FROM "_sqsync_keys" k JOIN "_sqsync_sites" s ON s."site" = k."site"
        WHERE k."key" = ? ORDER BY k."rowid"
        """
    static let sharers = """
        SELECT DISTINCT a."knowledge_id" AS "replica", b."knowledge_id" AS "sharer"
        FROM "_sqsync_keys" ka JOIN "_sqsync_keys" kb ON kb."key" = ka."key" AND kb."site" != ka."site"
        JOIN "_sqsync_sites" a ON a."site" = ka."site" JOIN "_sqsync_sites" b ON b."site" = kb."site"
        """
    static let insert = #"INSERT INTO "_sqsync_keys" ("key", "site", "after_seq", "move", "birth") VALUES (?, ?, ?, ?, ?)"#
    static let endKey = #"UPDATE "_sqsync_keys" SET "until_seq" = ? WHERE "key" = ? AND "site" = ? AND "until_seq" IS NULL"#
    /// The key `status` and `peers` show.
    static let setCurrent = #"UPDATE "_sqsync_sites" SET "signing_key" = ? WHERE "site" = ?"#
    static let moves = """
        SELECT k."move" FROM "_sqsync_keys" k JOIN "_sqsync_sites" s ON s."site" = k."site"
        WHERE k."move" IS NOT NULL AND s."retired" = 0 ORDER BY k."site", k."after_seq"
        """
    static let statements = #"SELECT "replica", "statement" FROM "_sqsync_statements""#
    static let statementCounters = #"SELECT "replica", "counter" FROM "_sqsync_statements" ORDER BY "replica""#
    static let statement = #"SELECT "statement" FROM "_sqsync_statements" WHERE "replica" = ?"#
    static let storeStatement = """
        INSERT INTO "_sqsync_statements" ("replica", "counter", "statement") VALUES (?, ?, ?)
        ON CONFLICT DO UPDATE SET "counter" = excluded."counter", "statement" = excluded."statement"
        WHERE excluded."counter" > "counter"
        """
    static let heldAheadOtherwise = """
        SELECT EXISTS (SELECT 1 FROM "_sqsync_statements" WHERE "replica" = ?1 AND "counter" >= ?2 AND "statement" != ?3)
        """
    static let replaceStatement = #"UPDATE "_sqsync_statements" SET "counter" = ?2, "statement" = ?3 WHERE "replica" = ?1"#
}
