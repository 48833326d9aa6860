import Foundation
import XCTest

/// Merging through the CLI: three replicas (B and C cloned from A), writes by the `sqlite3` shell.
final class MergeCLITests: XCTestCase {
    private var h: Harness!
    private var a = "", b = "", c = ""
    private var replicas: [(db: String, name: String)] { [(a, "A"), (b, "B"), (c, "C")] }

    private static let schema = """
        CREATE TABLE t(id TEXT PRIMARY KEY, a TEXT, b TEXT);
        CREATE TABLE u(k TEXT PRIMARY KEY, n INTEGER);
        INSERT INTO t VALUES ('1', 'a1', 'b1'), ('2', 'a2', 'b2'), ('3', 'a3', 'b3');
        INSERT INTO u VALUES ('x', 1);
        """

    override func setUpWithError() throws {
        h = try Harness()
        a = try h.makeReplica("A", schema: Self.schema)
        b = try h.cloneReplica(a, as: "B")
        c = try h.cloneReplica(a, as: "C")
    }

    override func tearDown() { h = nil }

    private func rows(_ db: String) throws -> String { try h.dump(db, table: "t", orderBy: "id") }

    /// Every replica exports everything, then imports the other two bundles.
    private func meshSync() throws {
        let bundles = try replicas.map { try h.export($0.db, as: $0.name) }
        for (i, target) in replicas.enumerated() {
            try h.ok(["import", target.db] + bundles.enumerated().filter { $0.offset != i }.map(\.element), key: target.name)
        }
    }

    private func assertAllEqual(_ expected: String, file: StaticString = #filePath, line: UInt = #line) throws {
        for replica in replicas {
            XCTAssertEqual(try rows(replica.db), expected, "replica \(replica.name)", file: file, line: line)
        }
        XCTAssertEqual(try h.dump(a, table: "u", orderBy: "k"), try h.dump(b, table: "u", orderBy: "k"), file: file, line: line)
        XCTAssertEqual(try h.dump(a, table: "u", orderBy: "k"), try h.dump(c, table: "u", orderBy: "k"), file: file, line: line)
    }

    private func knowledge(_ db: String) throws -> [String: Int] {
        try h.okJSON(["status", db])["knowledge"] as? [String: Int] ?? [:]
    }

    /// A later wall-clock millisecond than anything written so far.
    private func tick() { usleep(20_000) }

    // MARK: concurrent edits

    func testConcurrentEditsOfDifferentColumnsAreBothKept() throws {
        try h.sqlite(a, "UPDATE t SET a = 'A-edit' WHERE id = '1';")
        try h.sqlite(b, "UPDATE t SET b = 'B-edit' WHERE id = '1';")
        try h.sqlite(c, "UPDATE u SET n = 42 WHERE k = 'x';")
        try meshSync()
        try assertAllEqual("'1'|'A-edit'|'B-edit'\n'2'|'a2'|'b2'\n'3'|'a3'|'b3'\n")
        XCTAssertEqual(try h.dump(b, table: "u", orderBy: "k"), "'x'|42\n")
        XCTAssertEqual(try h.conflicts(a).count, 0, "edits of different columns are not conflicts")
    }

    func testSameColumnHasOneWinnerEverywhereAndTheLoserIsLogged() throws {
        try h.sqlite(a, "UPDATE t SET a = 'from-A' WHERE id = '2';")
        tick()
        try h.sqlite(b, "UPDATE t SET a = 'from-B' WHERE id = '2';")
        try meshSync()
        try assertAllEqual("'1'|'a1'|'b1'\n'2'|'from-B'|'b2'\n'3'|'a3'|'b3'\n")
        for db in [a, b] {
            let logged = try h.conflicts(db)
            XCTAssertTrue(
                logged.contains {
                    $0["table_name"] as? String == "t" && $0["column_name"] as? String == "a"
                        && $0["lost_value"] as? String == "from-A"
                }, "\(db): \(logged)")
        }
        let human = try h.ok(["conflicts", a])
        XCTAssertTrue(human.stdout.contains("from-A"), human.stdout)
        // A second round changes nothing.
        try meshSync()
        try assertAllEqual("'1'|'a1'|'b1'\n'2'|'from-B'|'b2'\n'3'|'a3'|'b3'\n")
    }

