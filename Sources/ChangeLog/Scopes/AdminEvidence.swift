import FoundationEssentials
import Glibc
import SQLiteDatabase

/// What binds a replica to the admin statements it held, whoever holds its key now
/// (docs/SCOPES.md, "What a stolen key can still do"). A segment names the statements its
/// origin made its changes under, and the origin signs that list; a thief with the key signs
/// a shorter one. So each receiver keeps what the origin itself signed earlier:
///
/// - every change of origin I merged here that named statement S: a replica holding I's
///   changes through that change holds S (it was held here until S arrived, and so there);
/// - every knowledge the origin signed (acknowledgements, segment headers, bundle envelopes),
///   with its own sequence number then. (Not its learning events: their sequence number is
///   the one before the import, and an import that teaches a label makes changes of its own
///   under the statements it held before.)
///
/// Together they prove "its changes after `own_seq` were made knowing S", and a segment of
/// the origin reaching past that must name S.
extension Replica {
    /// Records that `origin`'s changes from `firstSeq` on were made under `ids`, and reads the
    /// latest knowledge each replica signed again for the statements met here first now.
    public func recordStatementsNamed(_ ids: [[UInt8]], by origin: String, from firstSeq: Int64) throws {
        guard !ids.isEmpty else { return }
        let site = try siteNumber(for: origin, name: nil)
        var newlyNamed = false
        for id in ids {
            try database.run(AdminEvidenceSQL.recordNamed, .blob(id), .integer(Int64(site)), .integer(firstSeq))
            newlyNamed = newlyNamed || database.changes > 0
        }
        if newlyNamed { try database.run(AdminEvidenceSQL.readEvidenceAgain) }
    }

    /// This replica's own changes from its next one on name `ids`: peers that hold them hold
    /// the statements (an admin's own statements are named first by its own changes).
    func recordOwnStatementsNamed(_ ids: [[UInt8]]) throws {
        let next = try database.int64(#"SELECT "seq" + 1 FROM "_sqsync_replica""#)
        for id in ids { try database.run(AdminEvidenceSQL.recordNamed, .blob(id), .integer(Int64(site)), .integer(next)) }
        try database.run(AdminEvidenceSQL.readEvidenceAgain)
    }

    /// Records `replica`'s own signed word that it held `knowledge` once its own sequence
    /// number was `ownSeq`. Only what the replica signed may come here: it binds its changes.
    public func recordAdminEvidence(of replica: String, knowledge: Knowledge, ownSeq: Int64) throws {
        guard replica != knowledgeID, !knowledge.seqs.isEmpty, try database.int64(AdminEvidenceSQL.anyNamed) == 1 else { return }
        let site = Int64(try siteNumber(for: replica, name: nil))
        let json = String(decoding: try JSONEncoder().encode(knowledge.seqs), as: UTF8.self)
        try database.run(AdminEvidenceSQL.recordKnown, .integer(site), .text(json), .integer(ownSeq))
        try database.run(AdminEvidenceSQL.keepLatest, .integer(site), .integer(ownSeq), .text(json))
    }

    /// The statements `origin` provably held before some change up to `last`, or named in a
    /// change of its own numbered up to `last`: those its segment reaching to `last` must name.
    public func adminStatementsBinding(changesOf origin: String, through last: Int64) throws -> Set<[UInt8]> {
        Set(try database.rows(AdminEvidenceSQL.held, .text(origin), .integer(last)).map { try $0.blob("statement") })
    }
}

/// The SQL of admin evidence, in one place.
enum AdminEvidenceSQL {
    /// Whether any statement was named yet: without one there is no evidence to record.
    static let anyNamed = #"SELECT EXISTS (SELECT 1 FROM "_sqsync_admin_named")"#

    static let recordNamed = """
        INSERT INTO "_sqsync_admin_named" ("statement", "site", "first_seq") VALUES (?1, ?2, ?3)
        ON CONFLICT ("statement", "site") DO UPDATE SET "first_seq" = excluded."first_seq"
        WHERE excluded."first_seq" < "first_seq"
        """

    /// Statements within the knowledge ?2 (a JSON object, knowledge ID → seq) that site ?1
    /// signed at its own sequence number ?3.
    static let recordKnown = """
        INSERT INTO "_sqsync_admin_known" ("site", "statement", "own_seq")
        SELECT DISTINCT ?1, n."statement", ?3 FROM "_sqsync_admin_named" n
        JOIN "_sqsync_sites" s ON s."site" = n."site"
        JOIN json_each(?2) k ON k."key" = s."knowledge_id"
        WHERE k."value" >= n."first_seq"
        ON CONFLICT ("site", "statement") DO UPDATE SET "own_seq" = excluded."own_seq"
        WHERE excluded."own_seq" < "own_seq"
        """

    static let keepLatest = """
        INSERT INTO "_sqsync_admin_evidence" ("site", "own_seq", "knowledge") VALUES (?1, ?2, ?3)
        ON CONFLICT ("site") DO UPDATE SET "own_seq" = excluded."own_seq", "knowledge" = excluded."knowledge"
        WHERE excluded."own_seq" >= "own_seq"
        """

    static let readEvidenceAgain = """
        INSERT INTO "_sqsync_admin_known" ("site", "statement", "own_seq")
        SELECT e."site", n."statement", min(e."own_seq") FROM "_sqsync_admin_evidence" e
        JOIN json_each(e."knowledge") k
        JOIN "_sqsync_sites" s ON s."knowledge_id" = k."key"
        JOIN "_sqsync_admin_named" n ON n."site" = s."site" AND k."value" >= n."first_seq"
        WHERE true
        GROUP BY e."site", n."statement"
        ON CONFLICT ("site", "statement") DO UPDATE SET "own_seq" = excluded."own_seq"
        WHERE excluded."own_seq" < "own_seq"
        """

    /// What the origin's signed knowledge shows it held before a change up to ?2, and what its
    /// own changes named from a number up to ?2 on: a second change under one of those numbers
    /// (a second file, a rewound one) must name it too.
    static let held = """
        SELECT k."statement" FROM "_sqsync_admin_known" k JOIN "_sqsync_sites" s ON s."site" = k."site"
        WHERE s."knowledge_id" = ?1 AND k."own_seq" < ?2
        UNION
        SELECT n."statement" FROM "_sqsync_admin_named" n JOIN "_sqsync_sites" s ON s."site" = n."site"
        WHERE s."knowledge_id" = ?1 AND n."first_seq" <= ?2
        """
}
