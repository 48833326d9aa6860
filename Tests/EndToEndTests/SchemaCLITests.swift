import Foundation
import SQLiteDatabase
import XCTest

/// Schema migrations (held bundles, `refresh`, `doctor`) and copied databases, through the built binary.
final class SchemaCLITests: XCTestCase {
    private var h: Harness!
    private var a = "", b = ""

    private static let schema = """
        CREATE TABLE t(id TEXT PRIMARY KEY, name TEXT);
        INSERT INTO t VALUES ('1', 'one'), ('2', 'two');
        """

    override func setUpWithError() throws {
        h = try Harness()
        a = try h.makeReplica("A", schema: Self.schema)
        b = try h.cloneReplica(a, as: "B")
    }

    override func tearDown() { h = nil }

    // MARK: helpers

    private func rows(_ db: String) throws -> String { try h.dump(db, table: "t", orderBy: "id") }

    private func migrate(_ db: String, file: StaticString = #filePath, line: UInt = #line) throws {
        try h.sqlite(db, "ALTER TABLE t ADD COLUMN color TEXT;", file: file, line: line)
        try h.ok(["refresh", db], file: file, line: line)
    }

    private func held(_ db: String) throws -> [[String: Any]] {
        try h.okJSON(["status", db])["held"] as? [[String: Any]] ?? []
    }

    private func heldFolder(_ db: String) -> String {
        let url = URL(fileURLWithPath: db)
        return url.deletingLastPathComponent().appendingPathComponent("." + url.lastPathComponent + "-sqsync-held").path
    }

