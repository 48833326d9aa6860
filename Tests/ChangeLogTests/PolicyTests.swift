import Foundation
import SQLiteDatabase
import TestSupport
import XCTest

@testable import ChangeLog

/// Merge policies in process: counters that add up in any order, max and min, policies that
/// must agree, and purge folding counter entries without moving a value.
final class PolicyTests: XCTestCase {
    private var sandbox: Sandbox!

    override func setUpWithError() throws { sandbox = try Sandbox() }
    override func tearDown() { sandbox = nil }

    private let schema = "CREATE TABLE stock (id TEXT PRIMARY KEY, qty INTEGER NOT NULL DEFAULT 0, weight REAL, seen INTEGER);"

    /// Replicas cloned from one that holds ('tent', 10, 1.5, 1) with qty and weight counters
    /// and seen a max column.
    private func stock(_ names: [String]) throws -> [Replica] {
        let first = try sandbox.replica(names[0], schema: schema, track: ["stock"])
        try first.database.execute("INSERT INTO stock VALUES ('tent', 10, 1.5, 1)")
        try first.setPolicy(.counter, table: "stock", column: "qty")
        try first.setPolicy(.counter, table: "stock", column: "weight")
        try first.setPolicy(.max, table: "stock", column: "seen")
        return [first] + (try names.dropFirst().map { try sandbox.clone(first, $0) })
    }

    private func tent(_ replica: Replica) throws -> [SQLValue] {
        try replica.database.valueRows("SELECT qty, weight, seen FROM stock WHERE id = 'tent'").first ?? []
    }

    func testConcurrentDeltasAddUpWhateverTheOrder() throws {
        for order in [[0, 1, 2], [2, 1, 0], [1, 0, 2]] {
            sandbox = try Sandbox()
            let r = try stock(["a", "b", "c"])
            try r[0].database.execute("UPDATE stock SET qty = qty - 3, weight = weight + 0.25")
            try r[0].database.execute("UPDATE stock SET qty = qty + 1")
            try r[1].database.execute("UPDATE stock SET qty = 20")  // +10 over what b held
            try r[2].database.execute("UPDATE stock SET qty = qty + 5, weight = weight - 1.0")
            for source in order { for target in order where target != source { try sync(from: r[source], to: r[target]) } }
            try syncUntilQuiet(r)
            for replica in r {
                XCTAssertEqual(try tent(replica), [.integer(10 - 3 + 1 + 10 + 5), .real(0.75), .integer(1)], "order \(order)")
                XCTAssertEqual(try replica.conflicts().count, 0, "a counter merge loses nothing")
            }
        }
    }

    func testApplyingTheSameContributionsTwiceCountsThemOnce() throws {
        let r = try stock(["a", "b"])
        try r[0].database.execute("UPDATE stock SET qty = qty + 4")
        let set = try changeSet(from: r[0], for: r[1])
        try apply(set, to: r[1])
        try apply(set, to: r[1])
        XCTAssertEqual(try tent(r[1])[0], .integer(14))
    }

    func testMaxKeepsTheGreatestAndRefusesALocalLowering() throws {
        let r = try stock(["a", "b"])
        try r[0].database.execute("UPDATE stock SET seen = 5")
        try r[1].database.execute("UPDATE stock SET seen = 7")
        try r[0].database.execute("UPDATE stock SET seen = 4")
        XCTAssertEqual(try tent(r[0])[2], .integer(5), "the trigger undoes a lowering write")
        try syncUntilQuiet(r)
        for replica in r { XCTAssertEqual(try tent(replica)[2], .integer(7)) }
        XCTAssertEqual(try r[0].conflicts().compactMap { $0["kind"]?.stringValue }.first, "below max")
        // The 5 lost to the 7: logged where it lost (b, on arrival; a itself learns of it
        // only through bundle headers, which the file-based tests cover).
        let lost = try r[1].conflicts().filter { $0["kind"]?.stringValue == "concurrent update" }
        XCTAssertEqual(lost.map { $0["lost_value"] }, [.integer(5)])
    }

    func testDifferentPoliciesRefuseToMerge() throws {
        let r = try stock(["a", "b"])
        try r[1].setPolicy(.lww, table: "stock", column: "qty")
        try r[0].database.execute("UPDATE stock SET qty = qty + 1")
        XCTAssertThrowsError(try sync(from: r[0], to: r[1])) { error in
            let message = "\(error)"
            XCTAssertEqual((error as? MergeHeld)?.reason.kind, .policyMismatch(table: "stock", column: "qty"))
            XCTAssertTrue(message.contains("stock.qty") && message.contains("counter") && message.contains("lww"), message)
        }
        XCTAssertEqual(try tent(r[1])[0], .integer(10))
    }

    func testPolicyRefusesNonNumericColumnsAndKeys() throws {
        let r = try stock(["a"])
        try r[0].database.execute("INSERT INTO stock VALUES ('rope', 1, NULL, NULL)")
        XCTAssertThrowsError(try r[0].setPolicy(.counter, table: "stock", column: "seen"))
        XCTAssertThrowsError(try r[0].setPolicy(.counter, table: "stock", column: "id"))
        XCTAssertThrowsError(try r[0].setPolicy(.max, table: "nothing", column: "id"))
        XCTAssertEqual(
            try r[0].policies(),
            [
                ColumnPolicy(table: "stock", column: "qty", policy: .counter),
                ColumnPolicy(table: "stock", column: "weight", policy: .counter),
                ColumnPolicy(table: "stock", column: "seen", policy: .max),
            ])
    }