    func testDeleteBeatsConcurrentUpdate() throws {
        try h.sqlite(a, "DELETE FROM t WHERE id = '3';")
        tick()
        try h.sqlite(b, "UPDATE t SET a = 'late-update', b = 'late' WHERE id = '3';")
        try meshSync()
        try assertAllEqual("'1'|'a1'|'b1'\n'2'|'a2'|'b2'\n")
        let logged = try h.conflicts(b)
        XCTAssertTrue(
            logged.contains { $0["pk"] as? String == "'3'" && $0["lost_value"] as? String == "late-update" },
            "the update that lost to the delete is logged: \(logged)")
        try meshSync()
        try assertAllEqual("'1'|'a1'|'b1'\n'2'|'a2'|'b2'\n")
    }

    func testReinsertAfterSeeingTheDeleteBringsTheRowBack() throws {
        try h.sqlite(a, "DELETE FROM t WHERE id = '1';")
        try h.send((a, "A"), to: (b, "B"))
        XCTAssertEqual(try h.sqlite(b, "SELECT count(*) FROM t WHERE id = '1';"), "0\n")
        tick()
        try h.sqlite(b, "INSERT INTO t VALUES ('1', 'again', NULL);")
        try meshSync()
        try assertAllEqual("'1'|'again'|NULL\n'2'|'a2'|'b2'\n'3'|'a3'|'b3'\n")
    }

    func testRelayCarriesAChangesToCThroughB() throws {
        try h.sqlite(a, "UPDATE t SET b = 'relayed' WHERE id = '2'; INSERT INTO t VALUES ('4', 'new', 'row');")
        let aID = try h.knowledgeID(a)
        try h.send((a, "A"), to: (b, "B"))
        try h.send((b, "B"), to: (c, "C"))
        XCTAssertEqual(try rows(c), try rows(a))
        XCTAssertEqual(try rows(c), "'1'|'a1'|'b1'\n'2'|'a2'|'relayed'\n'3'|'a3'|'b3'\n'4'|'new'|'row'\n")
        XCTAssertEqual(try knowledge(c)[aID], try knowledge(a)[aID], "C's knowledge of A comes through B")
    }

    // MARK: identity

    /// A replica whose clock moved on by importing (no local write since) exports again: that is one
    /// replica moving forward, not two databases sharing a knowledge ID.
    func testReExportAfterImportIsNotMistakenForACopy() throws {
        try h.send((a, "A"), to: (b, "B"))
        try h.sqlite(b, "UPDATE t SET a = 'b-write' WHERE id = '1';")
        try h.send((b, "B"), to: (a, "A"))  // pushes A's clock, A's own seq stays
        let again = try h.export(a, as: "A")
        let result = try h.sqsync(["import", b, again], key: "B")
        XCTAssertEqual(result.status, 0, "a second bundle from the same replica was refused: \(result.stderr)")
        XCTAssertEqual(try rows(b), try rows(a))
    }

    /// Imports into B what `copy`, a file copy of A, exports as A: taken, with one line that
    /// says A signed two different changes under the same numbers and names the way out.
    private func assertCopyIsSaid(_ copy: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let result = try h.sqsync(["import", b, try h.export(copy, as: "A")], key: "B")
        XCTAssertEqual(result.status, 0, result.stderr, file: file, line: line)
        let said = result.stderrLines.filter { $0.contains("signed two different changes under the same numbers") }
        XCTAssertEqual(said.count, 1, result.stderr, file: file, line: line)
        XCTAssertTrue(result.stderr.contains("sqsync reidentify"), result.stderr, file: file, line: line)
    }

    /// A copy's write under a number the original used for another: B says so, naming the
    /// fix, and keeps the later of the two, as every replica that meets both does (a refusal
    /// would starve B of every bundle that relays the copy's changes).
    func testACopysChangeUnderAnUsedNumberIsSaidAndMergedAlike() throws {
        try h.send((a, "A"), to: (b, "B"))
        let copy = try h.copyTakenForMoved(a, to: "A-copy.db")
        try h.sqlite(a, "UPDATE t SET a = 'original' WHERE id = '1';")
        tick()
        try h.sqlite(copy, "UPDATE t SET a = 'copy' WHERE id = '1';")
        try h.send((a, "A"), to: (b, "B"))
        try assertCopyIsSaid(copy)
        XCTAssertEqual(try rows(b).split(separator: "\n").first, "'1'|'copy'|'b1'")
    }

