import Foundation
import TestSupport
import SQLiteDatabase
import XCTest

@testable import ChangeLog

/// Merging between replicas made by `clone`: per-column last writer wins, causal length for
/// rows, conflict logging, relays, duplicates, late arrivals, clock skew, exact values,
/// UNIQUE clashes and foreign keys.
final class MergeTests: XCTestCase {
    private var sandbox: Sandbox!

    override func setUpWithError() throws { sandbox = try Sandbox() }
    override func tearDown() { sandbox = nil }

    private let itemsSchema = "CREATE TABLE items (id TEXT PRIMARY KEY, name TEXT, qty INTEGER, note);"

    /// `names` replicas sharing the items table, holding row ('a', 'apple', 1, NULL).
    private func items(_ names: [String]) throws -> [Replica] {
        let first = try sandbox.replica(names[0], schema: itemsSchema, track: ["items"])
        try first.database.execute("INSERT INTO items VALUES ('a', 'apple', 1, NULL)")
        return [first] + (try names.dropFirst().map { try sandbox.clone(first, $0) })
    }

    /// Makes the next local write of `replica` later than anything written so far elsewhere.
    private func runFast(_ replica: Replica, by milliseconds: Int64 = 60_000) throws {
        try setClock(of: replica, to: nowMilliseconds + milliseconds)
    }

    private func conflicts(_ replica: Replica) throws -> [[String: SQLValue]] { try replica.conflicts() }

    // MARK: Columns

    func testConcurrentUpdatesOfDifferentColumnsBothSurvive() throws {
        for order in [false, true] {
            sandbox = try Sandbox()
            let r = try items(["a", "b"]), a = r[0], b = r[1]
            try a.database.execute("UPDATE items SET name = 'apricot' WHERE id = 'a'")
            try b.database.execute("UPDATE items SET qty = 5, note = 'n' WHERE id = 'a'")
            if order { try syncBoth(a, b) } else { try syncBoth(b, a) }
            for replica in r {
                XCTAssertEqual(try rows(of: replica, table: "items"), [[.text("a"), .text("apricot"), .integer(5), .text("n")]])
                XCTAssertEqual(try conflictCount(replica), 0)
            }
        }
    }

    func testSameColumnLaterClockWinsAndLoserIsLogged() throws {
        for aFirst in [true, false] {
            sandbox = try Sandbox()
            let r = try items(["a", "b"]), a = r[0], b = r[1]
            try a.database.execute("UPDATE items SET qty = 10 WHERE id = 'a'")
            try runFast(b)
            try b.database.execute("UPDATE items SET qty = 20 WHERE id = 'a'")
            if aFirst { try syncBoth(a, b) } else { try syncBoth(b, a) }
            try assertSameRows(r, table: "items")
            XCTAssertEqual(try rows(of: a, table: "items")[0][2], .integer(20), "the later clock wins")
            // a's value lost: b rejects it when it arrives first there; when b's value arrives
            // first at a, a logs the value it overwrote (and then no longer sends it).
            let logged = try conflicts(a) + conflicts(b)
            XCTAssertEqual(logged.count, 1, "a first: \(aFirst): \(logged)")
            XCTAssertEqual(try conflicts(aFirst ? b : a).count, 1, "logged on the side that rejected or overwrote it")
            XCTAssertEqual(logged.first?["kind"], .text("concurrent update"))
            XCTAssertEqual(logged.first?["column_name"], .text("qty"))
            XCTAssertEqual(logged.first?["lost_value"], .integer(10))
            XCTAssertEqual(logged.first?["lost_site"], .text(a.knowledgeID))
            XCTAssertEqual(logged.first?["won_site"], .text(b.knowledgeID))
        }
    }

