import ChangeLog
import Foundation
import SQLiteDatabase
import TestSupport
import XCTest

@testable import Bundle

/// Bundle's tables are Bundle's own (``ModuleMigrations``): a replica made now gets them from
/// Bundle's migrations, and one whose older sqsync made them through ChangeLog's migrations
/// keeps them, brought to today's shape with their rows.
final class ModuleMigrationTests: XCTestCase {
    private var folder: String!

    override func setUpWithError() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("sqsync-modules-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    }

    override func tearDown() { try? FileManager.default.removeItem(atPath: folder) }

    private func columns(_ table: String, in database: Database) throws -> [String] {
        try database.valueRows("SELECT name FROM pragma_table_info('\(table)') ORDER BY cid").compactMap { $0[0].stringValue }
    }

    func testANewReplicaGetsBundlesTablesOnlyFromBundle() throws {
        let replica = try Replica.initialize(path: folder + "/new.db", name: "new").replica
        XCTAssertEqual(try replica.database.int64("SELECT count(*) FROM sqlite_schema WHERE name = '_sqsync_segments'"), 0)
        try BundleTables.ready(replica)
        XCTAssertEqual(
            try columns("_sqsync_segments", in: replica.database),
            ["id", "site", "first", "last", "created_hlc", "records", "scope", "bytes", "words"])
        XCTAssertEqual(try replica.database.int64("SELECT count(*) FROM sqlite_schema WHERE name = '_sqsync_key_moves'"), 0)
        XCTAssertEqual(
            try replica.database.valueRows(#"SELECT "version" FROM "_sqsync_migrations" WHERE "version" > 1000 ORDER BY 1"#)
                .compactMap { $0[0].int64Value },
            [1001, 1002, 1003, 1004, 1005, 1006, 1007])
        // Key moves are read through their own index, not a row per replica, for every segment admitted.
        let plan = try replica.database.valueRows("EXPLAIN QUERY PLAN " + KeyPinSQL.moves).compactMap { $0[3].stringValue }
        XCTAssertTrue(plan.contains { $0.contains("_sqsync_keys_moves") }, "\(plan)")
    }

    /// A replica an sqsync of metadata version 12 left: moves in `_sqsync_key_moves`, a pinned
    /// key in `_sqsync_sites`, segments without a scope, no `_sqsync_keys` yet.
    func testAnOlderReplicasTablesAreTakenOverWithTheirRows() throws {
        let path = folder + "/old.db"
        let made = try Replica.initialize(path: path, name: "old").replica
        let site = try made.siteNumber(for: "7e570000-0000-4000-8000-000000000001", name: "peer")
        try made.database.execute(
            """
            CREATE TABLE "_sqsync_held" ("digest" TEXT PRIMARY KEY, "path" TEXT NOT NULL, "sender" TEXT NOT NULL,
                "reason" TEXT NOT NULL, "held_at" TEXT NOT NULL DEFAULT 'then');
            INSERT INTO "_sqsync_held" ("digest", "path", "sender", "reason") VALUES ('d', '/held.sqsb', 's', 'waiting');
            CREATE TABLE "_sqsync_statements" ("replica" TEXT PRIMARY KEY, "counter" INTEGER NOT NULL, "statement" BLOB NOT NULL);
            INSERT INTO "_sqsync_statements" VALUES ('r', 1, x'00');
            CREATE TABLE "_sqsync_key_moves" ("from_key" TEXT PRIMARY KEY, "replica" TEXT NOT NULL, "to_key" TEXT NOT NULL,
                "statement" BLOB NOT NULL);
            INSERT INTO "_sqsync_key_moves" VALUES ('ssh-ed25519 OLD', '7e570000-0000-4000-8000-000000000001', 'ssh-ed25519 NEW', x'00');
            UPDATE "_sqsync_sites" SET "signing_key" = 'ssh-ed25519 NEW' WHERE "site" = \(site);
            CREATE TABLE "_sqsync_segments" ("id" INTEGER PRIMARY KEY, "site" INTEGER NOT NULL, "first" INTEGER NOT NULL,
                "last" INTEGER NOT NULL, "created_hlc" INTEGER NOT NULL, "records" INTEGER NOT NULL, "bytes" BLOB NOT NULL,
                UNIQUE ("site", "first", "last"));
            INSERT INTO "_sqsync_segments" VALUES (1, \(site), 0, 4, 99, 2, x'0102');
            """)
        let replica = try Replica(path: path)
        try BundleTables.ready(replica)
        let database = replica.database
        XCTAssertEqual(try database.valueRows(#"SELECT "reason" FROM "_sqsync_held""#), [[.text("waiting")]], "held bundles stay")
        XCTAssertEqual(try database.int64(#"SELECT count(*) FROM "_sqsync_statements""#), 0, "format 2's statements go, as at version 13")
        XCTAssertEqual(
            try database.valueRows(#"SELECT "key", "until_seq" FROM "_sqsync_keys" ORDER BY "key""#),
            [[.text("ssh-ed25519 NEW"), .null], [.text("ssh-ed25519 OLD"), .integer(0)]],
            "the pinned key, and the key moved away from, which signs nothing")
        XCTAssertEqual(try database.int64("SELECT count(*) FROM sqlite_schema WHERE name = '_sqsync_key_moves'"), 0)
        XCTAssertEqual(
            try database.valueRows(#"SELECT "id", "first", "last", "scope", "bytes" FROM "_sqsync_segments""#),
            [[.integer(1), .integer(0), .integer(4), .text("*"), .blob([1, 2])]], "a kept segment stays, for every row")
        // Taken over once: opening again changes nothing.
        let again = try Replica(path: path)
        let before = try again.database.everyTable()
        try BundleTables.ready(again)
        XCTAssertEqual(try again.database.everyTable(), before)
    }
}
