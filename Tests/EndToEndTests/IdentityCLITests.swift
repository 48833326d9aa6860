import Foundation
import TestSupport
import XCTest

/// A replica is a key plus a birth (docs/KEYS.md, "Identity"): copies made with `cp`, two
/// databases on one key and a replica made again after a lost disk each end with every
/// replica holding every write, with the built binary and folder mailboxes.
final class IdentityCLITests: XCTestCase {
    private var h: Harness!

    private static let schema = "CREATE TABLE notes(id TEXT PRIMARY KEY, body TEXT);"

    override func setUpWithError() throws { h = try Harness() }
    override func tearDown() { h = nil }

    private func notes(_ db: String) throws -> String { try h.dump(db, table: "notes", orderBy: "id") }

    /// `sqsync init` with `key`'s key file, the tracked table made first.
    private func initReplica(_ name: String, key: String, rows: String = "") throws -> String {
        let db = h.path("\(name).db")
        try h.sqlite(db, Self.schema + rows)
        try h.ok(["init", db, "--name", name], key: key)
        try h.ok(["track", db, "--all"])
        return db
    }

    /// A, and B cloned from it, after two rounds through the folder mailbox `shared`.
    private func convergedPair(seed rows: String) throws -> (a: String, b: String, folder: String) {
        let a = try h.makeReplica("A", schema: Self.schema + "INSERT INTO notes VALUES \(rows);")
        let b = try h.cloneReplica(a, as: "B")
        let folder = try h.folder("shared")
        for _ in 0..<2 {
            try h.syncOK(a, as: "A", folder)
            try h.syncOK(b, as: "B", folder)
        }
        return (a, b, folder)
    }

    // MARK: cp instead of clone

    func testACopyMadeWithCpSaysSoAndAfterReidentifyEveryWriteOfBothReachesEveryone() throws {
        let (a, b, folder) = try convergedPair(seed: "('n1', 'seed'), ('n2', 'seed')")
        try h.ok(["status", a])  // settle the WAL, so the copy is the whole database
        let a2 = try h.copyFile(a, to: "A2.db")
        try h.sqlite(a, "UPDATE notes SET body = 'from A' WHERE id = 'n1';")
        try h.sqlite(a2, "UPDATE notes SET body = 'from the copy' WHERE id = 'n2'; INSERT INTO notes VALUES ('c1', 'copy');")

        // The order the user ran: the copy, B, A, B, the copy.
        let first = try h.sync(a2, as: "A", folder)
        XCTAssertEqual(first.status, 1, first.stderr)
        XCTAssertEqual(first.stderrLines.count, 1, first.stderr)
        XCTAssertTrue(first.stderr.contains(a2) && first.stderr.contains("copy"), first.stderr)
        XCTAssertTrue(first.stderr.contains("sqsync reidentify \(a2)"), "the fix: \(first.stderr)")
        try h.syncOK(b, as: "B", folder)
        try h.syncOK(a, as: "A", folder)
        try h.syncOK(b, as: "B", folder)
        XCTAssertEqual(try h.sync(a2, as: "A", folder).status, 1, "still a copy")
        XCTAssertTrue(try notes(b).contains("'from A'"), "nothing of A's is lost meanwhile")

        // The fix it printed; the copy keeps the key it had (one key, two replicas).
        let fixed = try h.okJSON(["reidentify", a2, "--json"], key: "A")
        XCTAssertEqual(fixed["previous_knowledge_id"] as? String, try h.knowledgeID(a))
        XCTAssertEqual(fixed["changes_taken"] as? Int, 2, "\(fixed)")
        XCTAssertNotEqual(try h.knowledgeID(a2), try h.knowledgeID(a))
        XCTAssertEqual(try h.okJSON(["status", a2])["name"] as? String, "A2", "named after its file, not its original")
        for _ in 0..<3 {
            for (db, key) in [(a2, "A"), (b, "B"), (a, "A")] { try h.syncOK(db, as: key, folder) }
        }
        let expected = "'c1'|'copy'\n'n1'|'from A'\n'n2'|'from the copy'\n"
        for db in [a, b, a2] { XCTAssertEqual(try notes(db), expected, db) }
        for (db, key) in [(a, "A"), (b, "B"), (a2, "A")] {
            let doctor = try h.sqsync(["doctor", db], key: key)
            XCTAssertEqual(doctor.status, 0, "\(db): \(doctor.stdout)\(doctor.stderr)")
        }
    }

