import Foundation
import XCTest

/// What a newcomer tripped on (issue "what a newcomer tripped on"), each through the built
/// binary: messages that name the database, say what happened once, and say what to do.
final class OperatorSurprisesTests: XCTestCase {
    private var h: Harness!
    private var a = "", b = ""

    private static let schema = "CREATE TABLE t(id TEXT PRIMARY KEY, v TEXT); INSERT INTO t VALUES ('r1', 'one');"

    override func setUpWithError() throws {
        h = try Harness()
        a = try h.makeReplica("A", schema: Self.schema)
        b = try h.cloneReplica(a, as: "B")
    }

    override func tearDown() { h = nil }

    /// Random bytes and a text file given to `import`: "not a bundle", one line, exit 3.
    func testAFileThatIsNoBundleIsCalledThat() throws {
        var generator = SystemRandomNumberGenerator()
        let random = h.path("random.sqsb"), text = h.path("notes.sqsb")
        try Data((0..<5000).map { _ in UInt8.random(in: 0...255, using: &generator) }).write(to: URL(fileURLWithPath: random))
        try String(repeating: "a line of notes, not a bundle\n", count: 100).write(toFile: text, atomically: true, encoding: .utf8)
        let before = try h.fullDump(a)
        for file in [random, text] {
            let result = try h.sqsync(["import", a, file], key: "A")
            XCTAssertEqual(result.status, 3, result.stderr)
            XCTAssertEqual(result.stderrLines, ["sqsync: \(file): not a bundle"])
        }
        XCTAssertEqual(try h.fullDump(a), before)
    }

    /// The conflict log names replicas by name and knowledge ID; `--json` gives the key's values.
    func testConflictsNameTheReplicasAndGiveTheKeysValues() throws {
        try h.sqlite(a, "UPDATE t SET v = 'from A' WHERE id = 'r1';")
        try h.sqlite(b, "UPDATE t SET v = 'from B' WHERE id = 'r1';")
        try h.send((a, "A"), to: (b, "B"))
        try h.send((b, "B"), to: (a, "A"))
        let aID = try h.knowledgeID(a), bID = try h.knowledgeID(b)
        var logged: [[String: Any]] = []
        var human = ""
        for db in [a, b] {
            logged += try h.okJSON(["conflicts", db])["conflicts"] as? [[String: Any]] ?? []
            human += try h.ok(["conflicts", db]).stdout
        }
        let lost = try XCTUnwrap(logged.first { $0["column_name"] as? String == "v" }, "\(logged)")
        XCTAssertEqual(lost["key"] as? [String], ["r1"], "the key's value, not an SQL literal: \(lost)")
        XCTAssertEqual(lost["pk"] as? String, "'r1'")
        let loser = lost["lost_site"] as? String
        XCTAssertEqual(lost["lost_site_name"] as? String, loser == aID ? "A" : "B", "\(lost)")
        XCTAssertTrue(human.contains("from A (\(aID))") || human.contains("from B (\(bID))"), human)
    }

    /// `clone` says that its source now waits for the clone, and how to stop that; the source
    /// lists the clone by name.
    func testAThrowawayCloneIsNamedAndTheWayOutSaid() throws {
        let result = try h.ok(["clone", a, h.path("scratch.db"), "--name", "scratch"])
        XCTAssertTrue(result.stderr.contains("peers retire \(a)"), result.stderr)
        let peers = try h.okJSON(["peers", a])["peers"] as? [[String: Any]] ?? []
        XCTAssertTrue(peers.contains { $0["name"] as? String == "scratch" }, "\(peers)")
    }

    /// SQLite's own words name the database: a damaged file.
    func testSQLiteErrorsNameTheDatabase() throws {
        try h.ok(["status", a])
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: a))
        for page in 1..<4 {
            try handle.seek(toOffset: UInt64(page * 4096))
            handle.write(Data(repeating: 0xA5, count: 4096))
        }
        try handle.close()
        let result = try h.sqsync(["status", a])
        XCTAssertEqual(result.status, 1, result.stderr)
        XCTAssertEqual(result.stderrLines.count, 1, result.stderr)
        XCTAssertTrue(result.stderr.contains(a) && result.stderr.contains("SQLite error"), result.stderr)
    }

    /// Between `refresh --before-migration` and `refresh`, export, import and sync refuse,
    /// naming the refresh that is pending; after it, all is well.
    func testExportImportAndSyncWaitForAPendingRefresh() throws {
        let bundle = try h.export(b, as: "B")
        try h.ok(["refresh", a, "--before-migration"], key: "A")
        let box = h.path("box")
        try FileManager.default.createDirectory(atPath: box, withIntermediateDirectories: true)
        for command in [["export", a, "-o", h.path("x.sqsb")], ["import", a, bundle], ["sync", a, box]] {
            let result = try h.sqsync(command, key: "A")
            XCTAssertEqual(result.status, 1, "\(command[0]): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains("sqsync refresh \(a)"), "\(command[0]): \(result.stderr)")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: h.path("x.sqsb")))
        try h.sqlite(a, "ALTER TABLE t ADD COLUMN note TEXT;")
        try h.ok(["refresh", a], key: "A")
        try h.ok(["import", a, bundle], key: "A")
        try h.syncOK(a, as: "A", box)
    }

    /// `-q` says in the help what it quiets.
    func testQuietSaysWhatItDoes() throws {
        let help = try Harness.run(Harness.binary, ["status", "--help"])
        XCTAssertTrue(help.stdout.contains("results included"), help.stdout)
        XCTAssertTrue(help.stdout.contains("~/.config/sqsync/id_ed25519"), "the key's default: \(help.stdout)")
        XCTAssertTrue(help.stdout.contains("~/.config/sqsync/allowed_signers"), "the trust file's default: \(help.stdout)")
    }
}