    func testPurgeFoldsAcknowledgedEntriesWithoutMovingValues() throws {
        let r = try stock(["a", "b"])
        try r[0].database.execute("UPDATE stock SET qty = qty + 2")
        try r[1].database.execute("UPDATE stock SET qty = qty + 3")
        try syncUntilQuiet(r)
        let entries = { (replica: Replica) in
            try replica.database.scalar(#"SELECT count(*) FROM "_sqsync_counters" WHERE "site" != 0"#)?.int64Value ?? -1
        }
        XCTAssertEqual(try entries(r[0]), 2)
        _ = try r[0].purge(dryRun: false)
        XCTAssertEqual(try entries(r[0]), 1, "its own entry, acknowledged by b, is folded")
        XCTAssertEqual(try tent(r[0])[0], .integer(15))
        try r[0].database.execute("UPDATE stock SET qty = qty + 1")
        try r[1].database.execute("UPDATE stock SET qty = qty - 4")
        try syncUntilQuiet(r)
        for replica in r { XCTAssertEqual(try tent(replica)[0], .integer(12)) }
    }

    func testReinsertStartsTheCounterOver() throws {
        let r = try stock(["a", "b"])
        try r[0].database.execute("UPDATE stock SET qty = qty + 2")
        try syncUntilQuiet(r)
        try r[0].database.execute("DELETE FROM stock")
        try r[0].database.execute("INSERT INTO stock VALUES ('tent', 50, 0.5, 0)")
        try r[1].database.execute("UPDATE stock SET qty = qty + 7")
        try syncUntilQuiet(r)
        for replica in r { XCTAssertEqual(try tent(replica)[0], .integer(50)) }
    }

    func testNullIntoACounterBecomesZeroAndTheReplicaKeepsWorking() throws {
        let r = try stock(["a", "b"])
        try r[0].database.execute("INSERT INTO stock (id, qty, weight) VALUES ('peg', 5, NULL)")
        try r[0].database.execute("UPDATE stock SET weight = weight + 2 WHERE id = 'peg'")
        try r[0].database.execute("UPDATE stock SET id = 'pin', weight = NULL WHERE id = 'peg'")
        try r[0].database.execute("PRAGMA recursive_triggers = ON")
        try r[0].database.execute("UPDATE stock SET qty = 'many' WHERE id = 'tent'")
        try syncUntilQuiet(r)
        for replica in r {
            XCTAssertEqual(
                try replica.database.valueRows("SELECT id, qty, weight FROM stock ORDER BY id"),
                [[.text("pin"), .integer(5), .real(0)], [.text("tent"), .integer(10), .real(1.5)]])
        }
        XCTAssertEqual(try r[0].conflicts().filter { $0["kind"]?.stringValue == "counter needs a number" }.count, 3)
    }

    func testBaseIsTheSameOnEveryReplicaWhateverEachHasFolded() throws {
        let r = try stock(["a", "b", "c"])
        try r[0].database.execute("INSERT INTO stock VALUES ('rope', 10, 0, 0)")
        try runFaster(r[2])
        try r[2].database.execute("INSERT INTO stock VALUES ('rope', 5, 0, 0)")
        try sync(from: r[0], to: r[1])
        try r[1].database.execute("UPDATE stock SET qty = qty + 1 WHERE id = 'rope'")
        try sync(from: r[1], to: r[0])
        try sync(from: r[2], to: r[1])
        try sync(from: r[1], to: r[2])
        try sync(from: r[2], to: r[1])
        try sync(from: r[0], to: r[1])
        _ = try r[1].purge(dryRun: false)
        try sync(from: r[1], to: r[2])
        _ = try r[2].purge(dryRun: false)
        try sync(from: r[2], to: r[0])
        try syncUntilQuiet(r)
        for replica in r {
            XCTAssertEqual(try replica.database.valueRows("SELECT qty FROM stock WHERE id = 'rope'"), [[.integer(6)]])
        }
    }

    private func runFaster(_ replica: Replica) throws { try setClock(of: replica, to: nowMilliseconds + 60_000) }

    func testSQLiteOrderOfValues() {
        let ascending: [SQLValue] = [.null, .integer(-2), .real(-1.5), .integer(3), .real(3.5), .text("A"), .text("a"), .blob([0])]
        for (i, a) in ascending.enumerated() {
            for (j, b) in ascending.enumerated() {
                XCTAssertEqual(sqliteOrder(a, b).signum(), (i < j ? -1 : (i > j ? 1 : 0)), "\(a) vs \(b)")
            }
        }
        XCTAssertEqual(sqliteOrder(.integer(1), .real(1.0)), 0)
        XCTAssertEqual(ChangeMerger.extremumOrder(.null, over: .integer(1), policy: .min), -1, "NULL never replaces a value")
        XCTAssertEqual(ChangeMerger.extremumOrder(.integer(1), over: .null, policy: .min), 1)
        XCTAssertEqual(CounterArithmetic.add(.integer(.max), .integer(1)), .real(Double(Int64.max) + 1))
    }
}