    /// A copy sqsync was told was only moved (so the check at open cannot see it) still loses
    /// nothing: the original finds the copy's bundle in its own outbox and refuses to go on,
    /// and a third replica that receives both refuses the second.
    func testACopyTakenForMovedIsFoundByTheOriginalAndByAThirdReplica() throws {
        let a = try h.makeReplica("A", schema: Self.schema + "INSERT INTO notes VALUES ('n1', 'seed');")
        let b = try h.cloneReplica(a, as: "B"), c = try h.cloneReplica(a, as: "C")
        let folder = try h.folder("shared")
        try h.syncOK(a, as: "A", folder)
        try h.syncOK(b, as: "B", folder)
        try h.ok(["status", a])
        let a2 = try h.copyTakenForMoved(a, to: "A2.db")
        try h.sqlite(a2, "INSERT INTO notes VALUES ('c1', 'copy');")
        try h.syncOK(a2, as: "A", folder)
        try h.sqlite(a, "INSERT INTO notes VALUES ('a1', 'original');")
        let original = try h.sync(a, as: "A", folder)
        XCTAssertEqual(original.status, 1, original.stderr)
        XCTAssertTrue(original.stderr.contains("copy") && original.stderr.contains("sqsync reidentify"), original.stderr)

        // By hand, a third replica that took the copy's bundle says, at A's, that A signed two
        // different changes under one number, with both fixes. It takes A's all the same:
        // refusing would starve it of every bundle that relays the other, and both files' rows
        // are real writes.
        let fromCopy = try h.export(a2, as: "A", extra: ["--no-encrypt"])
        try h.ok(["import", c, fromCopy], key: "C")
        try h.sqlite(a, "UPDATE notes SET body = 'original, later' WHERE id = 'c1';")
        let fromA = try h.export(a, as: "A", extra: ["--no-encrypt"])
        let clash = try h.sqsync(["import", c, fromA], key: "C")
        XCTAssertEqual(clash.status, 0, clash.stderr)
        XCTAssertTrue(clash.stderr.contains("signed two different changes under the same numbers"), clash.stderr)
        XCTAssertTrue(clash.stderr.contains("copy") && clash.stderr.contains("sqsync reidentify"), clash.stderr)
        let atC = try h.sqlite(c, "SELECT id || '=' || body FROM notes ORDER BY id;")
        XCTAssertEqual(atC, "a1=original\nc1=copy\nn1=seed\n")
    }

    // MARK: one key, two databases

    func testTwoDatabasesMadeWithOneKeyAreTwoReplicasAndConverge() throws {
        try h.makeKey("laptop")
        let x = try initReplica("X", key: "laptop", rows: "INSERT INTO notes VALUES ('x1', 'X');")
        let y = try initReplica("Y", key: "laptop", rows: "INSERT INTO notes VALUES ('y1', 'Y');")
        XCTAssertNotEqual(try h.knowledgeID(x), try h.knowledgeID(y), "a key plus a birth: two identities")
        let stick = try h.folder("stick")
        for _ in 0..<2 {
            for db in [x, y] {
                let result = try h.syncOK(db, as: "laptop", stick)
                XCTAssertFalse(result.stderr.contains("already exists"), result.stderr)
            }
        }
        XCTAssertEqual(try notes(x), "'x1'|'X'\n'y1'|'Y'\n")
        XCTAssertEqual(try notes(y), try notes(x))
        // A clone of one, with that key too (given on purpose), is a third replica.
        let z = h.path("Z.db")
        try h.ok(["clone", y, z, "--name", "Z", "--key", h.keyPath("laptop")])
        XCTAssertFalse([try h.knowledgeID(x), try h.knowledgeID(y)].contains(try h.knowledgeID(z)))
        try h.sqlite(z, "INSERT INTO notes VALUES ('z1', 'Z');")
        for _ in 0..<2 {
            for db in [z, x, y] { try h.syncOK(db, as: "laptop", stick) }
        }
        for db in [x, y, z] { XCTAssertEqual(try notes(db), "'x1'|'X'\n'y1'|'Y'\n'z1'|'Z'\n", db) }
        let status = try h.okJSON(["status", z, "--json"], key: "laptop")
        XCTAssertEqual((status["held"] as? [Any])?.count ?? 0, 0, "\(status)")
    }

