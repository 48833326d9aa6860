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