    func testEqualClocksAreSettledByKnowledgeID() throws {
        let r = try items(["a", "b"]), a = r[0], b = r[1]
        let future = nowMilliseconds + 3_600_000
        try setClock(of: a, to: future)
        try setClock(of: b, to: future)
        try a.database.execute("UPDATE items SET name = 'from a' WHERE id = 'a'")
        try b.database.execute("UPDATE items SET name = 'from b' WHERE id = 'a'")
        XCTAssertEqual(try clock(of: a).hlc, try clock(of: b).hlc)
        try syncBoth(a, b)
        try assertSameRows(r, table: "items")
        let winner = a.knowledgeID > b.knowledgeID ? "from a" : "from b"
        XCTAssertEqual(try rows(of: b, table: "items")[0][1], .text(winner))
    }

    // MARK: Rows

    func testDeleteBeatsConcurrentUpdate() throws {
        for deleteFirst in [true, false] {
            sandbox = try Sandbox()
            let r = try items(["a", "b"]), a = r[0], b = r[1]
            try a.database.execute("DELETE FROM items WHERE id = 'a'")
            try runFast(b)  // even a later update does not bring the row back
            try b.database.execute("UPDATE items SET qty = 99 WHERE id = 'a'")
            if deleteFirst { try syncBoth(a, b) } else { try syncBoth(b, a) }
            try syncBoth(a, b)
            for replica in r { XCTAssertEqual(try rows(of: replica, table: "items"), [], "\(replica.name)") }
            let logged = try conflicts(a) + conflicts(b)
            XCTAssertEqual(logged.count, 1, "\(logged)")
            XCTAssertEqual(logged.first?["kind"], .text("update lost to delete"))
            XCTAssertEqual(logged.first?["column_name"], .text("qty"))
            XCTAssertEqual(logged.first?["lost_value"], .integer(99))
            XCTAssertEqual(logged.first?["lost_site"], .text(b.knowledgeID))
            for replica in r { XCTAssertEqual(try replica.doctor(), []) }
        }
    }