    // MARK: a replica made again after a lost disk

    func testAReplicaMadeAgainWithItsSurvivingKeyGetsANewIdentityWhoseChangesFlow() throws {
        let a = try h.makeReplica("A", schema: Self.schema + "INSERT INTO notes VALUES ('a0', 'A');")
        let b = try h.cloneReplica(a, as: "B")
        let folder = try h.folder("shared")
        try h.sqlite(a, "INSERT INTO notes VALUES ('a1', 'A, before the disk died');")
        for _ in 0..<2 {
            try h.syncOK(a, as: "A", folder)
            try h.syncOK(b, as: "B", folder)
        }
        let oldID = try h.knowledgeID(a)
        // The disk dies; its bundles go from the mailbox too.
        try FileManager.default.removeItem(atPath: a)
        try? FileManager.default.removeItem(atPath: a + "-wal")
        try FileManager.default.removeItem(atPath: folder + "/sqsync/outbox/\(oldID)")

        let remade = h.path("A_new.db")
        try h.ok(["init", remade, "--create", "--name", "A"], key: "A")
        try h.sqlite(remade, Self.schema)
        try h.ok(["track", remade, "--all"])
        try h.sqlite(remade, "INSERT INTO notes VALUES ('r1', 'made again'), ('r2', 'made again');")
        XCTAssertNotEqual(try h.knowledgeID(remade), oldID, "a new birth, a new identity")
        for _ in 0..<3 {
            try h.syncOK(remade, as: "A", folder)
            try h.syncOK(b, as: "B", folder)
        }
        XCTAssertEqual(try notes(b), try notes(remade))
        XCTAssertTrue(try notes(b).contains("'r2'"), "the new identity's changes 1–2 are not taken for the old one's")
        XCTAssertTrue(try notes(remade).contains("'a1'"), "the old identity's rows come back through B")

        let peers = try XCTUnwrap(try h.okJSON(["peers", b, "--json"], key: "B")["peers"] as? [[String: Any]])
        let old = try XCTUnwrap(peers.first { $0["knowledge_id"] as? String == oldID }, "\(peers)")
        XCTAssertEqual(old["silent"] as? Bool, true, "\(old)")
        XCTAssertEqual(old["succeeded_by"] as? String, try h.knowledgeID(remade))
        XCTAssertTrue(try h.ok(["peers", b], key: "B").stdout.contains("sqsync peers retire"))
        // Retired, it holds nothing back: B purges once the new identity acknowledged.
        try h.sqlite(b, "DELETE FROM notes WHERE id = 'a0';")
        for _ in 0..<2 {
            try h.syncOK(b, as: "B", folder)
            try h.syncOK(remade, as: "A", folder)
        }
        XCTAssertEqual(try h.okJSON(["purge", b, "--json"], key: "B")["held_back_by"] as? [String], ["A"])
        try h.ok(["peers", "retire", b, oldID], key: "B")
        let purge = try h.okJSON(["purge", b, "--json"], key: "B")
        XCTAssertEqual(purge["held_back_by"] as? [String], [], "\(purge)")
        XCTAssertEqual(purge["tombstones_purged"] as? Int, 1, "\(purge)")
    }

    // MARK: reidentify on a file never taken for a copy

    func testReidentifyOnAReplicaNotFoundToBeACopyKeepsWhatPeersLackAsItsOwn() throws {
        let (a, b, folder) = try convergedPair(seed: "('n1', 'seed')")
        try h.sqlite(a, "INSERT INTO notes VALUES ('unsent', 'A'); UPDATE notes SET body = 'A, unsent' WHERE id = 'n1';")
        try h.makeKey("A2")
        let result = try h.okJSON(["reidentify", a, "--json"], key: "A2")
        XCTAssertEqual(result["changes_taken"] as? Int, 2, "the insert and the update no peer acknowledged: \(result)")
        for _ in 0..<2 {
            try h.syncOK(a, as: "A2", folder)
            try h.syncOK(b, as: "B", folder)
        }
        XCTAssertEqual(try notes(b), try notes(a))
        XCTAssertTrue(try notes(b).contains("'A, unsent'"))
    }
}
