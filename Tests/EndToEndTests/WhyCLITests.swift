import Foundation
import XCTest

/// `sqsync why`: one row's history through the built binary, with the `sqlite3` shell as
/// the writer: who wrote each column and when, whether the row lives, and its conflicts.
final class WhyCLITests: XCTestCase {
    private var h: Harness!
    private var a = "", b = ""

    private static let schema = """
        CREATE TABLE todo(id INTEGER PRIMARY KEY, task TEXT, done INTEGER);
        CREATE TABLE pair(x TEXT, y INTEGER, v TEXT, PRIMARY KEY (x, y));
        INSERT INTO todo VALUES (1, 'cook', 0), (2, 'wash', 0);
        INSERT INTO pair VALUES ('p', 1, 'first');
        """

    override func setUpWithError() throws {
        h = try Harness()
        a = try h.makeReplica("A", schema: Self.schema, trackArguments: ["--all", "--allow-integer-pk"])
        b = try h.cloneReplica(a, as: "B")
    }

    override func tearDown() { h = nil }

    private func why(_ db: String, _ arguments: [String], file: StaticString = #filePath, line: UInt = #line) throws
        -> [String: Any]
    {
        try h.okJSON(["why", db] + arguments, file: file, line: line)
    }

    private func column(_ history: [String: Any], _ name: String) -> [String: Any] {
        (history["columns"] as? [[String: Any]] ?? []).first { $0["column"] as? String == name } ?? [:]
    }

    private func writer(_ history: [String: Any], _ name: String) -> [String: Any] {
        column(history, name)["written_by"] as? [String: Any] ?? [:]
    }

    func testEachColumnNamesTheReplicaThatWroteIt() throws {
        let aID = try h.knowledgeID(a), bID = try h.knowledgeID(b)
        // Written with the shell and not yet folded: why folds first.
        try h.sqlite(b, "UPDATE todo SET done = 1 WHERE id = 1;")
        let atB = try why(b, ["todo", "1"])
        XCTAssertEqual(writer(atB, "done")["knowledge_id"] as? String, bID)
        XCTAssertEqual(writer(atB, "done")["local"] as? Bool, true)
        XCTAssertEqual(writer(atB, "task")["knowledge_id"] as? String, aID, "the insert's column stays A's")
        XCTAssertEqual(column(atB, "done")["value"] as? Int, 1)

        try h.send((b, "B"), to: (a, "A"))
        let atA = try why(a, ["todo", "1"])
        XCTAssertEqual(atA["alive"] as? Bool, true)
        XCTAssertEqual(atA["causal_length"] as? Int, 1)
        XCTAssertEqual(atA["key"] as? [String: Int], ["id": 1], "the key read as the INTEGER column reads it")
        let done = writer(atA, "done")
        XCTAssertEqual(done["replica"] as? String, "B")
        XCTAssertEqual(done["knowledge_id"] as? String, bID)
        XCTAssertEqual(done["local"] as? Bool, false)
        XCTAssertEqual(done["seq"] as? Int, writer(atB, "done")["seq"] as? Int)
        XCTAssertEqual(done["hlc"] as? Int, writer(atB, "done")["hlc"] as? Int, "the same change, wherever it is asked")
        XCTAssertTrue((done["time"] as? String ?? "").hasSuffix("Z"), "\(done)")
        XCTAssertEqual((atA["life"] as? [String: Any])?["knowledge_id"] as? String, aID)

        let human = try h.ok(["why", a, "todo", "1"]).stdout
        XCTAssertTrue(human.contains("alive"), human)
        XCTAssertTrue(human.contains("done = 1") && human.contains("B (\(bID))"), human)
    }

    func testADeletedRowAndACompositeKey() throws {
        try h.sqlite(b, "DELETE FROM todo WHERE id = 2; UPDATE pair SET v = 'second' WHERE x = 'p' AND y = 1;")
        try h.send((b, "B"), to: (a, "A"))
        let deleted = try why(a, ["todo", "2"])
        XCTAssertEqual(deleted["alive"] as? Bool, false)
        XCTAssertEqual(deleted["causal_length"] as? Int, 2)
        XCTAssertEqual((deleted["columns"] as? [Any])?.count, 0)
        XCTAssertEqual((deleted["life"] as? [String: Any])?["replica"] as? String, "B", "the delete is B's")

        let pair = try why(a, ["pair", "p", "1"])
        XCTAssertEqual(column(pair, "v")["value"] as? String, "second")
        XCTAssertEqual(writer(pair, "v")["replica"] as? String, "B")
    }

    func testALostWriteIsListedWithTheRow() throws {
        try h.sqlite(a, "UPDATE todo SET task = 'cook lunch' WHERE id = 1;")
        try h.sqlite(b, "UPDATE todo SET task = 'cook dinner' WHERE id = 1;")
        try h.send((a, "A"), to: (b, "B"))
        try h.send((b, "B"), to: (a, "A"))
        let atA = try why(a, ["todo", "1"]), atB = try why(b, ["todo", "1"])
        XCTAssertEqual(column(atA, "task")["value"] as? String, "cook dinner")
        XCTAssertEqual(column(atB, "task")["value"] as? String, "cook dinner")
        XCTAssertEqual(writer(atA, "task")["replica"] as? String, "B")
        let conflicts = (atB["conflicts"] as? [[String: Any]] ?? []) + (atA["conflicts"] as? [[String: Any]] ?? [])
        XCTAssertTrue(
            conflicts.contains { $0["column"] as? String == "task" && $0["lost_value"] as? String == "cook lunch" }, "\(conflicts)")
        XCTAssertEqual((try why(a, ["todo", "2"])["conflicts"] as? [Any])?.count, 0, "other rows' conflicts stay out")
    }

    func testBadArgumentsNameTheProblem() throws {
        let cases: [([String], Int32, String)] = [
            (["todo", "9"], 1, "no history"), (["todo", "1", "2"], 2, "1 column(s) (id)"), (["nope", "1"], 1, "not tracked"),
            (["pair", "p"], 2, "2 column(s) (x, y)"),
        ]
        for (arguments, status, words) in cases {
            let result = try h.sqsync(["why", a] + arguments)
            XCTAssertEqual(result.status, status, "\(arguments): \(result.stderr)")
            XCTAssertEqual(result.stderrLines.count, 1, result.stderr)
            XCTAssertTrue(result.stderr.contains(words) && result.stderr.contains("A.db"), result.stderr)
        }
    }
}