    /// Concurrent deletes of one life compare clocks (a delete's lags the wall clock, see
    /// TriggerSQL): both replicas keep the same tombstone, and nothing is logged as lost.
    func testConcurrentDeletesOfOneLifeLeaveTheSameTombstone() throws {
        for fastFirst in [true, false] {
            sandbox = try Sandbox()
            let r = try items(["a", "b"]), a = r[0], b = r[1]
            try runFast(fastFirst ? a : b)
            try a.database.execute("DELETE FROM items WHERE id = 'a'")
            try b.database.execute("DELETE FROM items WHERE id = 'a'")
            try syncBoth(a, b)
            let entries = try r.map {
                try $0.database.valueRows(#"SELECT "cl", "hlc", "seq", "cells" FROM "_sqsync_rows" WHERE "pk" = 'a'"#)
            }
            XCTAssertEqual(entries[0], entries[1])
            XCTAssertEqual(entries[0].first?[0], .integer(2))
            let sites = try r.map {
                try $0.database.scalar(
                    #"SELECT s."knowledge_id" FROM "_sqsync_rows" r JOIN "_sqsync_sites" s USING ("site") WHERE r."pk" = 'a'"#)
            }
            XCTAssertEqual(sites[0], sites[1])
            XCTAssertEqual(sites[0], .text((fastFirst ? a : b).knowledgeID), "the later clock")
            for replica in r {
                XCTAssertEqual(try rows(of: replica, table: "items"), [])
                XCTAssertEqual(try conflictCount(replica), 0)
                XCTAssertEqual(try replica.doctor(), [])
            }
        }
    }

    func testReinsertAfterDeleteBringsRowBackEverywhere() throws {
        let r = try items(["a", "b", "c"]), a = r[0], b = r[1], c = r[2]
        try b.database.execute("DELETE FROM items WHERE id = 'a'")
        try syncUntilQuiet(r)
        for replica in r { XCTAssertEqual(try rows(of: replica, table: "items"), []) }
        try c.database.execute("INSERT INTO items VALUES ('a', 'again', 7, 'back')")
        try sync(from: c, to: b)
        try sync(from: b, to: a)
        XCTAssertEqual(try rows(of: a, table: "items"), [[.text("a"), .text("again"), .integer(7), .text("back")]])
        try syncUntilQuiet(r)
        try assertSameRows(r, table: "items")
        for replica in r {
            XCTAssertEqual(try replica.database.scalar(#"SELECT "cl" FROM "_sqsync_rows" WHERE "pk" = 'a'"#), .integer(3))
            XCTAssertEqual(try conflictCount(replica), 0)
        }
    }

    // MARK: Relays, duplicates, late arrivals

    func testRelayGivesThirdReplicaTheChanges() throws {
        let r = try items(["a", "b", "c"]), a = r[0], b = r[1], c = r[2]
        try a.database.execute("UPDATE items SET name = 'via b' WHERE id = 'a'; INSERT INTO items VALUES ('z', 'zed', 26, NULL)")
        try sync(from: a, to: b)
        try sync(from: b, to: c)
        try assertSameRows(r, table: "items")
        XCTAssertEqual(try c.knowledge()[a.knowledgeID], try a.knowledge()[a.knowledgeID])
        XCTAssertEqual(try changeSet(from: a, for: c).changes, [], "c lacks nothing of a")
    }

    /// b reports its clock to c, then learns from a (its clock moves forward to a's without a
    /// local change), then sends to c again. That is ordinary relaying, not a copied database.
    func testSecondExchangeAfterLearningFromAnotherReplica() throws {
        let r = try items(["a", "b", "c"]), a = r[0], b = r[1], c = r[2]
        try b.database.execute("UPDATE items SET note = 'b was here' WHERE id = 'a'")
        try sync(from: b, to: c)
        try runFast(a)
        try a.database.execute("UPDATE items SET name = 'from a' WHERE id = 'a'")
        try sync(from: a, to: b)
        XCTAssertNoThrow(try sync(from: b, to: c), "b relaying a's change to c")
        try assertSameRows([b, c], table: "items")
    }

    /// Same as above with two replicas: a plain back-and-forth.
    func testBackAndForthWithoutLocalChangesInBetween() throws {
        let r = try items(["a", "b"]), a = r[0], b = r[1]
        try b.database.execute("UPDATE items SET qty = 2 WHERE id = 'a'")
        try sync(from: b, to: a)
        try runFast(a)
        try a.database.execute("UPDATE items SET qty = 3 WHERE id = 'a'")
        try sync(from: a, to: b)
        XCTAssertNoThrow(try sync(from: b, to: a), "b sends again after importing a newer clock")
        try assertSameRows(r, table: "items")
    }

    /// Two change sets from b with the same sequence number but different clocks (b imported
    /// in between), delivered newest first: the older one is a late delivery, not a copy.
    func testLateChangeSetWithSameSequenceNumberIsAccepted() throws {
        let r = try items(["a", "b"]), a = r[0], b = r[1]
        try b.database.execute("UPDATE items SET note = 'b' WHERE id = 'a'")
        let older = try changeSet(from: b, for: a)
        try runFast(a)
        try a.database.execute("UPDATE items SET name = 'a' WHERE id = 'a'")
        try sync(from: a, to: b)
        let newer = try changeSet(from: b, for: a)
        XCTAssertEqual(newer.header.last, older.header.last)
        XCTAssertGreaterThan(newer.header.createdHLC, older.header.createdHLC)
        try apply(newer, to: a)
        XCTAssertNoThrow(try apply(older, to: a), "a late duplicate from b")
        try assertSameRows(r, table: "items")
    }

    func testDuplicateImportChangesNothing() throws {
        let r = try items(["a", "b"]), a = r[0], b = r[1]
        try a.database.execute(
            """
            UPDATE items SET qty = 10 WHERE id = 'a';
            INSERT INTO items VALUES ('b', 'banana', 2, NULL), ('c', 'cherry', 3, x'00');
            DELETE FROM items WHERE id = 'c';
            """)
        try runFast(b)
        try b.database.execute("UPDATE items SET qty = 20 WHERE id = 'a'")  // a conflict to log
        let set = try changeSet(from: a, for: b)
        try apply(set, to: b)
        let rowsOnce = try rows(of: b, table: "items"), metadataOnce = try metadata(of: b), knowledgeOnce = try b.knowledge()
        XCTAssertEqual(try conflictCount(b), 1)
        let again = try apply(set, to: b)
        XCTAssertEqual(again.changes, 0)
        XCTAssertEqual(again.conflicts, 0)
        XCTAssertEqual(try rows(of: b, table: "items"), rowsOnce)
        XCTAssertEqual(try metadata(of: b), metadataOnce, "no new conflicts, stamps or rows")
        XCTAssertEqual(try b.knowledge(), knowledgeOnce)
    }

    func testOlderChangeSetAfterNewerOneDoesNotRollBack() throws {
        let r = try items(["a", "b"]), a = r[0], b = r[1]
        try a.database.execute("UPDATE items SET qty = 2 WHERE id = 'a'; INSERT INTO items VALUES ('d', 'doomed', 1, NULL)")
        let older = try changeSet(from: a, for: b)
        try a.database.execute("UPDATE items SET qty = 3, name = 'newer' WHERE id = 'a'; DELETE FROM items WHERE id = 'd'")
        let newer = try changeSet(from: a, for: b)
        try apply(newer, to: b)
        try apply(older, to: b)
        try assertSameRows(r, table: "items")
        XCTAssertEqual(try rows(of: b, table: "items"), [[.text("a"), .text("newer"), .integer(3), .null]])
        XCTAssertEqual(try conflictCount(b), 0)
        XCTAssertEqual(try b.knowledge()[a.knowledgeID], try a.knowledge()[a.knowledgeID])
    }

    /// The newer change set carries only what came after the older one (a delta) and arrives
    /// first. a's own older value is superseded, not a concurrent update: it must not be
    /// logged as a conflict (in order, nothing is logged).
    func testDeltaBeforeItsBaseDoesNotRollBackOrInventConflicts() throws {
        let r = try items(["a", "b"]), a = r[0], b = r[1]
        try a.database.execute("UPDATE items SET qty = 2 WHERE id = 'a'")
        let older = try changeSet(from: a, for: b)
        try a.database.execute("UPDATE items SET qty = 3 WHERE id = 'a'")
        var base = try b.knowledge()
        base.formUnion(Knowledge([a.knowledgeID: older.header.last]))
        let delta = try changeSet(from: a, since: base)
        XCTAssertEqual(delta.changes.count, 1)
        let first = try apply(delta, to: b)
        XCTAssertFalse(first.knowledgeAdvanced, "b lacked what the delta assumed")
        try apply(older, to: b)
        XCTAssertEqual(try rows(of: b, table: "items"), [[.text("a"), .text("apple"), .integer(3), .null]])
        try syncUntilQuiet(r)
        try assertSameRows(r, table: "items")
        XCTAssertEqual(try conflicts(b), [], "a's superseded own value logged as a conflict")
    }

    func testFastClockSeenOnImportOrdersLaterChangesAfterIt() throws {
        let r = try items(["a", "b"]), a = r[0], b = r[1]
        let skew = nowMilliseconds + 3_600_000  // b's clock runs an hour ahead
        try setClock(of: b, to: skew)
        try b.database.execute("UPDATE items SET qty = 2 WHERE id = 'a'")
        try sync(from: b, to: a)
        XCTAssertGreaterThan(try clock(of: a).hlc, skew, "the import pushed a's clock past b's")
        try a.database.execute("UPDATE items SET qty = 3 WHERE id = 'a'")  // made after seeing b's
        try syncBoth(a, b)
        for replica in r {
            XCTAssertEqual(try rows(of: replica, table: "items")[0][2], .integer(3), "\(replica.name)")
            XCTAssertEqual(try conflictCount(replica), 0)
        }
    }

    // MARK: Values

    func testAllStorageClassesRoundTripExactly() throws {
        let a = try sandbox.replica("a", schema: "CREATE TABLE vals (id TEXT PRIMARY KEY, v);", track: ["vals"])
        let b = try sandbox.clone(a, "b")
        var random = SplitMix64(seed: 42)
        let mebibyte = (0..<(1 << 20)).map { _ in UInt8.random(in: 0...255, using: &random) }
        let values: [SQLValue] = [
            .null, .integer(0), .integer(Int64.min), .integer(Int64.max), .integer(-1),
            .real(-0.0), .real(Double("1e-310")!), .real(0.1 + 0.2), .real(Double.greatestFiniteMagnitude),
            .real(-Double.greatestFiniteMagnitude), .real(Double.leastNonzeroMagnitude), .real(.infinity), .real(-.infinity),
            .real(4.0858482746520603e-39),
            .text(""), .text("emoji 👩‍🔬🇫🇷 and ünïcödé, 中文, עברית"), .text("'quoted', \"double\""),
            .blob([]), .blob([0, 0, 0]), .blob(mebibyte),
        ]
        let ids = values.indices.map { String(format: "v%02d", $0) }
        for (id, value) in zip(ids, values) { try a.database.run("INSERT INTO vals VALUES (?, ?)", .text(id), value) }
        let expected = zip(ids, values).map { [SQLValue.text($0), $1] }
        XCTAssertEqual(try rows(of: a, table: "vals"), expected, "SQLite itself keeps every value")
        try sync(from: a, to: b)
        XCTAssertEqual(try rows(of: b, table: "vals"), expected, "inserts carry values exactly")

        // Updates carry them too: every row takes the next row's value.
        for (index, id) in ids.enumerated() {
            try a.database.run("UPDATE vals SET v = ? WHERE id = ?", values[(index + 1) % values.count], .text(id))
        }
        try sync(from: a, to: b)
        XCTAssertEqual(
            try rows(of: b, table: "vals"), zip(ids, values.indices).map { [.text($0), values[($1 + 1) % values.count]] })
        try assertSameRows([a, b], table: "vals")
    }

    /// Composite keys are stored as `quote(a) || ',' || quote(b)` and decoded back for
    /// deletions. SQLite's quote() writes some REAL values with 15 digits that do not
    /// round-trip, so the deletion names a different key and the row survives on the peer.
    func testCompositeKeyWithAnyRealPartIsDeletedEverywhere() throws {
        let a = try sandbox.replica("a", schema: "CREATE TABLE k (name TEXT, x REAL, v, PRIMARY KEY (name, x));", track: ["k"])
        let b = try sandbox.clone(a, "b")
        let reals = [4.0858482746520603e-39, 8.228927346002939e-297, 0.1 + 0.2, Double("1e-310")!]
        for (index, x) in reals.enumerated() {
            try a.database.run("INSERT INTO k VALUES (?, ?, ?)", .text("n\(index)"), .real(x), .integer(Int64(index)))
        }
        try sync(from: a, to: b)
        try assertSameRows([a, b], table: "k")
        try a.database.execute("DELETE FROM k")
        try sync(from: a, to: b)
        XCTAssertEqual(try rows(of: b, table: "k"), [], "every deletion reached b")
        XCTAssertEqual(try b.doctor(), [])
    }

    // MARK: Constraints

    private let usersSchema = "CREATE TABLE users (id TEXT PRIMARY KEY, email TEXT UNIQUE, name TEXT);"

    func testUniqueClashKeepsEarlierRowEverywhere() throws {
        for earlierFirst in [true, false] {
            sandbox = try Sandbox()
            let a = try sandbox.replica("a", schema: usersSchema, track: ["users"])
            let b = try sandbox.clone(a, "b")
            try a.database.execute("INSERT INTO users VALUES ('u-a', 'same@example.org', 'Ann')")
            try runFast(b)
            try b.database.execute("INSERT INTO users VALUES ('u-b', 'same@example.org', 'Bob')")
            if earlierFirst { try syncBoth(a, b) } else { try syncBoth(b, a) }
            try syncUntilQuiet([a, b])
            for replica in [a, b] {
                XCTAssertEqual(
                    try rows(of: replica, table: "users"), [[.text("u-a"), .text("same@example.org"), .text("Ann")]],
                    "\(replica.name), earlier first: \(earlierFirst)")
                XCTAssertEqual(try replica.doctor(), [])
            }
            let logged = try conflicts(a) + conflicts(b)
            XCTAssertFalse(logged.isEmpty)
            for entry in logged {
                XCTAssertEqual(entry["kind"], .text("unique clash"))
                XCTAssertEqual(entry["table_name"], .text("users"))
                XCTAssertEqual(entry["pk"], .text("'u-b'"))
                let row = entry["lost_row"]?.stringValue ?? ""
                XCTAssertTrue(row.contains("\"u-b\"") && row.contains("Bob") && row.contains("same@example.org"), row)
            }
            // The replica that held the later row keeps it whole in its log.
            XCTAssertTrue(try conflicts(earlierFirst ? b : a).contains { $0["kind"] == .text("unique clash") })
        }
    }

    private let familySchema = """
        CREATE TABLE child (id TEXT PRIMARY KEY, parent_id TEXT NOT NULL REFERENCES parent (id), v);
        CREATE TABLE parent (id TEXT PRIMARY KEY, v);
        """

    func testChildrenInSameChangeSetAreAppliedAfterParents() throws {
        // Tracked child first, so only the foreign keys can put the parent first.
        let a = try sandbox.replica("a", schema: familySchema, track: ["child", "parent"])
        let b = try sandbox.clone(a, "b")
        for replica in [a, b] { try replica.database.execute("PRAGMA foreign_keys = ON") }
        try a.database.execute(
            """
            INSERT INTO parent VALUES ('p1', 1), ('p2', 2);
            INSERT INTO child VALUES ('c1', 'p1', 'x'), ('c2', 'p2', 'y'), ('c3', 'p1', 'z');
            """)
        let set = try changeSet(from: a, for: b)
        XCTAssertEqual(set.header.tables.map(\.name), ["parent", "child"])
        try apply(set, to: b)
        XCTAssertEqual(try b.database.valueRows("PRAGMA foreign_key_check"), [])
        try assertSameRows([a, b], table: "parent")
        try assertSameRows([a, b], table: "child")
    }

    /// A parent deleted on one replica while a child is added on another: the import does
    /// not get stuck, both replicas agree, and the orphan is reported.
    func testChildOfConcurrentlyDeletedParentIsReported() throws {
        let a = try sandbox.replica("a", schema: familySchema, track: ["child", "parent"])
        try a.database.execute("INSERT INTO parent VALUES ('p1', 1)")
        let b = try sandbox.clone(a, "b")
        try a.database.execute("DELETE FROM parent")
        try b.database.execute("INSERT INTO child VALUES ('c1', 'p1', 'x')")
        try syncBoth(a, b)
        try syncUntilQuiet([a, b])
        for replica in [a, b] {
            XCTAssertEqual(try rows(of: replica, table: "parent"), [])
            XCTAssertEqual(try rows(of: replica, table: "child"), [[.text("c1"), .text("p1"), .text("x")]])
            XCTAssertEqual(try replica.orphans().map(\.table), ["child"])
            XCTAssertEqual(try replica.orphans().map(\.parent), ["parent"])
            let problems = try replica.doctor()
            XCTAssertTrue(problems.contains { $0.contains("child") && $0.contains("parent") }, "\(problems)")
        }
    }

    /// Deleting a family in one change set: with foreign keys enforced on the importing
    /// connection, parents must not be deleted before their children.
    func testDeletedFamilyAppliesWithForeignKeysOn() throws {
        let a = try sandbox.replica("a", schema: familySchema, track: ["child", "parent"])
        try a.database.execute("INSERT INTO parent VALUES ('p1', 1); INSERT INTO child VALUES ('c1', 'p1', 'x');")
        let b = try sandbox.clone(a, "b")
        for replica in [a, b] { try replica.database.execute("PRAGMA foreign_keys = ON") }
        try a.database.execute("DELETE FROM child; DELETE FROM parent;")
        XCTAssertNoThrow(try sync(from: a, to: b))
        XCTAssertEqual(try rows(of: b, table: "parent"), [])
        XCTAssertEqual(try rows(of: b, table: "child"), [])
        XCTAssertEqual(try b.database.valueRows("PRAGMA foreign_key_check"), [])
    }
}
