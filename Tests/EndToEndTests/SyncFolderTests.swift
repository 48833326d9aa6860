import Foundation
import TestSupport
import SQLiteDatabase
import XCTest

/// `sqsync sync` through one shared folder: three replicas (B and C cloned from A), writes by the
/// `sqlite3` shell between rounds, and a plain SQLite reference database that gets the same writes.
final class SyncFolderTests: XCTestCase {
    private var h: Harness!
    private var a = "", b = "", c = "", reference = "", box = ""
    private var replicas: [(db: String, name: String)] { [(a, "A"), (b, "B"), (c, "C")] }

    private static let schema = """
        CREATE TABLE item(id TEXT PRIMARY KEY, name TEXT, qty INTEGER, price REAL, data BLOB);
        CREATE TABLE note(k TEXT PRIMARY KEY, body TEXT);
        """
    private static let seed = """
        INSERT INTO item VALUES ('i1', 'bolt', 10, 0.25, x'00ff'), ('i2', 'nut', 20, 0.1, NULL), ('i3', 'washer', 5, 1e-3, x'');
        INSERT INTO note VALUES ('n1', 'first');
        """

    override func setUpWithError() throws {
        h = try Harness()
        a = try h.makeReplica("A", schema: Self.schema + Self.seed)
        b = try h.cloneReplica(a, as: "B")
        c = try h.cloneReplica(a, as: "C")
        reference = try h.makeReference("reference", schema: Self.schema + Self.seed)
        box = h.path("shared")
        try FileManager.default.createDirectory(atPath: box, withIntermediateDirectories: true)
    }

    override func tearDown() { h = nil }

    /// Writes `sql` through the sqlite3 shell into a replica and into the reference.
    private func write(_ db: String, _ statements: String..., file: StaticString = #filePath, line: UInt = #line) throws {
        try h.write(db, reference: reference, statements, file: file, line: line)
    }

    private func content(_ db: String) throws -> String {
        try h.dump(db, table: "item", orderBy: "id") + "--\n" + h.dump(db, table: "note", orderBy: "k")
    }

    private func assertConverged(file: StaticString = #filePath, line: UInt = #line) throws {
        let expected = try content(reference)
        for replica in replicas {
            XCTAssertEqual(
                try content(replica.db), expected, "replica \(replica.name) differs from the expected content", file: file,
                line: line)
        }
    }

    /// One sync of each replica, in the given order, with `-q`: nothing may be printed.
    private func quietPass(_ order: [(db: String, name: String)], file: StaticString = #filePath, line: UInt = #line) throws {
        for replica in order {
            let result = try h.syncOK(replica.db, as: replica.name, box, ["-q"], file: file, line: line)
            XCTAssertEqual(result.stdout, "", "-q printed on stdout (\(replica.name))", file: file, line: line)
            XCTAssertEqual(result.stderr, "", "-q printed on stderr (\(replica.name))", file: file, line: line)
        }
    }

    /// After any sync: at most one bundle per outbox, no leftover temporary files anywhere.
    private func assertTidyMailbox(file: StaticString = #filePath, line: UInt = #line) {
        for (id, names) in outboxes(box) {
            XCTAssertLessThanOrEqual(
                names.filter { $0.hasSuffix(".sqsb") }.count, 1, "outbox \(id) holds \(names)", file: file, line: line)
        }
        let temporary = filesBelow(box).filter { ($0 as NSString).lastPathComponent.hasPrefix(".tmp-") }
        XCTAssertEqual(temporary, [], "temporary files left in the mailbox", file: file, line: line)
        let stray = filesBelow(box).filter {
            !$0.hasPrefix("sqsync/outbox/") && !$0.hasPrefix("sqsync/acks/") && !isReadersKeyFile($0)
        }
        XCTAssertEqual(stray, [], "files outside the mailbox layout", file: file, line: line)
    }

    // MARK: - Tests