    private func heldFiles(_ db: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: heldFolder(db))) ?? []).filter { $0.hasSuffix(".sqsb") }
    }

    /// A writes rows that use the new column; B still has the old schema and imports them: held.
    /// Returns the bundle file.
    private func holdAtB(file: StaticString = #filePath, line: UInt = #line) throws -> String {
        try migrate(a)
        try h.sqlite(a, "UPDATE t SET color = 'red' WHERE id = '1'; INSERT INTO t VALUES ('3', 'three', 'blue');")
        let bundle = try h.export(a, as: "A")
        let before = try rows(b)
        let result = try h.ok(["import", b, bundle], key: "B", file: file, line: line)
        XCTAssertTrue(
            result.stderr.contains("held") || result.stdout.contains("held"), "import must say held: \(result.stderr)",
            file: file, line: line)
        XCTAssertTrue(
            result.stderr.contains("color"), "the message must name the missing column: \(result.stderr)", file: file, line: line)
        XCTAssertEqual(try rows(b), before, "a held bundle must not be half-applied", file: file, line: line)
        let entries = try held(b)
        XCTAssertEqual(entries.count, 1, "\(entries)", file: file, line: line)
        if let path = entries.first?["path"] as? String {
            XCTAssertTrue(
                FileManager.default.fileExists(atPath: path), "the held copy must exist: \(path)", file: file, line: line)
            XCTAssertTrue(path.hasPrefix(heldFolder(b)), path, file: file, line: line)
        }
        XCTAssertTrue((entries.first?["reason"] as? String ?? "").contains("color"), "\(entries)", file: file, line: line)
        XCTAssertEqual(heldFiles(b).count, 1, file: file, line: line)
        return bundle
    }

    private static let migratedRows = "'1'|'one'|'red'\n'2'|'two'|NULL\n'3'|'three'|'blue'\n"

    // MARK: a bundle with a column the receiver lacks is held, then applied after migration

    func testHeldBundleAppliesWhenTheSameFileIsImportedAfterMigration() throws {
        let bundle = try holdAtB()

        // Importing again before migrating keeps it held, still one entry.
        let again = try h.ok(["import", b, bundle], key: "B")
        XCTAssertTrue(again.stderr.contains("held"), again.stderr)
        XCTAssertEqual(try held(b).count, 1)
        XCTAssertEqual(try rows(b), "'1'|'one'\n'2'|'two'\n")

        try migrate(b)
        let result = try h.ok(["import", b, bundle], key: "B")
        XCTAssertFalse(result.stderr.contains("held "), result.stderr)
        XCTAssertEqual(try rows(b), Self.migratedRows)
        XCTAssertEqual(try held(b).count, 0, "applied bundles leave the held list")
        XCTAssertEqual(heldFiles(b), [], "the held copy goes once applied")
        XCTAssertEqual(try rows(a), try rows(b))

        // B's own later write of the new column travels back to A.
        try h.sqlite(b, "UPDATE t SET color = 'green' WHERE id = '2';")
        try h.ok(["import", a, try h.export(b, as: "B")], key: "A")
        XCTAssertEqual(try rows(a), "'1'|'one'|'red'\n'2'|'two'|'green'\n'3'|'three'|'blue'\n")
    }

    func testHeldBundleAppliesOnImportOfAnUnrelatedEmptyBundle() throws {
        _ = try holdAtB()
        try migrate(b)
        XCTAssertEqual(try rows(b), "'1'|'one'|NULL\n'2'|'two'|NULL\n", "migrating alone applies nothing")

        // E is an unrelated replica with nothing to say: its bundle is empty.
        let e = try h.makeReplica("E", schema: "CREATE TABLE other(k TEXT PRIMARY KEY);")
        let empty = try h.export(e, as: "E")
        let result = try h.okJSON(["import", b, empty], key: "B")
        let bundles = result["bundles"] as? [[String: Any]] ?? []
        XCTAssertTrue(
            bundles.contains { ($0["path"] as? String ?? "").hasPrefix(heldFolder(b)) && $0["held"] == nil },
            "the held bundle must be retried and applied: \(result)")
        XCTAssertEqual(try rows(b), Self.migratedRows)
        XCTAssertEqual(try held(b).count, 0)
        XCTAssertEqual(heldFiles(b), [])
    }

    func testHeldBundleSurvivesTheOriginalFileGoingAway() throws {
        let bundle = try holdAtB()
        try FileManager.default.removeItem(atPath: bundle)  // the USB stick was unplugged
        try migrate(b)
        let e = try h.makeReplica("E", schema: "CREATE TABLE other(k TEXT PRIMARY KEY);")
        try h.ok(["import", b, try h.export(e, as: "E")], key: "B")
        XCTAssertEqual(try rows(b), Self.migratedRows)
        XCTAssertEqual(try held(b).count, 0)
    }

    /// Every import retries the held bundles first. One that can no longer apply (its copy was
    /// removed, or its sender was retired since) must not make every later import fail.
    func testHeldBundleThatCannotApplyDoesNotBlockLaterImports() throws {
        _ = try holdAtB()
        let e = try h.makeReplica("E", schema: "CREATE TABLE other(k TEXT PRIMARY KEY);")
        let idE = try h.knowledgeID(e)
        let fromE = try h.export(e, as: "E")

        // 1. The sender of the held bundle is retired.
        try h.ok(["peers", "retire", b, "A"], key: "B")
        let retired = try h.sqsync(["import", b, fromE], key: "B")
        XCTAssertEqual(retired.status, 0, "an unrelated bundle must still import: \(retired.stderr)")
        XCTAssertTrue(try peers(b).contains(idE), "E's bundle was not applied: \(retired.stderr)")

        // 2. The held copy is gone (someone cleaned the hidden folder).
        let c = try h.cloneReplica(a, as: "C")
        try h.sqlite(c, "CREATE TABLE side(k TEXT PRIMARY KEY);")
        try h.ok(["track", c, "side"])
        // C's own changes: a bundle carries only its sender's, as the sender signed them.
        try h.sqlite(c, "INSERT INTO side VALUES ('s'); UPDATE t SET color = 'pink' WHERE id = '1';")
        let fromC = try h.export(c, as: "C")
        let d = try h.makeReplica("D", schema: Self.schema)
        try h.ok(["import", d, fromC], key: "D")  // D lacks table side and column color: held
        XCTAssertEqual(try held(d).count, 1)
        try FileManager.default.removeItem(atPath: heldFolder(d))
        let missing = try h.sqsync(["import", d, fromE], key: "D")
        XCTAssertEqual(missing.status, 0, "an unrelated bundle must still import: \(missing.stderr)")
        XCTAssertTrue(try peers(d).contains(idE), "E's bundle was not applied: \(missing.stderr)")
    }

    private func peers(_ db: String) throws -> [String] {
        (try h.okJSON(["peers", db])["peers"] as? [[String: Any]] ?? []).compactMap { $0["knowledge_id"] as? String }
    }

    // MARK: a sender that lacks a column leaves it alone on the receiver

    func testBundleFromOldSchemaLeavesNewColumnAlone() throws {
        try migrate(a)
        try h.sqlite(a, "UPDATE t SET color = 'red' WHERE id = '1'; UPDATE t SET color = 'blue' WHERE id = '2';")
        // B never migrated: it edits name and adds a row.
        try h.sqlite(b, "UPDATE t SET name = 'ONE' WHERE id = '1'; INSERT INTO t VALUES ('4', 'four');")
        let bundle = try h.export(b, as: "B")
        let result = try h.ok(["import", a, bundle], key: "A")
        XCTAssertFalse(result.stderr.contains("held"), result.stderr)
        XCTAssertEqual(try held(a).count, 0)
        XCTAssertEqual(
            try rows(a), "'1'|'ONE'|'red'\n'2'|'two'|'blue'\n'4'|'four'|NULL\n",
            "columns the sender lacks must keep their values")
        XCTAssertEqual(try h.conflicts(a).count, 0)

        // B takes A's answer after migrating, and both agree.
        let answer = try h.export(a, as: "A")
        try migrate(b)
        try h.ok(["import", b, answer], key: "B")
        XCTAssertEqual(try rows(b), try rows(a))
    }

    // MARK: doctor and refresh

    func testDoctorAfterAlterWithoutRefreshNamesTableAndRefresh() throws {
        try h.ok(["doctor", a])
        try h.sqlite(a, "ALTER TABLE t ADD COLUMN color TEXT;")
        let before = try h.fullDump(a)
        let sick = try h.sqsync(["doctor", a])
        XCTAssertEqual(sick.status, 1, sick.stderr)
        XCTAssertTrue(sick.stderr.contains("table t "), sick.stderr)
        XCTAssertTrue(sick.stderr.contains("color"), sick.stderr)
        XCTAssertTrue(sick.stderr.contains("sqsync refresh"), sick.stderr)
        XCTAssertEqual(try h.fullDump(a), before, "doctor only looks")
        let json = try h.sqsync(["doctor", a, "--json"])
        XCTAssertNotEqual(json.status, 0)
        XCTAssertEqual(h.json(json)["ok"] as? Bool, false)

        try h.ok(["refresh", a])
        try h.ok(["doctor", a])
    }

    /// A migration that backfills the new column before `refresh` runs (the usual
    /// "ALTER + UPDATE" script): the values written then must still reach peers.
    func testBackfillBetweenAlterAndRefreshReachesPeers() throws {
        try h.sqlite(a, "ALTER TABLE t ADD COLUMN color TEXT; UPDATE t SET color = 'grey' WHERE id = '2';")
        try h.ok(["refresh", a])
        try migrate(b)
        try h.ok(["import", b, try h.export(a, as: "A")], key: "B")
        XCTAssertEqual(try rows(b), try rows(a), "a write made before refresh was never captured, so the replicas diverge")
    }

    // MARK: a copied file is not a replica

    func testCopiedDatabaseIsRefusedAsIdentityClash() throws {
        try h.ok(["status", a])  // settle the WAL, so that the copy is the whole database
        let a2 = try h.copyFile(a, to: "A2.db")
        if FileManager.default.fileExists(atPath: a + "-wal") { _ = try h.copyFile(a + "-wal", to: "A2.db-wal") }
        try h.ok(["init", a2])  // said to be moved: the check at open cannot see it, the network does
        XCTAssertEqual(try h.knowledgeID(a2), try h.knowledgeID(a))

        try h.sqlite(a, "INSERT INTO t VALUES ('a', 'from A');")
        try h.sqlite(a2, "INSERT INTO t VALUES ('c', 'from the copy');")
        let fromCopy = try h.export(a2, as: "A")  // the copy signs with the same site key
        try h.ok(["status", a])  // number the shell's pending write (any command does), then compare
        let before = try h.fullDump(a)
        let result = try h.sqsync(["import", a, fromCopy], key: "A")
        XCTAssertEqual(result.status, 1, result.stderr)
        XCTAssertTrue(result.stderr.contains(try h.knowledgeID(a)), "the message must name the knowledge ID: \(result.stderr)")
        XCTAssertTrue(result.stderr.contains("knowledge ID"), result.stderr)
        XCTAssertTrue(result.stderr.contains("sqsync reidentify"), result.stderr)
        XCTAssertEqual(result.stderrLines.count, 1, result.stderr)
        XCTAssertEqual(try h.fullDump(a), before, "a refused import must change nothing")
        XCTAssertEqual(try rows(a), "'1'|'one'\n'2'|'two'\n'a'|'from A'\n")

        // A third replica that meets both copies says so at the second, and takes both: a
        // refusal would starve it of whatever a relay carries with the second.
        try h.ok(["import", b, fromCopy], key: "B")
        let fromA = try h.export(a, as: "A")
        let clash = try h.sqsync(["import", b, fromA], key: "B")
        XCTAssertEqual(clash.status, 0, clash.stderr)
        XCTAssertTrue(clash.stderr.contains("signed two different changes under the same numbers"), clash.stderr)
        XCTAssertTrue(clash.stderr.contains("sqsync reidentify"), clash.stderr)
        XCTAssertEqual(try rows(b), "'1'|'one'\n'2'|'two'\n'a'|'from A'\n'c'|'from the copy'\n")
    }
}
