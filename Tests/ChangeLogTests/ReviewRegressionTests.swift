import SQLiteDatabase
import TestSupport
import XCTest

@testable import ChangeLog

/// Cases found in review: each failed before its fix.
final class ReviewRegressionTests: XCTestCase {
    private var sandbox: Sandbox!

    override func setUpWithError() throws { sandbox = try Sandbox() }
    override func tearDown() { sandbox = nil }

    /// A full change set from a peer carries deletions this replica has already purged: they
    /// are simply done, not a sign of a stale or copied sender.
    func testPurgedDeletionArrivingAgainIsAccepted() throws {
        let a = try sandbox.replica("a", schema: "CREATE TABLE t (id TEXT PRIMARY KEY, v TEXT);", track: ["t"])
        let b = try sandbox.clone(a, "b")
        try a.database.execute("INSERT INTO t VALUES ('k', 'x'), ('keep', 'y')")
        try syncBoth(a, b)
        try a.database.execute("DELETE FROM t WHERE id = 'k'")
        try syncBoth(a, b)
        try syncBoth(b, a)
        XCTAssertEqual(try a.purge(dryRun: false).tombstones, 1)
        let everything = try changeSet(from: b, since: Knowledge())
        XCTAssertNoThrow(try apply(everything, to: a))
        XCTAssertEqual(try rows(of: a, table: "t"), [[.text("keep"), .text("y")]])
    }