    /// A delete's log row carries no clock (TriggerSQL), but the fold moves the replica's clock
    /// up to the wall clock: a copy that only deleted, fewer rows and later, still shows what
    /// one replica never does, fewer changes at a later clock. Its deletion is taken as any.
    func testCopiedFileThatOnlyDeletedIsSaid() throws {
        try h.send((a, "A"), to: (b, "B"))
        let copy = try h.copyTakenForMoved(a, to: "A-copy.db")
        try h.sqlite(a, "DELETE FROM t WHERE id IN ('2', '3');")
        try h.send((a, "A"), to: (b, "B"))
        tick()
        try h.sqlite(copy, "DELETE FROM t WHERE id = '1';")
        try assertCopyIsSaid(copy)
        XCTAssertEqual(try rows(b), "")
    }

    // MARK: idempotence and order

    func testDuplicateAndOutOfOrderImportsKeepNewestValues() throws {
        try h.sqlite(a, "UPDATE t SET a = 'v1' WHERE id = '1'; INSERT INTO t VALUES ('5', 'five', 'v1');")
        let first = try h.export(a, as: "A")
        let mark = try knowledge(a).map { "\($0.key):\($0.value)" }.joined(separator: ",")
        tick()
        try h.sqlite(
            a, "UPDATE t SET a = 'v2' WHERE id = '1'; UPDATE t SET b = 'v2' WHERE id = '5'; DELETE FROM t WHERE id = '2';")
        let secondFull = try h.export(a, as: "A")
        let secondDelta = try h.export(a, as: "A", extra: ["--since", mark])
        let expected = try rows(a)
        XCTAssertEqual(expected, "'1'|'v2'|'b1'\n'3'|'a3'|'b3'\n'5'|'five'|'v2'\n")

        // B: full bundles, newest first, each twice.
        for bundle in [secondFull, first, secondFull, first] { try h.ok(["import", b, bundle], key: "B") }
        XCTAssertEqual(try rows(b), expected)
        // C: the delta before the bundle it builds on, then a duplicate of each.
        for bundle in [secondDelta, first, secondDelta, first] { try h.ok(["import", c, bundle], key: "C") }
        XCTAssertEqual(try rows(c), expected)

        let again = try h.okJSON(["import", b, secondFull, first], key: "B")
        for result in again["bundles"] as? [[String: Any]] ?? [] {
            XCTAssertEqual(result["changes"] as? Int, 0, "re-importing changes nothing: \(result)")
        }
        XCTAssertEqual(try rows(b), expected)
        XCTAssertEqual(try h.dump(b, table: "u", orderBy: "k"), try h.dump(a, table: "u", orderBy: "k"))
    }

    func testDryRunReportsPerTableCountsAndChangesNothing() throws {
        try h.sqlite(
            a,
            """
            INSERT INTO t VALUES ('9', 'nine', NULL);
            UPDATE t SET a = 'changed' WHERE id = '1';
            DELETE FROM t WHERE id = '2';
            INSERT INTO u VALUES ('y', 2), ('z', 3);
            """)
        let bundle = try h.export(a, as: "A")
        let before = try h.fullDump(b)
        let dry = try h.ok(["import", b, bundle, "--dry-run"], key: "B")
        let lines = Set(dry.stdout.split(separator: "\n").map(String.init))
        XCTAssertTrue(lines.contains("t: 1 inserted, 1 updated, 1 deleted, 0 conflicts"), dry.stdout)
        XCTAssertTrue(lines.contains("u: 2 inserted, 0 updated, 0 deleted, 0 conflicts"), dry.stdout)
        XCTAssertEqual(try h.fullDump(b), before, "--dry-run must change nothing, sqsync's tables included")

        let dryJSON = try h.okJSON(["import", b, bundle, "--dry-run"], key: "B")
        XCTAssertEqual(dryJSON["dry_run"] as? Bool, true)
        let tables = ((dryJSON["bundles"] as? [[String: Any]])?.first?["tables"] as? [String: [String: Int]]) ?? [:]
        XCTAssertEqual(tables["t"]?["inserted"], 1)
        XCTAssertEqual(tables["t"]?["updated"], 1)
        XCTAssertEqual(tables["t"]?["deleted"], 1)
        XCTAssertEqual(tables["u"]?["inserted"], 2)
        XCTAssertEqual(try h.fullDump(b), before)

        let real = try h.okJSON(["import", b, bundle], key: "B")
        let applied = ((real["bundles"] as? [[String: Any]])?.first?["tables"] as? [String: [String: Int]]) ?? [:]
        XCTAssertEqual(applied["t"]?["inserted"], 1, "the dry run predicted the real import")
        XCTAssertEqual(applied["t"]?["deleted"], 1)
        XCTAssertEqual(try rows(b), try rows(a))
    }