    func testThreeReplicasConvergeThroughOneFolderOverFourRounds() throws {
        // Each replica visits the folder once, so all three are its readers from the start
        // (see testLateJoinerCatchesUpAfterTheOthersSyncAgain for one that joins later).
        try quietPass(replicas)
        XCTAssertEqual(bundlesIn(box), [], "nothing to send before anyone wrote")

        // Round 1: inserts everywhere, an update on B.
        try write(a, "INSERT INTO item VALUES ('a1', 'from A', 1, 1.5, x'0a')")
        try write(b, "UPDATE item SET qty = 11, name = 'bolt M6' WHERE id = 'i1'")
        try write(c, "INSERT INTO note VALUES ('c1', 'from C')")
        try quietPass(replicas)
        assertTidyMailbox()

        // Round 2: a delete on A, an insert on B, an update on C; another order.
        try write(a, "DELETE FROM item WHERE id = 'i2'")
        try write(
            b,
            "INSERT INTO item VALUES ('b1', 'from B', 2, -0.5, NULL), ('b2', 'ünïcødé ✓', 9223372036854775807, 2.5e300, x'deadbeef')"
        )
        try write(c, "UPDATE note SET body = 'first, edited by C' WHERE k = 'n1'")
        try quietPass([(c, "C"), (a, "A"), (b, "B")])
        assertTidyMailbox()

        // Round 3: each edits rows another replica made.
        try write(a, "UPDATE note SET body = 'C''s note, edited by A' WHERE k = 'c1'")
        try write(b, "UPDATE item SET price = 3.75 WHERE id = 'a1'")
        try write(c, "UPDATE item SET data = x'cafe', qty = NULL WHERE id = 'a1'")
        for replica in [(db: b, name: "B"), (db: c, name: "C"), (db: a, name: "A")] {
            let result = try h.syncOK(replica.db, as: replica.name, box)
            XCTAssertEqual(result.stdout, "", "without --json nothing goes to stdout")
            XCTAssertEqual(result.stderrLines.count, 1, "one summary line on stderr: \(result.stderr)")
            XCTAssertTrue(result.stderr.contains(box), "the summary names the target: \(result.stderr)")
        }
        assertTidyMailbox()

        // Round 4: more inserts, an update and a delete of a row that came from B.
        try write(a, "INSERT INTO item VALUES ('a2', 'late A', 3, 0.0, NULL)")
        try write(b, "DELETE FROM item WHERE id = 'b2'")
        try write(c, "INSERT INTO note VALUES ('c2', 'late C')", "UPDATE item SET name = 'washer XL' WHERE id = 'i3'")
        try quietPass(replicas)
        assertTidyMailbox()

        // One more pass carries what the last replica of round 4 wrote to the other two.
        try quietPass(replicas)
        try assertConverged()
        assertTidyMailbox()
        XCTAssertEqual(try h.sqlite(a, "SELECT count(*) FROM item WHERE id IN ('i2', 'b2');"), "0\n", "deleted rows stay deleted")

        for replica in replicas {
            XCTAssertEqual(try h.sqlite(replica.db, "PRAGMA integrity_check;"), "ok\n")
            try h.ok(["doctor", replica.db], key: replica.name)
        }
    }

    func testJSONReportsWhatCameInAndWentOut() throws {
        // Everyone meets once, so each has acknowledged the others.
        try quietPass(replicas)
        try quietPass(replicas)

        try write(
            b, "INSERT INTO item VALUES ('b1', 'from B', 1, 0.5, NULL), ('b2', 'also B', 2, 1.5, x'01')",
            "UPDATE item SET qty = 99 WHERE id = 'i1'")
        let out = try h.syncJSON(b, as: "B", box)
        for field in ["bundles_in", "changes_in", "conflicts", "held", "rejected", "bundle_out", "rows_out", "removed", "target"]
        {
            XCTAssertNotNil(out[field], "--json lacks \(field): \(out)")
        }
        XCTAssertEqual(out["target"] as? String, box)
        XCTAssertEqual(out["bundles_in"] as? Int, 0, "\(out)")
        XCTAssertEqual(out["changes_in"] as? Int, 0, "\(out)")
        XCTAssertEqual(out["conflicts"] as? Int, 0, "\(out)")
        XCTAssertEqual(out["held"] as? Int, 0, "\(out)")
        XCTAssertEqual((out["rejected"] as? [Any])?.count, 0, "\(out)")
        XCTAssertEqual(out["rows_out"] as? Int, 3, "B wrote three rows the others lack: \(out)")
        let bundleName = try XCTUnwrap(out["bundle_out"] as? String, "B wrote something new, so a bundle goes out: \(out)")
        let bID = try h.knowledgeID(b)
        XCTAssertEqual(
            outboxes(box)[bID]?.filter { $0.hasSuffix(".sqsb") }, [bundleName], "bundle_out names the file in B's outbox")
        XCTAssertFalse(bundleName.contains(":"), "bundle names must be valid on FAT: \(bundleName)")

        // C reads B's bundle first, then A, the last reader, who also clears B's bundle away.
        // (changes_in counts rows changed, so a relayed copy of the same changes adds nothing.)
        let intoC = try h.syncJSON(c, as: "C", box)
        XCTAssertEqual(intoC["bundles_in"] as? Int, 1, "\(intoC)")
        XCTAssertEqual(intoC["changes_in"] as? Int, 3, "\(intoC)")
        XCTAssertEqual(intoC["conflicts"] as? Int, 0, "\(intoC)")
        XCTAssertEqual(intoC["held"] as? Int, 0, "\(intoC)")
        XCTAssertEqual((intoC["rejected"] as? [Any])?.count, 0, "\(intoC)")
        // C may relay B's rows to A (A's acknowledgement lacks them); it has nothing else to send.
        if intoC["bundle_out"] is String { XCTAssertEqual(intoC["rows_out"] as? Int, 3, "\(intoC)") }

        let intoA = try h.syncJSON(a, as: "A", box)
        XCTAssertGreaterThanOrEqual(intoA["bundles_in"] as? Int ?? 0, 1, "\(intoA)")
        XCTAssertEqual(intoA["changes_in"] as? Int, 3, "\(intoA)")
        XCTAssertTrue(intoA["bundle_out"] is NSNull, "every reader holds everything A holds: \(intoA)")
        XCTAssertGreaterThanOrEqual(
            intoA["removed"] as? Int ?? 0, 1, "A was the last reader of B's bundle, so A removes it: \(intoA)")
        XCTAssertEqual(outboxes(box)[bID]?.filter { $0.hasSuffix(".sqsb") }, [], "B's bundle is gone once every reader has it")
        try assertConverged()
    }

