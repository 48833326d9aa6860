import Foundation
import SQLiteDatabase
import XCTest

@testable import ChangeLog

/// The generation stands for every row of the tables it watches (Generation.swift): a quiet
/// sync and a fold with nothing new compare it instead of reading a line per replica. A
/// change it missed would leave a replica believing nothing changed.
final class GenerationTests: XCTestCase {
    private let watched = ["_sqsync_sites", "_sqsync_acks", "_sqsync_later"]

    func testEveryChangeToAWatchedTableRaisesItAndARollbackTakesItBack() throws {
        let sandbox = try Sandbox()
        let replica = try sandbox.replica("a", schema: "CREATE TABLE t (id TEXT PRIMARY KEY, v TEXT)", track: ["t"])
        let database = replica.database
        var last = try replica.generation(watching: watched)
        func raised(_ what: String, file: StaticString = #filePath, line: UInt = #line) throws {
            let now = try replica.generation(watching: watched)
            XCTAssertGreaterThan(now, last, what, file: file, line: line)
            last = now
        }
        XCTAssertEqual(try replica.generation(watching: watched), last, "asking changes nothing")
        try database.execute(#"INSERT INTO "_sqsync_acks" ("peer", "site", "seq") VALUES (7, 1, 3)"#)
        try raised("an insert")
        try database.execute(#"UPDATE "_sqsync_acks" SET "seq" = 4"#)
        try raised("an update")
        try database.execute(#"DELETE FROM "_sqsync_acks""#)
        try raised("a delete")
        try database.execute("INSERT INTO t VALUES ('1', 'one')")
        XCTAssertEqual(try replica.generation(watching: watched), last, "the app's tables are not watched")

        struct Undo: Error {}
        XCTAssertThrowsError(
            try database.inTransaction {
                try database.execute(#"UPDATE "_sqsync_sites" SET "name" = 'renamed'"#)
                throw Undo()
            })
        XCTAssertEqual(try replica.generation(watching: watched), last, "a rollback takes the raise back with the change")
    }

    /// Triggers dropped by hand (or by a migration that rebuilds a table) are put back on the
    /// next reading, which raises the number: what changed while they were gone is not taken
    /// as unchanged. A watched table created later gets them too.
    func testTriggersComeBackAndATableCreatedLaterIsWatched() throws {
        let sandbox = try Sandbox()
        let replica = try sandbox.replica("a", schema: "CREATE TABLE t (id TEXT PRIMARY KEY, v TEXT)", track: ["t"])
        let database = replica.database
        let before = try replica.generation(watching: watched)
        try database.execute(#"DROP TRIGGER "_sqsync_generation__sqsync_sites_update""#)
        try database.execute(#"UPDATE "_sqsync_sites" SET "name" = 'unseen'"#)
        let after = try replica.generation(watching: watched)
        XCTAssertGreaterThan(after, before)
        try database.execute(#"UPDATE "_sqsync_sites" SET "name" = 'seen'"#)
        XCTAssertGreaterThan(try replica.generation(watching: watched), after, "the trigger is back")

        try database.execute(#"CREATE TABLE "_sqsync_later" ("x")"#)
        let created = try replica.generation(watching: watched)
        try database.execute(#"INSERT INTO "_sqsync_later" VALUES (1)"#)
        let inserted = try replica.generation(watching: watched)
        XCTAssertGreaterThan(inserted, created)

        // A table renamed aside takes its triggers, names and all; the new one gets its own.
        try database.execute(#"ALTER TABLE "_sqsync_later" RENAME TO "_sqsync_later_old"; CREATE TABLE "_sqsync_later" ("x")"#)
        let rebuilt = try replica.generation(watching: watched)
        XCTAssertGreaterThan(rebuilt, inserted)
        try database.execute(#"INSERT INTO "_sqsync_later" VALUES (2)"#)
        XCTAssertGreaterThan(try replica.generation(watching: watched), rebuilt, "the new table's trigger")
    }

    /// A merge runs with this connection's triggers off, the generation's among them: it is
    /// raised all the same, whether one merge turned them off or a run of merges did.
    func testAMergeRaisesItWithTriggersOff() throws {
        let sandbox = try Sandbox()
        let a = try sandbox.replica("a", schema: "CREATE TABLE t (id TEXT PRIMARY KEY, v TEXT)", track: ["t"])
        let b = try sandbox.clone(a, "b")
        try a.database.execute("INSERT INTO t VALUES ('1', 'one')")
        var before = try b.generation(watching: watched)
        _ = try sync(from: a, to: b)
        XCTAssertGreaterThan(try b.generation(watching: watched), before, "one merge")
        XCTAssertTrue(b.database.triggersEnabled)

        try a.database.execute("INSERT INTO t VALUES ('2', 'two')")
        before = try b.generation(watching: watched)
        let raisedInside = try b.mergingWithTriggersOff {
            XCTAssertFalse(b.database.triggersEnabled)
            // A merge in the run knows the triggers are off, and takes the paths that need it
            // (bulk inserts, checksums from the values given): without them an import of
            // 100,000 inserts ran at half the rate.
            let set = try changeSet(from: a, since: try b.knowledge())
            let merger = try b.database.inTransaction(commit: false) { try ChangeMerger(replica: b, header: set.header) }
            XCTAssertTrue(merger.triggersOff)
            _ = try sync(from: a, to: b)
            XCTAssertFalse(b.database.triggersEnabled, "a merge inside leaves them off")
            return try b.database.int64(#"SELECT "n" FROM "_sqsync_generation""#)
        }
        XCTAssertTrue(b.database.triggersEnabled)
        XCTAssertGreaterThan(try b.generation(watching: watched), max(before, raisedInside), "a run of merges")
        XCTAssertEqual(try b.database.optionalString("SELECT v FROM t WHERE id = '2'"), "two")
        try b.database.execute("INSERT INTO t VALUES ('3', 'three')")
        try b.fold()
        XCTAssertEqual(try b.database.int64(#"SELECT count(*) FROM "_sqsync_rows""#), 3, "capture runs again after")
    }

    /// A fold with nothing new skips the pass over every acknowledgement; one after an
    /// acknowledgement moved makes it (FoldTests checks what the pass forgets).
    func testAFoldWithNothingNewLeavesTheHorizonAlone() throws {
        let sandbox = try Sandbox()
        let replica = try sandbox.replica("a", schema: "CREATE TABLE t (id TEXT PRIMARY KEY, v TEXT)", track: ["t"])
        let database = replica.database
        try database.execute("INSERT INTO t VALUES ('1', 'one')")
        try replica.fold()
        let horizonAt = #"SELECT "horizon_at" FROM "_sqsync_generation""#
        let passed = try database.int64(horizonAt)
        XCTAssertEqual(passed, try replica.generation(watching: Replica.horizonInputs), "the pass ran at the number it left")
        try replica.fold()
        XCTAssertEqual(try database.int64(horizonAt), passed, "nothing new: no pass")
        try database.execute(#"INSERT INTO "_sqsync_acks" ("peer", "site", "seq") VALUES (7, 1, 3)"#)
        try replica.fold()
        XCTAssertGreaterThan(try database.int64(horizonAt), passed, "an acknowledgement moved: a pass")
    }
}