    // MARK: smaller bundles

    func testExportForAcknowledgedPeerIsSmallerThanFullExport() throws {
        // Random text: bundles are compressed, and repeated padding would shrink to nothing.
        let values = (10..<60).map { "('\($0)', 'bulk value \($0)', hex(randomblob(32)))" }.joined(separator: ",")
        try h.sqlite(a, "INSERT INTO t VALUES \(values);")
        try h.send((a, "A"), to: (b, "B"))
        try h.send((b, "B"), to: (a, "A"))  // A now holds B's acknowledgement of everything
        try h.sqlite(a, "UPDATE t SET a = 'only this' WHERE id = '17';")

        let full = try h.okJSON(["export", a, "-o", h.path("full.sqsb")], key: "A")
        // In the clear, to compare like with like (an encrypted one adds a header of ~200 bytes).
        let delta = try h.okJSON(["export", a, "-o", h.path("delta.sqsb"), "--for", "B", "--no-encrypt"], key: "A")
        XCTAssertEqual(delta["rows"] as? Int, 1, "\(delta)")
        XCTAssertGreaterThanOrEqual(full["rows"] as? Int ?? 0, 54, "\(full)")
        XCTAssertLessThan(delta["bytes"] as? Int ?? .max, (full["bytes"] as? Int ?? 0) / 4)
        XCTAssertLessThan(h.fileBytes(h.path("delta.sqsb")).count, h.fileBytes(h.path("full.sqsb")).count)
        // The peer can be named by knowledge ID too, and the small bundle is enough.
        let byID = try h.okJSON(["export", a, "-o", h.path("delta2.sqsb"), "--for", try h.knowledgeID(b)], key: "A")
        XCTAssertEqual(byID["rows"] as? Int, 1)
        try h.ok(["import", b, h.path("delta.sqsb")], key: "B")
        XCTAssertEqual(try rows(b), try rows(a))
    }

    func testExportSinceKnowledgeHasOnlyTheNewerChanges() throws {
        let aID = try h.knowledgeID(a)
        let seq = try XCTUnwrap(try knowledge(a)[aID])
        try h.sqlite(a, "UPDATE t SET b = 'since' WHERE id = '3';")
        let since = try h.okJSON(["export", a, "-o", h.path("since.sqsb"), "--since", "\(aID):\(seq)"], key: "A")
        XCTAssertEqual(since["rows"] as? Int, 1, "\(since)")
        let nothing = try h.okJSON(["export", a, "-o", h.path("none.sqsb"), "--since", "\(aID):\(seq + 1000)"], key: "A")
        XCTAssertEqual(nothing["rows"] as? Int, 0, "\(nothing)")
        try h.ok(["import", c, h.path("since.sqsb")], key: "C")
        XCTAssertEqual(try rows(c), try rows(a))
        XCTAssertEqual(try knowledge(c)[aID], try knowledge(a)[aID])
    }

    // MARK: clock skew

