import Foundation
import TestSupport
import XCTest

/// Every replica is bound to its signing key (docs/KEYS.md): a stolen trusted key cannot speak
/// for another replica, acknowledgements count only when their replica signed them, and a key
/// rotation travels through relays.
///
/// A (made), B and C (cloned from A), each with its own key, all trusted, and each with a
/// random knowledge ID, as replicas made by sqsync 0.1 or without a key have: bound to the
/// first key seen signing for them (docs/KEYS.md, "First sight"). Replicas whose IDs are made
/// from their keys are attacked in OriginSignatureTests.
final class KeyBindingCLITests: XCTestCase {
    private var h: Harness!
    private var a = "", b = "", c = ""

    private static let schema = """
        CREATE TABLE t(id TEXT PRIMARY KEY, v TEXT);
        INSERT INTO t VALUES ('r1', 'one'), ('r2', 'two'), ('r3', 'three');
        """

    override func setUpWithError() throws {
        h = try Harness()
        a = try h.makeReplica("A", schema: Self.schema, keyBound: false)
        b = try h.cloneReplica(a, as: "B", keyBound: false)
        c = try h.cloneReplica(a, as: "C", keyBound: false)
    }

    override func tearDown() { h = nil }

    // MARK: helpers

    /// The fingerprint `peers --json` shows for `peer` on `db`.
    private func fingerprint(of peer: String, on db: String, file: StaticString = #filePath, line: UInt = #line) throws
        -> String
    {
        let peers = try h.okJSON(["peers", db], file: file, line: line)["peers"] as? [[String: Any]] ?? []
        let entry = peers.first { $0["name"] as? String == peer }
        return entry?["key_fingerprint"] as? String ?? "(no fingerprint for \(peer))"
    }

    /// A copy of `db` as a thief would make it, with the key pins and statements cleared (the
    /// thief owns the file) and `sql` applied.
    private func stolenCopy(of db: String, as name: String, _ sql: String = "") throws -> String {
        let copy = h.path("\(name).db")
        try FileManager.default.copyItem(atPath: db, toPath: copy)
        try h.ok(["init", copy])  // the thief says it was moved
        try h.sqlite(
            copy,
            #"UPDATE "_sqsync_sites" SET "signing_key" = NULL; DELETE FROM "_sqsync_statements"; DELETE FROM "_sqsync_keys";"#
                + sql)
        return copy
    }

    private func ids(_ db: String) throws -> [String] {
        try h.sqlite(db, "SELECT id FROM t ORDER BY id;").split(separator: "\n").map(String.init)
    }

    // MARK: a stolen key speaking for another replica

    /// T's key (trusted) sends a bundle naming another trusted key, U's, as the identity of A,
    /// which B knows (B is A's clone) but has never seen sign. A relay's word binds nothing:
    /// A's own first signature does, and A's genuine changes still reach B.
    func testARelayCannotChooseTheKeyOfAReplicaNotYetSeen() throws {
        let thief = try h.handKey("T"), other = try h.handKey("U")
        let aID = try h.knowledgeID(a)
        var bundle = HandBundle(
            sites: [HandSite(id: UUID().uuidString, name: "T", knowledge: 0), HandSite(id: aID, name: "A", knowledge: 0)],
            senderSeq: 0, senderHLC: Int64(Date().timeIntervalSince1970 * 1000), signer: thief)
        bundle.identities = [(0, thief.identity), (1, other.identity)]
        let path = h.path("claim.sqsb")
        try bundle.write(to: path)
        try h.ok(["import", b, path], key: "B")
        XCTAssertNotEqual(try fingerprint(of: "A", on: b), other.fingerprint)

        try h.sqlite(a, "INSERT INTO t VALUES ('r4', 'from A');")
        try h.send((a, "A"), to: (b, "B"))
        XCTAssertEqual(try ids(b), ["r1", "r2", "r3", "r4"])
        let pinned = try fingerprint(of: "A", on: b)
        XCTAssertTrue(pinned.hasPrefix("SHA256:") && pinned != other.fingerprint, pinned)
    }

    func testStolenKeySpeakingForAnotherReplicaIsRefusedWithBothFingerprints() throws {
        try h.send((b, "B"), to: (a, "A"))
        try h.send((c, "C"), to: (a, "A"))
        let bKey = try fingerprint(of: "B", on: a)
        let cKey = try fingerprint(of: "C", on: a)
        XCTAssertTrue(bKey.hasPrefix("SHA256:") && cKey.hasPrefix("SHA256:") && bKey != cKey, "\(bKey) \(cKey)")
        let status = try h.okJSON(["status", a])
        let peers = status["peers"] as? [[String: Any]] ?? []
        XCTAssertEqual(peers.first { $0["name"] as? String == "B" }?["key_fingerprint"] as? String, bKey, "\(status)")
        let human = try h.ok(["peers", a])
        XCTAssertTrue(human.stdout.contains("key \(bKey)"), human.stdout)

        // C's key (trusted: it is in allowed_signers) exports a copy of B's database as B.
        let stolen = try stolenCopy(of: b, as: "stolen", "INSERT INTO t VALUES ('evil', 'planted');")
        let forged = h.path("forged.sqsb")
        try h.ok(["export", stolen, "-o", forged], key: "C")
        let before = try h.fullDump(a)
        let refused = try h.sqsync(["import", a, forged], key: "A")
        XCTAssertEqual(refused.status, 3, refused.stderr)
        XCTAssertEqual(refused.stderrLines.count, 1, refused.stderr)
        for word in ["B", try h.knowledgeID(b), bKey, cKey] {
            XCTAssertTrue(refused.stderr.contains(word), "the message should name \(word): \(refused.stderr)")
        }
        XCTAssertEqual(try h.fullDump(a), before, "nothing may change")

        // B's own key still works, and the pin stays.
        try h.send((b, "B"), to: (a, "A"))
        XCTAssertFalse(try ids(a).contains("evil"))
        XCTAssertEqual(try fingerprint(of: "B", on: a), bKey)
    }

    func testAClonedReplicaMustGetItsOwnKeyBeforeItExports() throws {
        _ = try h.export(a, as: "A")  // A pins its key
        let copy = h.path("D.db")
        try h.ok(["clone", a, copy, "--name", "D"])
        let refused = try h.sqsync(["export", copy, "-o", h.path("d.sqsb")], key: "A")
        XCTAssertEqual(refused.status, 1, refused.stderr)
        XCTAssertTrue(refused.stderr.contains("give this replica its own key (sqsync keygen)"), refused.stderr)
        try h.makeKey("D")
        try h.send((copy, "D"), to: (a, "A"))
        XCTAssertTrue(try fingerprint(of: "D", on: a).hasPrefix("SHA256:"))
    }

    func testForgedAcknowledgementsAreNotBelieved() throws {
        // B and C know A; A knows B (pinned) and C.
        try h.send((a, "A"), to: (b, "B"))
        try h.send((a, "A"), to: (c, "C"))
        try h.send((b, "B"), to: (a, "A"))
        try h.send((c, "C"), to: (a, "A"))
        try h.sqlite(a, "DELETE FROM t WHERE id IN ('r1', 'r2');")
        try h.send((a, "A"), to: (c, "C"))
        try h.send((c, "C"), to: (a, "A"))  // C acknowledges the deletions; B has not seen them

        // C's owner makes a statement "B holds everything" with C's key (from a copy of B that
        // claims more of A than B holds), and also sets C's plain acknowledgement table for B.
        let aID = try h.knowledgeID(a), bID = try h.knowledgeID(b)
        let fakeB = try stolenCopy(
            of: b, as: "fakeB", #"UPDATE "_sqsync_sites" SET "known_seq" = 1000 WHERE "knowledge_id" = '\#(aID)';"#)
        try h.ok(["export", fakeB, "-o", h.path("fake.sqsb")], key: "C")
        try h.sqlite(
            c,
            """
            ATTACH '\(fakeB)' AS fake;
            INSERT OR REPLACE INTO "_sqsync_statements" SELECT * FROM fake."_sqsync_statements" WHERE "replica" = '\(bID)';
            UPDATE "_sqsync_statements" SET "counter" = 1000000 WHERE "replica" = '\(bID)';
            INSERT OR REPLACE INTO "_sqsync_acks" SELECT p."site", s."site", 1000 FROM "_sqsync_sites" p, "_sqsync_sites" s
              WHERE p."knowledge_id" = '\(bID)';
            """)
        let fromC = try h.export(c, as: "C")
        let imported = try h.ok(["import", a, fromC], key: "A")
        XCTAssertTrue(imported.stderr.contains("not signed by their replica's key"), imported.stderr)

        let purge = try h.okJSON(["purge", a], key: "A")
        XCTAssertEqual(purge["tombstones_purged"] as? Int, 0, "B never saw the deletions: \(purge)")
        XCTAssertEqual(purge["held_back_by"] as? [String], ["B"], "\(purge)")
        // B's real acknowledgement lets the purge go.
        try h.send((a, "A"), to: (b, "B"))
        try h.send((b, "B"), to: (a, "A"))
        XCTAssertEqual(try h.okJSON(["purge", a], key: "A")["tombstones_purged"] as? Int, 2)
    }

    // MARK: relay of signed acknowledgements

    func testRelayedSignedAcknowledgementsLetPurgeProceed() throws {
        // A and C never exchange bundles directly: B carries C's acknowledgement to A.
        try h.send((a, "A"), to: (b, "B"))
        try h.send((b, "B"), to: (c, "C"))
        try h.sqlite(a, "DELETE FROM t WHERE id = 'r3';")
        try h.send((a, "A"), to: (b, "B"))
        try h.send((b, "B"), to: (c, "C"))
        try h.send((c, "C"), to: (b, "B"))
        let held = try h.okJSON(["purge", a, "--dry-run"], key: "A")
        XCTAssertEqual(held["tombstones_purged"] as? Int, 0, "\(held)")
        try h.send((b, "B"), to: (a, "A"))
        let purged = try h.okJSON(["purge", a], key: "A")
        XCTAssertEqual(purged["tombstones_purged"] as? Int, 1, "\(purged)")
        XCTAssertEqual(purged["held_back_by"] as? [String], [], "\(purged)")
        XCTAssertTrue(try fingerprint(of: "C", on: a).hasPrefix("SHA256:"), "A pinned C from its relayed statement")
    }

    // MARK: rotation

    func testRotationReachesPeersDirectlyAndThroughARelay() throws {
        try h.send((a, "A"), to: (b, "B"))
        try h.send((b, "B"), to: (c, "C"))
        let oldKey = try fingerprint(of: "A", on: c)
        XCTAssertEqual(try fingerprint(of: "A", on: b), oldKey)
        // A thief's copy of A, made before the rotation, keeps the old key.
        let oldCopy = try stolenCopy(of: a, as: "oldA")

        // The new key is not added to allowed_signers: the move signed by the old key suffices.
        let newKeyPath = h.path("A-new.key")
        let rotated = try h.sqsync(["keygen", "--rotate", a, "--out", newKeyPath, "--name", "A", "--json"], key: "A")
        XCTAssertEqual(rotated.status, 0, rotated.stderr)
        let newKey = h.json(rotated)["fingerprint"] as? String ?? ""
        XCTAssertEqual(h.json(rotated)["rotated_from"] as? String, oldKey)
        XCTAssertNotEqual(newKey, oldKey)
        let withOld = try h.sqsync(["export", a, "-o", h.path("old.sqsb")], key: "A")
        XCTAssertEqual(withOld.status, 1, "A itself refuses its old key: \(withOld.stderr)")

        try h.sqlite(a, "INSERT INTO t VALUES ('new1', 'after rotation');")
        let first = h.path("rotated1.sqsb")
        try h.ok(["export", a, "-o", first, "--key", newKeyPath])
        try h.ok(["import", b, first], key: "B")
        XCTAssertEqual(try fingerprint(of: "A", on: b), newKey, "B follows the move directly")
        try h.send((b, "B"), to: (c, "C"))
        XCTAssertEqual(try fingerprint(of: "A", on: c), newKey, "C follows the move through B's bundle")

        try h.sqlite(a, "INSERT INTO t VALUES ('new2', 'signed with the new key');")
        let second = h.path("rotated2.sqsb")
        try h.ok(["export", a, "-o", second, "--key", newKeyPath])
        try h.ok(["import", c, second], key: "C")
        XCTAssertTrue(try ids(c).contains("new2"))

        // The old key no longer speaks for A, anywhere.
        try h.sqlite(oldCopy, "INSERT INTO t VALUES ('evil', 'old key');")
        let stale = try h.export(oldCopy, as: "A")
        for (db, name) in [(b, "B"), (c, "C")] {
            let before = try h.fullDump(db)
            let refused = try h.sqsync(["import", db, stale], key: name)
            XCTAssertEqual(refused.status, 3, refused.stderr)
            XCTAssertTrue(refused.stderr.contains(oldKey) && refused.stderr.contains(newKey), refused.stderr)
            XCTAssertEqual(try h.fullDump(db), before)
        }

        // Nor does it give birth to a new replica that peers accept (docs/KEYS.md, "Identity").
        let newborn = h.path("newborn.db")
        try h.sqlite(newborn, "CREATE TABLE t(id TEXT PRIMARY KEY, v TEXT); INSERT INTO t VALUES ('born', 'old key');")
        try h.ok(["init", newborn, "--name", "newborn"], key: "A")
        try h.ok(["track", newborn, "--all"])
        let born = try h.export(newborn, as: "A")
        for (db, name) in [(b, "B"), (c, "C")] {
            let before = try h.fullDump(db)
            let refused = try h.sqsync(["import", db, born], key: name)
            XCTAssertEqual(refused.status, 3, refused.stderr)
            XCTAssertTrue(refused.stderr.contains("moved away from, which makes no new replica"), refused.stderr)
            XCTAssertEqual(try h.fullDump(db), before)
        }
    }
}

/// The same attack through a mailbox: a folder, then SSH.
final class KeyBindingMailboxTests: XCTestCase {
    private var h: Harness!
    private var a = "", b = ""

    override func setUpWithError() throws {
        h = try Harness()
        a = try h.makeReplica(
            "A", schema: "CREATE TABLE t(id TEXT PRIMARY KEY, v TEXT); INSERT INTO t VALUES ('r1', 'one');", keyBound: false)
        b = try h.cloneReplica(a, as: "B", keyBound: false)
        try h.makeKey("C")
    }

    override func tearDown() { h = nil }

    /// B's copy syncs with C's key: A refuses its bundle and ignores its acknowledgement file,
    /// and the deletion B never saw is not purged.
    private func assertStolenKeyRefused(_ target: String, _ extra: [String]) throws {
        try h.syncOK(a, as: "A", target, extra)
        try h.syncOK(b, as: "B", target, extra)
        try h.syncOK(a, as: "A", target, extra)
        try h.sqlite(a, "DELETE FROM t WHERE id = 'r1';")
        try h.syncOK(a, as: "A", target, extra)

        let aID = try h.knowledgeID(a)
        let stolen = h.path("stolen.db")
        try FileManager.default.copyItem(atPath: b, toPath: stolen)
        try h.ok(["init", stolen])  // the thief says it was moved
        try h.sqlite(
            stolen,
            """
            UPDATE "_sqsync_sites" SET "signing_key" = NULL; DELETE FROM "_sqsync_statements"; DELETE FROM "_sqsync_keys";
            UPDATE "_sqsync_sites" SET "known_seq" = 1000 WHERE "knowledge_id" = '\(aID)';
            INSERT INTO t VALUES ('evil', 'planted');
            """)
        let thief = try h.sync(stolen, as: "C", target, extra)
        XCTAssertEqual(thief.status, 0, thief.stderr)

        let result = try h.sync(a, as: "A", target, extra)
        XCTAssertEqual(result.status, 3, result.stderr)
        XCTAssertTrue(result.stderr.contains("signed by key"), result.stderr)
        XCTAssertTrue(result.stderr.contains("ignored"), "the forged acknowledgement file: \(result.stderr)")
        XCTAssertEqual(try h.sqlite(a, "SELECT count(*) FROM t WHERE id = 'evil';"), "0\n")
        let purge = try h.okJSON(["purge", a], key: "A")
        XCTAssertEqual(purge["tombstones_purged"] as? Int, 0, "\(purge)")
        XCTAssertEqual(purge["held_back_by"] as? [String], ["B"], "\(purge)")
    }

    func testStolenKeyIsRefusedThroughAFolderMailbox() throws {
        let mailbox = h.path("mailbox")
        try FileManager.default.createDirectory(atPath: mailbox, withIntermediateDirectories: true)
        try assertStolenKeyRefused(mailbox, [])
    }

    func testStolenKeyIsRefusedOverSSH() throws {
        let server = try SSHServerFixture()
        defer { _ = server }
        try assertStolenKeyRefused(
            server.url(path: server.remoteDirectory),
            ["--ssh-key", server.clientKeyPath, "--known-hosts", server.knownHostsPath])
    }
}
