import Foundation
import TestSupport
import XCTest

/// The conflict log is what an operator reads to recover a lost edit: on both sides, in both
/// orders, it names the value that lost, its writer and the value that won, and never
/// offers the winning value as the lost one (issue 56, item 2).
final class ConflictLogCLITests: XCTestCase {
    private var h: Harness!
    private var a = "", b = "", box = ""

    override func setUpWithError() throws {
        h = try Harness()
        a = try h.makeReplica("A", schema: "CREATE TABLE t(id TEXT PRIMARY KEY, name TEXT);")
        b = try h.cloneReplica(a, as: "B")
        box = try h.folder("box")
    }

    override func tearDown() { h = nil }

    private func log(_ db: String) throws -> [[String: Any]] {
        try XCTUnwrap(h.okJSON(["conflicts", db])["conflicts"] as? [[String: Any]])
    }

    /// `first` inserts key k, then `second` does (a later clock: it wins); both sync, `first`
    /// again. Each log's entry: lost `first`'s value or says it is unknown here, never the
    /// winner's; kept `second`'s value, by `second`.
    private func concurrentInserts(first: (db: String, name: String), second: (db: String, name: String)) throws {
        try h.sqlite(first.db, "INSERT INTO t VALUES ('k', '\(first.name)-val');")
        Thread.sleep(forTimeInterval: 0.01)
        try h.sqlite(second.db, "INSERT INTO t VALUES ('k', '\(second.name)-val');")
        for (db, name) in [first, second, first] { try h.syncOK(db, as: name, box) }
        XCTAssertEqual(try h.dump(a, table: "t", orderBy: "id"), try h.dump(b, table: "t", orderBy: "id"))
        for side in [first, second] {
            let entries = try log(side.db)
            XCTAssertEqual(entries.count, 1, "\(side.name): \(entries)")
            let entry = try XCTUnwrap(entries.first)
            XCTAssertEqual(entry["won_value"] as? String, "\(second.name)-val", "\(side.name): \(entry)")
            XCTAssertEqual(entry["won_site_name"] as? String, second.name, "\(side.name): \(entry)")
            XCTAssertEqual(entry["lost_site_name"] as? String, first.name, "\(side.name): \(entry)")
            XCTAssertNotEqual(entry["lost_value"] as? String, "\(second.name)-val", "\(side.name) blames the winning value: \(entry)")
            if entry["lost_value_known"] as? Int == 1 {
                XCTAssertEqual(entry["lost_value"] as? String, "\(first.name)-val", "\(side.name): \(entry)")
            }
            let text = try h.ok(["conflicts", side.db]).stdout
            XCTAssertTrue(text.contains("kept '\(second.name)-val' from \(second.name)"), "\(side.name): \(text)")
            XCTAssertFalse(text.contains("lost '\(second.name)-val'"), "\(side.name): \(text)")
        }
        // The loser's own log holds its value, whatever the order.
        XCTAssertEqual(try log(first.db).first?["lost_value"] as? String, "\(first.name)-val")
    }

    func testTheLaterInsertWinsAndEachLogTellsTheTruthWhenBWritesFirst() throws {
        try concurrentInserts(first: (b, "B"), second: (a, "A"))
    }

    func testTheLaterInsertWinsAndEachLogTellsTheTruthWhenAWritesFirst() throws {
        try concurrentInserts(first: (a, "A"), second: (b, "B"))
    }

    /// A 4 KB BLOB is shown by its start and size; `--json` keeps every byte.
    func testALongBlobIsShownShortened() throws {
        try h.sqlite(a, "INSERT INTO t VALUES ('big', randomblob(4096));")
        let why = try h.ok(["why", a, "t", "big"]).stdout
        XCTAssertTrue(why.contains("(4096 bytes)"), why)
        XCTAssertLessThan(why.split(separator: "\n").map(\.count).max() ?? 0, 300, why)
    }

    /// Two 4,096-character values written at once: `conflicts` shows each by its start and
    /// length on both sides; `--json` keeps them whole.
    func testLongValuesInTheConflictLogAreShownShortened() throws {
        try h.sqlite(a, "INSERT INTO t VALUES ('k', 'short');")
        for (db, name) in [(a, "A"), (b, "B")] { try h.syncOK(db, as: name, box) }
        try h.sqlite(b, "UPDATE t SET name = hex(randomblob(2048)) WHERE id = 'k';")
        Thread.sleep(forTimeInterval: 0.01)
        try h.sqlite(a, "UPDATE t SET name = hex(randomblob(2048)) WHERE id = 'k';")
        for (db, name) in [(b, "B"), (a, "A"), (b, "B")] { try h.syncOK(db, as: name, box) }
        for db in [a, b] {
            let text = try h.ok(["conflicts", db]).stdout
            XCTAssertTrue(text.contains("(4096 characters)"), text)
            XCTAssertLessThan(text.split(separator: "\n").map(\.count).max() ?? 0, 400, text)
            XCTAssertEqual((try log(db).first?["lost_value"] as? String)?.count, 4096, "--json keeps every character")
        }
    }
}