    func testWriterWithSlowClockStillWinsAfterSeeingTheOtherChange() throws {
        let faketime = "/usr/bin/faketime"
        guard FileManager.default.isExecutableFile(atPath: faketime) else {
            if ProcessInfo.processInfo.environment["CI"] != nil {
                return XCTFail("faketime is missing (apt-get install faketime)")
            }
            throw XCTSkip("faketime not installed")
        }
        let slow = [faketime, "-f", "-1d"]
        // Sanity: the prefix really moves the clock a day back for sqlite3.
        let shifted =
            Int(
                try h.sqlite(":memory:", "SELECT CAST(strftime('%s','now') AS INTEGER);", prefix: slow)
                    .trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        XCTAssertLessThan(shifted, Int(Date().timeIntervalSince1970) - 80_000)

        try h.sqlite(a, "UPDATE t SET a = 'A-now' WHERE id = '1';")
        let fromA = try h.export(a, as: "A")
        let imported = try h.sqsync(["import", b, fromA], key: "B", prefix: slow)
        XCTAssertEqual(imported.status, 0, imported.stderr)
        XCTAssertEqual(try rows(b).split(separator: "\n").first, "'1'|'A-now'|'b1'")
        try h.sqlite(b, "UPDATE t SET a = 'B-after-seeing-A' WHERE id = '1';", prefix: slow)
        let bundle = h.path("from-b-slow.sqsb")
        let exported = try h.sqsync(["export", b, "-o", bundle], key: "B", prefix: slow)
        XCTAssertEqual(exported.status, 0, exported.stderr)
        try h.ok(["import", a, bundle], key: "A")
        try meshSync()
        try assertAllEqual("'1'|'B-after-seeing-A'|'b1'\n'2'|'a2'|'b2'\n'3'|'a3'|'b3'\n")
    }

    // MARK: inspect

    func testInspectShowsSenderCountsSignerAndVerification() throws {
        try h.sqlite(
            a, "INSERT INTO t VALUES ('7', 's', 'e'); UPDATE t SET a = 'z' WHERE id = '1'; DELETE FROM t WHERE id = '2';")
        let bundle = try h.export(a, as: "A")
        let aID = try h.knowledgeID(a)
        let result = try h.ok(["inspect", bundle])
        let lines = result.stdout.split(separator: "\n").map(String.init)
        XCTAssertTrue(lines.contains { $0.hasPrefix("sender") && $0.contains("A") && $0.contains(aID) }, result.stdout)
        XCTAssertTrue(lines.contains { $0.hasPrefix("table") && $0.contains("t:") && $0.contains("1 deletes") }, result.stdout)
        XCTAssertTrue(lines.contains { $0.hasPrefix("table") && $0.contains("u:") }, result.stdout)
        let fingerprint =
            try Harness.run("/usr/bin/ssh-keygen", ["-l", "-f", h.keyPath("A") + ".pub"]).stdout
            .split(separator: " ").dropFirst().first.map(String.init) ?? "?"
        XCTAssertTrue(lines.contains { $0.hasPrefix("signer") && $0.contains(fingerprint) }, "\(fingerprint) in \(result.stdout)")
        XCTAssertTrue(lines.contains { $0.hasPrefix("verified") && $0.contains("yes") }, result.stdout)

        let json = try h.okJSON(["inspect", bundle])
        XCTAssertEqual(json["sender"] as? String, aID)
        XCTAssertEqual(json["verified"] as? Bool, true)
        XCTAssertEqual((json["tables"] as? [String: [String: Int]])?["t"]?["deletes"], 1)
    }

    func testExtractedPayloadAndSignatureVerifyWithSSHKeygen() throws {
        try h.sqlite(a, "UPDATE t SET b = 'signed' WHERE id = '1';")
        let bundle = try h.export(a, as: "A")
        let payload = h.path("payload.bin"), signature = h.path("payload.sig")
        try h.ok(["inspect", bundle, "--payload", payload, "--signature", signature])
        XCTAssertTrue(try String(contentsOfFile: signature, encoding: .utf8).hasPrefix("-----BEGIN SSH SIGNATURE-----"))

        func verify(_ principal: String, _ file: String) throws -> ProcessResult {
            try Harness.run(
                "/bin/sh",
                [
                    "-c", "exec /usr/bin/ssh-keygen -Y verify -f \"$1\" -I \"$2\" -n sqsync -s \"$3\" < \"$4\"",
                    "sh", h.trustFile, principal, signature, file,
                ])
        }
        let good = try verify("A", payload)
        XCTAssertEqual(good.status, 0, good.stdout + good.stderr)
        XCTAssertNotEqual(try verify("B", payload).status, 0, "signed by A, not B")
        var tampered = h.fileBytes(payload)
        tampered[tampered.count / 2] ^= 0x01
        let bad = h.path("tampered.bin")
        try tampered.write(to: URL(fileURLWithPath: bad))
        XCTAssertNotEqual(try verify("A", bad).status, 0, "a changed payload must not verify")
    }
}