    /// A purged deletion keeps its entry through a clone (the copy's column-clock rewrite
    /// leaves the mark alone), and a key inserted again after a purge starts a life above the
    /// deleted one, so the old deletion arriving again changes nothing.
    func testAPurgedDeletionStaysPurgedInACloneAndAReinsertOutlivesIt() throws {
        let a = try sandbox.replica("a", schema: "CREATE TABLE t (id TEXT PRIMARY KEY, v TEXT);", track: ["t"])
        let b = try sandbox.clone(a, "b")
        try a.database.execute("INSERT INTO t VALUES ('k', 'x')")
        try syncBoth(a, b)
        try b.database.execute("DELETE FROM t WHERE id = 'k'")
        let deletion = try changeSet(from: b, since: Knowledge())
        try syncBoth(b, a)
        try syncBoth(a, b)
        XCTAssertEqual(try a.purge(dryRun: false).tombstones, 1)
        let copy = try sandbox.clone(a, "copy")
        XCTAssertEqual(try copy.status().tombstones, 0, "the copy waits for no one either")
        XCTAssertEqual(try copy.database.int64(#"SELECT count(*) FROM "_sqsync_rows" WHERE "cl" = 2 AND "cells" = x''"#), 1)
        try a.database.execute("INSERT INTO t VALUES ('k', 'again')")
        try apply(deletion, to: a)
        XCTAssertEqual(try rows(of: a, table: "t"), [[.text("k"), .text("again")]], "the old deletion changes nothing")
    }

    /// A UNIQUE index with NOCASE clashes on values differing only in case; the clash must
    /// be found and settled, not stop the import.
    func testCaseInsensitiveUniqueClashIsSettled() throws {
        let schema = """
            CREATE TABLE users (id TEXT PRIMARY KEY, email TEXT);
            CREATE UNIQUE INDEX users_email ON users (email COLLATE NOCASE);
            """
        let a = try sandbox.replica("a", schema: schema, track: ["users"])
        let b = try sandbox.clone(a, "b")
        try a.database.execute("INSERT INTO users VALUES ('u-a', 'Ann@Example.org')")
        try setClock(of: b, to: (try clock(of: a)).hlc + 10_000)
        try b.database.execute("INSERT INTO users VALUES ('u-b', 'ann@example.org')")
        try syncUntilQuiet([a, b])
        for replica in [a, b] {
            XCTAssertEqual(try rows(of: replica, table: "users"), [[.text("u-a"), .text("Ann@Example.org")]])
        }
    }

    /// The source of a clone knows it from the start, so a purge waits for it.
    func testCloneIsRegisteredWithItsSource() throws {
        let a = try sandbox.replica("a", schema: "CREATE TABLE t (id TEXT PRIMARY KEY, v TEXT);", track: ["t"])
        try a.database.execute("INSERT INTO t VALUES ('k', 'x')")
        let b = try sandbox.clone(a, "b")
        try a.database.execute("DELETE FROM t WHERE id = 'k'")
        let purge = try a.purge(dryRun: false)
        XCTAssertEqual(purge.tombstones, 0)
        XCTAssertEqual(purge.heldBackBy.map(\.knowledgeID), [b.knowledgeID])
    }

    /// Opening a plain SQLite file that is not a replica changes nothing about it.
    func testOpeningANonReplicaLeavesItsJournalModeAlone() throws {
        let path = sandbox.path("plain.db")
        try sqlite3Shell(path, "CREATE TABLE t (id TEXT PRIMARY KEY);")
        XCTAssertThrowsError(try Replica(path: path))
        XCTAssertFalse(FileManager.default.fileExists(atPath: path + "-wal"))
        let mode = try Database(path: path, create: false).scalar("PRAGMA journal_mode")?.stringValue
        XCTAssertEqual(mode, "delete")
    }

    /// sqsync's own column names (`hlc`, `site`) in a user table must not be confused with
    /// the replica's clock when existing rows are captured or a migrated column is backfilled.
    func testUserColumnsNamedLikeSqsyncsOwn() throws {
        let a = try sandbox.replica(
            "a",
            schema: """
                CREATE TABLE t (id TEXT PRIMARY KEY, hlc INTEGER, site TEXT);
                INSERT INTO t VALUES ('old', 7, 'north');
                """, track: ["t"])
        let b = try sandbox.clone(a, "b")
        try a.database.execute("INSERT INTO t VALUES ('new', 8, 'south')")
        for replica in [a, b] { try replica.database.execute("ALTER TABLE t ADD COLUMN seq INTEGER") }
        try a.database.execute("UPDATE t SET seq = 1 WHERE id = 'old'")
        for replica in [a, b] { try replica.refresh() }
        try syncUntilQuiet([a, b])
        XCTAssertEqual(
            try rows(of: b, table: "t"),
            [[.text("new"), .integer(8), .text("south"), .null], [.text("old"), .integer(7), .text("north"), .integer(1)]])
    }
}

/// Version 12 keeps tombstones in key order (`_sqsync_tombstones`): status and purge give the
/// answers they gave on the (site, seq) index of version 11.
final class TombstoneIndexTests: XCTestCase {
    private var sandbox: Sandbox!

    override func setUpWithError() throws { sandbox = try Sandbox() }
    override func tearDown() { sandbox = nil }

    private static let indexSQL = #"SELECT sql FROM sqlite_schema WHERE name = '_sqsync_tombstones'"#

    func testOlderReplicaGetsTheKeyOrderedIndexAndPurgesAlike() throws {
        let a = try sandbox.replica("a", schema: "CREATE TABLE t (id TEXT PRIMARY KEY, v TEXT);", track: ["t"])
        let b = try sandbox.clone(a, "b")
        let c = try sandbox.clone(a, "c")
        try a.database.execute("INSERT INTO t VALUES ('k1', 'x'), ('k2', 'x'), ('k3', 'x'), ('k4', 'x'), ('k5', 'x')")
        try syncUntilQuiet([a, b, c])
        try a.database.execute("DELETE FROM t WHERE id IN ('k4', 'k1')")
        try b.database.execute("DELETE FROM t WHERE id = 'k3'")
        try syncBoth(a, b)
        try syncBoth(b, a)

        // Version 11's index, as an older sqsync left it.
        try a.database.execute(
            """
            DROP INDEX "_sqsync_tombstones";
            CREATE INDEX "_sqsync_tombstones" ON "_sqsync_rows" ("site", "seq") WHERE "cl" % 2 = 0;
            DELETE FROM "_sqsync_migrations" WHERE "version" = 12;
            """)
        let older = try a.status()
        let upgraded = try Replica(path: a.path)
        XCTAssertEqual(
            try upgraded.database.scalar(Self.indexSQL)?.stringValue,
            #"CREATE INDEX "_sqsync_tombstones" ON "_sqsync_rows" ("tid", "pk", "site", "seq") WHERE "cl" % 2 = 0"#)
        let status = try upgraded.status()
        XCTAssertEqual(status.tombstones, 3)
        XCTAssertEqual(status.tombstones, older.tombstones)
        XCTAssertEqual(status.peers.map(\.tombstonesHeldBack), older.peers.map(\.tombstonesHeldBack))
        XCTAssertEqual(status.peers.map(\.tombstonesHeldBack).sorted(), [0, 3], "c has seen none, b all")

        // c holds them back; once it acknowledged them, they are purged: each keeps its entry (the
        // row's causal length and its delete's stamp) and nothing is forgotten (docs/MERGE_RULES.md).
        let held = try upgraded.purge(dryRun: false)
        XCTAssertEqual(held.tombstones, 0)
        XCTAssertEqual(held.heldBackBy.map(\.knowledgeID), [c.knowledgeID])
        let latestDeletion = """
            SELECT s."knowledge_id", max(r."seq") FROM "_sqsync_rows" r JOIN "_sqsync_sites" s ON s."site" = r."site"
            WHERE r."cl" % 2 = 0 GROUP BY 1 ORDER BY 1
            """
        let expected = try upgraded.database.valueRows(latestDeletion)
        XCTAssertEqual(expected.count, 2, "a's deletions and b's")
        try syncUntilQuiet([upgraded, b, c])
        XCTAssertEqual(try upgraded.purge(dryRun: false).tombstones, 3)
        XCTAssertEqual(try upgraded.status().tombstones, 0)
        let forgotten = try upgraded.database.valueRows(
            #"SELECT "knowledge_id", "forgotten_seq" FROM "_sqsync_sites" WHERE "forgotten_seq" > 0 ORDER BY 1"#)
        XCTAssertEqual(forgotten, [])
        XCTAssertEqual(try upgraded.database.valueRows(latestDeletion), expected, "every purged deletion keeps its stamp")
    }
}