    func testSecondSyncWithNothingNewWritesNoBundle() throws {
        try write(a, "INSERT INTO item VALUES ('a1', 'from A', 1, 1.5, NULL)")
        try write(c, "UPDATE item SET qty = 0 WHERE id = 'i2'")
        try quietPass(replicas)
        try quietPass(replicas)
        try assertConverged()
        assertTidyMailbox()

        // Every reader now holds everything: nothing new anywhere.
        let before = outboxes(box)
        for replica in replicas {
            let result = try h.syncJSON(replica.db, as: replica.name, box)
            XCTAssertEqual(result["bundles_in"] as? Int, 0, "\(replica.name): \(result)")
            XCTAssertEqual(result["changes_in"] as? Int, 0, "\(replica.name): \(result)")
            XCTAssertTrue(result["bundle_out"] is NSNull, "\(replica.name) wrote a bundle with nothing new: \(result)")
            XCTAssertEqual(result["rows_out"] as? Int, 0, "\(replica.name): \(result)")
            XCTAssertEqual(outboxes(box), before, "\(replica.name)'s sync changed the outboxes")
        }
        XCTAssertEqual(bundlesIn(box), [], "once every reader holds everything, no bundle is left in the mailbox")
        let plain = try h.syncOK(a, as: "A", box)
        XCTAssertEqual(plain.stderrLines.count, 1, plain.stderr)
        try assertConverged()
    }

    func testQuietPrintsNothingEvenWhenBundlesMove() throws {
        try quietPass(replicas)  // every replica becomes a reader of the folder
        try write(a, "INSERT INTO item VALUES ('a1', 'x', 1, 1.0, NULL)")
        for replica in replicas {
            let result = try h.syncOK(replica.db, as: replica.name, box, ["--quiet"])
            XCTAssertEqual(result.stdout + result.stderr, "", "\(replica.name): --quiet printed something")
        }
        XCTAssertEqual(try content(c), try content(reference))
    }

    /// A replica that has never visited the folder is not one of its readers yet, so the others
    /// may clear a bundle it lacks; it gets the data once it has left an acknowledgement and the
    /// writer has synced again.
    func testLateJoinerCatchesUpAfterTheOthersSyncAgain() throws {
        try write(a, "INSERT INTO item VALUES ('a1', 'x', 1, 1.0, NULL)")
        try quietPass([(a, "A"), (b, "B")])
        XCTAssertEqual(try content(b), try content(reference))
        try quietPass([(c, "C"), (a, "A"), (c, "C")])
        XCTAssertEqual(try content(c), try content(reference), "C joined late and never got A's row")
    }

    func testMissingFolderIsOneLineFailureAndDatabaseUntouched() throws {
        let before = h.fileBytes(a)
        let missing = h.path("no-such-stick")
        let result = try h.sync(a, as: "A", missing)
        XCTAssertEqual(result.status, 1, result.stderr)
        XCTAssertEqual(result.stderrLines.count, 1, result.stderr)
        XCTAssertTrue(result.stderr.contains(missing), result.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: missing), "sync must not create a missing target")
        XCTAssertEqual(h.fileBytes(a), before)
    }
}
