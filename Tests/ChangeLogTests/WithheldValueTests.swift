import SQLiteDatabase
import XCTest

@testable import ChangeLog

/// Values over an export's cap are left out and recorded, the rest goes; a left-out value
/// goes as a new change once it fits, and is forgotten once a later change replaces it.
final class WithheldValueTests: XCTestCase {
    private var sandbox: Sandbox!
    private var a: Replica!
    private var b: Replica!
    private static let cap = 1000
    private static let oversized = SQLValue.text(String(repeating: "x", count: 2000))

    override func setUpWithError() throws {
        sandbox = try Sandbox()
        let replicas = try sandbox.replicas(
            ["A", "B"], schema: "CREATE TABLE t(id TEXT PRIMARY KEY, big TEXT, note TEXT);", track: ["t"])
        a = replicas[0]
        b = replicas[1]
    }

    override func tearDown() {
        a = nil
        b = nil
        sandbox = nil
    }

    /// What `source` has for `destination`, exported with the cap, merged into `destination`.
    @discardableResult
    private func cappedSync(from source: Replica, to destination: Replica, cap: Int = cap) throws -> ChangeSet {
        try source.releaseWithheldValues(cap: cap)
        let set = try ChangeExporter.snapshot(of: source, ownChangesAfter: try destination.knowledge()[source.knowledgeID], valueCap: cap)
        { exporter in
            var changes: [RowChange] = []
            try exporter.forEachChange { changes.append($0) }
            return ChangeSet(header: exporter.header, changes: changes, receiver: destination.knowledgeID)
        }
        let summary = try apply(set, to: destination)
        XCTAssertTrue(summary.knowledgeAdvanced, "a capped set must never be held")
        return set
    }

    private func ids(_ replica: Replica) throws -> [String] {
        try rows(of: replica, table: "t").compactMap { $0[0].stringValue }
    }

    func testALifeOverTheCapWaitsWithItsLaterEditsThenGoesWhole() throws {
        try a.database.run("INSERT INTO t VALUES ('r', ?, 'n1'), ('s', 'x', 'y')", Self.oversized)
        try cappedSync(from: a, to: b)
        XCTAssertEqual(try ids(b), ["s"])
        XCTAssertEqual(try a.withheldValues(cap: Self.cap), [WithheldValue(table: "t", key: "'r'", column: "big", bytes: 2000)])

        try a.database.execute("UPDATE t SET note = 'n2' WHERE id = 'r'")
        let edits = try cappedSync(from: a, to: b)
        XCTAssertTrue(edits.changes.isEmpty, "an edit of a row whose life is left out must wait with it")
        XCTAssertEqual(try ids(b), ["s"])

        try a.database.execute("UPDATE t SET big = 'small now' WHERE id = 'r'")
        try cappedSync(from: a, to: b)
        XCTAssertEqual(try rows(of: b, table: "t"), try rows(of: a, table: "t"))
        XCTAssertEqual(try a.withheldValues(cap: Self.cap), [])
        XCTAssertEqual(try a.database.int64(#"SELECT count(*) FROM "_sqsync_withheld""#), 0)
    }

    func testAColumnOverTheCapGoesOnceTheCapIsRaised() throws {
        try a.database.execute("INSERT INTO t VALUES ('r', 'small', 'n1')")
        try syncBoth(a, b)
        try a.database.run("UPDATE t SET big = ?, note = 'n2' WHERE id = 'r'", Self.oversized)
        try cappedSync(from: a, to: b)
        XCTAssertEqual(try rows(of: b, table: "t"), [[.text("r"), .text("small"), .text("n2")]])
        XCTAssertEqual(try a.withheldValues(cap: Self.cap).map(\.column), ["big"])

        // Nothing new at the writer, yet the raised cap sends the value as a new change.
        try cappedSync(from: a, to: b, cap: 1 << 20)
        XCTAssertEqual(try rows(of: b, table: "t"), try rows(of: a, table: "t"))
        XCTAssertEqual(try a.withheldValues(cap: Self.cap), [])
    }

    /// Another replica's later write of the column replaces the left-out value: it is
    /// forgotten, not sent again over the newer one.
    func testALeftOutValueAnotherReplicaReplacedIsForgotten() throws {
        try a.database.execute("INSERT INTO t VALUES ('r', 'small', 'n1')")
        try syncBoth(a, b)
        try a.database.run("UPDATE t SET big = ? WHERE id = 'r'", Self.oversized)
        try cappedSync(from: a, to: b)
        try b.database.execute("UPDATE t SET big = 'from b' WHERE id = 'r'")
        try sync(from: b, to: a)
        let seq = try a.knowledge()[a.knowledgeID]
        XCTAssertEqual(try a.releaseWithheldValues(cap: 1 << 20), [])
        XCTAssertEqual(try a.knowledge()[a.knowledgeID], seq, "nothing may be logged again")
        XCTAssertEqual(try a.database.int64(#"SELECT count(*) FROM "_sqsync_withheld""#), 0)
        try syncBoth(a, b)
        XCTAssertEqual(try rows(of: a, table: "t"), [[.text("r"), .text("from b"), .text("n1")]])
        XCTAssertEqual(try rows(of: b, table: "t"), try rows(of: a, table: "t"))
    }

    /// A left-out row deleted before it fits: its deletion goes, nothing is logged again.
    func testALeftOutRowDeletedIsForgotten() throws {
        try a.database.run("INSERT INTO t VALUES ('r', ?, 'n1')", Self.oversized)
        try cappedSync(from: a, to: b)
        try a.database.execute("DELETE FROM t WHERE id = 'r'")
        try cappedSync(from: a, to: b, cap: 1 << 20)
        XCTAssertEqual(try a.database.int64(#"SELECT count(*) FROM "_sqsync_withheld""#), 0)
        XCTAssertEqual(try ids(b), [])
        try a.database.execute("INSERT INTO t VALUES ('r', 'back', 'n3')")
        try syncBoth(a, b)
        XCTAssertEqual(try rows(of: b, table: "t"), try rows(of: a, table: "t"))
    }
}
