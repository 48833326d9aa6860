import Foundation
import SampleData
import XCTest

/// Schema migrations that real apps make (SPEC §2, README "Migrating the schema"), across two
/// or three replicas, with edits before, during and after, and bundles crossing the
/// migration both ways: every replica converges, no edit is lost, and `doctor` passes.
final class MigrationCLITests: XCTestCase {
    private var h: Harness!
    private var a = "", b = ""

    private static let schema = """
        CREATE TABLE t(id TEXT PRIMARY KEY, name TEXT, note TEXT);
        INSERT INTO t VALUES ('1', 'one', 'n1'), ('2', 'two', 'n2');
        """

    override func setUpWithError() throws {
        h = try Harness()
        a = try h.makeReplica("A", schema: Self.schema)
        b = try h.cloneReplica(a, as: "B")
    }

    override func tearDown() { h = nil }

    private func rows(_ db: String, _ table: String = "t") throws -> String { try h.dump(db, table: table, orderBy: "id") }

    private func value(_ db: String, _ sql: String) throws -> String {
        try h.sqlite(db, sql).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    private func doctorPasses(_ db: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let result = try Harness.run(Harness.binary, ["doctor", db])
        XCTAssertEqual(result.status, 0, "doctor \(db): \(result.stderr)", file: file, line: line)
    }

    // MARK: DROP COLUMN

    func testDropColumnWithTheOlderReplicaStillWriting() throws {
        // SQLite refuses to drop a column a trigger names: the recipe takes them off first.
        let refused = try Harness.run("/usr/bin/sqlite3", [a], input: "ALTER TABLE t DROP COLUMN note;")
        XCTAssertNotEqual(refused.status, 0, "the triggers name the column: \(refused.stderr)")
        try h.ok(["refresh", a, "--before-migration"])
        try h.sqlite(a, "ALTER TABLE t DROP COLUMN note; UPDATE t SET name = 'one, during' WHERE id = '1'; PRAGMA user_version = 2;")
        let refreshed = try h.okJSON(["refresh", a])
        XCTAssertEqual(refreshed["dropped_columns"] as? [String], ["t.note"], "\(refreshed)")
        XCTAssertEqual((refreshed["captured"] as? [String: Int])?["updates"], 1, "the edit made during the migration")
        try doctorPasses(a)
        try h.sqlite(a, "UPDATE t SET name = 'two, after' WHERE id = '2';")

        // B has not migrated: its edits of note are ignored by A, its other edits arrive.
        try h.sqlite(b, "UPDATE t SET note = 'b note', name = 'one from b' WHERE id = '1'; INSERT INTO t VALUES ('3', 'three', 'n3');")
        let fromB = try h.ok(["import", a, try h.export(b, as: "B")], key: "A")
        XCTAssertFalse(fromB.stderr.contains("held"), fromB.stderr)
        XCTAssertEqual(try value(a, "SELECT name FROM t WHERE id = '3';"), "three")
        try h.send((a, "A"), to: (b, "B"))
        XCTAssertEqual(try value(b, "SELECT name FROM t WHERE id = '2';"), "two, after")
        XCTAssertEqual(try value(b, "SELECT note FROM t WHERE id = '1';"), "b note", "B keeps working until it migrates")

        try h.ok(["refresh", b, "--before-migration"])
        try h.sqlite(b, "ALTER TABLE t DROP COLUMN note; PRAGMA user_version = 2;")
        try h.ok(["refresh", b])
        try h.send((a, "A"), to: (b, "B"))
        try h.send((b, "B"), to: (a, "A"))
        XCTAssertEqual(try rows(a), try rows(b))
        XCTAssertEqual(try value(a, "SELECT name FROM t WHERE id = '1';"), try value(b, "SELECT name FROM t WHERE id = '1';"))
        try doctorPasses(a)
        try doctorPasses(b)
        let peers = try h.okJSON(["peers", a])["peers"] as? [[String: Any]] ?? []
        XCTAssertEqual(peers.first?["schema_version"] as? Int, 2, "\(peers)")
    }

    // MARK: RENAME COLUMN

    func testRenameColumnKeepsItsClocks() throws {
        try h.sqlite(a, "ALTER TABLE t RENAME COLUMN name TO title;")
        let renamed = try h.okJSON(["refresh", a])
        XCTAssertEqual(renamed["renamed_columns"] as? [String: String], ["t.name": "title"], "\(renamed)")
        try h.sqlite(a, "UPDATE t SET title = 'one, renamed' WHERE id = '1';")
        usleep(20_000)
        // B migrates later: its refresh must not make its older values win.
        try h.sqlite(b, "ALTER TABLE t RENAME COLUMN name TO title;")
        try h.ok(["refresh", b])
        try h.send((b, "B"), to: (a, "A"))
        try h.send((a, "A"), to: (b, "B"))
        XCTAssertEqual(try value(b, "SELECT title FROM t WHERE id = '1';"), "one, renamed")
        XCTAssertEqual(try rows(a), try rows(b))
        try h.sqlite(b, "UPDATE t SET title = 'two from b' WHERE id = '2';")
        try h.send((b, "B"), to: (a, "A"))
        XCTAssertEqual(try value(a, "SELECT title FROM t WHERE id = '2';"), "two from b")
        try doctorPasses(a)
        try doctorPasses(b)
    }

    // MARK: RENAME TABLE

    func testRenameTableWithBundlesInFlight() throws {
        try h.sqlite(b, "UPDATE t SET name = 'one from b before' WHERE id = '1';")
        let beforeB = try h.export(b, as: "B")
        try h.sqlite(a, "ALTER TABLE t RENAME TO items;")
        let result = try h.okJSON(["refresh", a])
        XCTAssertEqual(result["renamed_tables"] as? [String: String], ["t": "items"], "\(result)")
        try h.sqlite(a, "INSERT INTO items VALUES ('3', 'three', NULL);")
        // B's bundle from before the migration names the old table: held, not applied half.
        _ = try h.ok(["import", a, beforeB], key: "A")
        try h.sqlite(b, "ALTER TABLE t RENAME TO items;")
        try h.ok(["refresh", b])
        try h.send((a, "A"), to: (b, "B"))
        try h.send((b, "B"), to: (a, "A"))
        XCTAssertEqual(try rows(a, "items"), try rows(b, "items"))
        XCTAssertEqual(try value(a, "SELECT name FROM items WHERE id = '1';"), "one from b before", "B's edit is not lost")
        XCTAssertEqual(try value(b, "SELECT name FROM items WHERE id = '3';"), "three")
        try doctorPasses(a)
        try doctorPasses(b)
    }

    // MARK: the 12-step rebuild

    /// SQLite's documented way to change what ALTER TABLE cannot: the triggers go with the
    /// old table; `refresh` captures what the rebuild changed and everything after.
    private func rebuild(_ db: String, name: String, newKey: Bool = false) throws {
        try h.ok(["refresh", db, "--before-migration"], key: name)
        let create =
            newKey
            ? "CREATE TABLE new_t(id TEXT NOT NULL, region TEXT NOT NULL DEFAULT 'eu', name TEXT, PRIMARY KEY (id, region));"
            : "CREATE TABLE new_t(id TEXT PRIMARY KEY, name TEXT NOT NULL DEFAULT '', note TEXT);"
        let copy =
            newKey
            ? "INSERT INTO new_t (id, name) SELECT id, name FROM t;"
            : "INSERT INTO new_t SELECT id, upper(name), note FROM t;"
        try h.sqlite(
            db,
            """
            PRAGMA foreign_keys = OFF;
            BEGIN;
            \(create)
            \(copy)
            DROP TABLE t;
            ALTER TABLE new_t RENAME TO t;
            PRAGMA user_version = 3;
            COMMIT;
            """)
        try h.ok(["refresh", db], key: name)
    }

    func testTwelveStepRebuildOnThreeReplicas() throws {
        let c = try h.cloneReplica(a, as: "C")
        try h.sqlite(c, "UPDATE t SET note = 'c edit before' WHERE id = '2';")
        try rebuild(a, name: "A")
        try h.sqlite(a, "INSERT INTO t VALUES ('4', 'four', NULL); UPDATE t SET note = 'a after' WHERE id = '1';")
        XCTAssertEqual(try value(a, "SELECT name FROM t WHERE id = '1';"), "ONE")
        try doctorPasses(a)
        // B and C rebuild later; bundles cross the migration both ways.
        try h.send((a, "A"), to: (b, "B"))
        try h.send((c, "C"), to: (b, "B"))
        try rebuild(b, name: "B")
        try h.sqlite(b, "UPDATE t SET note = 'b after' WHERE id = '4';")
        try h.send((b, "B"), to: (c, "C"))
        try rebuild(c, name: "C")
        for _ in 0..<2 {
            for (from, to) in [((a, "A"), (b, "B")), ((b, "B"), (c, "C")), ((c, "C"), (a, "A")), ((a, "A"), (c, "C"))] {
                try h.send(from, to: to)
            }
        }
        XCTAssertEqual(try rows(a), try rows(b))
        XCTAssertEqual(try rows(b), try rows(c))
        XCTAssertEqual(try value(a, "SELECT note FROM t WHERE id = '2';"), "c edit before")
        XCTAssertEqual(try value(c, "SELECT note FROM t WHERE id = '1';"), "a after")
        XCTAssertEqual(try value(c, "SELECT note FROM t WHERE id = '4';"), "b after")
        for db in [a, b, c] { try doctorPasses(db) }
    }

    func testRebuildWithANewPrimaryKey() throws {
        try rebuild(a, name: "A", newKey: true)
        try h.sqlite(a, "UPDATE t SET name = 'one in eu' WHERE id = '1';")
        try rebuild(b, name: "B", newKey: true)
        try h.sqlite(b, "INSERT INTO t VALUES ('1', 'us', 'one in us');")
        try h.send((a, "A"), to: (b, "B"))
        try h.send((b, "B"), to: (a, "A"))
        try h.send((a, "A"), to: (b, "B"))
        XCTAssertEqual(
            try h.dump(a, table: "t", orderBy: "id, region"), try h.dump(b, table: "t", orderBy: "id, region"))
        XCTAssertEqual(try value(b, "SELECT name FROM t WHERE id = '1' AND region = 'eu';"), "one in eu")
        XCTAssertEqual(try value(a, "SELECT count(*) FROM t;"), "3")
        try doctorPasses(a)
        try doctorPasses(b)
    }

    // MARK: writes made while no trigger ran

    func testDoctorReportsWritesNoTriggerSawAndRefreshCapturesThemOnce() throws {
        try h.ok(["refresh", a, "--before-migration"])
        try h.sqlite(a, "INSERT INTO t VALUES ('5', 'five', NULL); DELETE FROM t WHERE id = '2'; UPDATE t SET note = 'quiet' WHERE id = '1';")
        let doctor = try Harness.run(Harness.binary, ["doctor", a])
        XCTAssertEqual(doctor.status, 1)
        XCTAssertTrue(doctor.stderr.contains("1 insert, 1 delete, 1 update"), doctor.stderr)
        try h.ok(["refresh", a])
        try doctorPasses(a)
        let again = try h.okJSON(["refresh", a])
        XCTAssertEqual(again["captured"] as? [String: Int], ["inserts": 0, "deletes": 0, "updates": 0], "captured once")
        try h.send((a, "A"), to: (b, "B"))
        XCTAssertEqual(try rows(a), try rows(b))
    }

    /// A table restored from a backup behind sqsync's back (no `--before-migration`): the
    /// checksums recorded with each row tell which values changed, even when a sync ran
    /// before `refresh`.
    func testTableRestoredFromABackupIsNoticedAndCaptured() throws {
        try h.send((a, "A"), to: (b, "B"))
        try h.sqlite(a, "CREATE TABLE backup AS SELECT * FROM t;")
        try h.sqlite(a, "UPDATE t SET note = 'edited, then lost to the restore' WHERE id = '1';")
        try h.sqlite(
            a,
            """
            DROP TABLE t;
            CREATE TABLE t(id TEXT PRIMARY KEY, name TEXT, note TEXT);
            INSERT INTO t SELECT * FROM backup;
            UPDATE t SET name = 'two, restored differently' WHERE id = '2';
            DROP TABLE backup;
            """)
        try h.ok(["status", a])  // folds the logged edit while the table has no triggers
        let doctor = try Harness.run(Harness.binary, ["doctor", a])
        XCTAssertEqual(doctor.status, 1)
        // Row 2 differs from its checksum; row 1's lost edit was captured before the restore
        // and now travels with the restored value.
        XCTAssertTrue(doctor.stderr.contains("0 inserts, 0 deletes, 1 update)"), doctor.stderr)
        let refreshed = try h.okJSON(["refresh", a])
        XCTAssertEqual((refreshed["captured"] as? [String: Int])?["updates"], 1, "\(refreshed)")
        try doctorPasses(a)
        try h.send((a, "A"), to: (b, "B"))
        XCTAssertEqual(try rows(a), try rows(b))
        XCTAssertEqual(try value(b, "SELECT note FROM t WHERE id = '1';"), "n1", "the restored value wins")
        XCTAssertEqual(try value(b, "SELECT name FROM t WHERE id = '2';"), "two, restored differently")
    }

    // MARK: the Chinook sample: a parent table rebuilt under its children's foreign keys

    func testChinookAlbumRebuiltUnderForeignKeys() throws {
        let hq = h.path("hq.db")
        try h.sqlite(hq, ChinookSample.sql)
        try h.makeKey("HQ")
        try h.ok(["init", hq, "--name", "HQ"], key: "HQ")
        try h.ok(["track", hq, "--all", "--allow-integer-pk"], key: "HQ")
        let site = try h.cloneReplica(hq, as: "S1")
        let rebuildAlbum = """
            PRAGMA foreign_keys = OFF;
            BEGIN;
            CREATE TABLE "new_Album" ("AlbumId" INTEGER NOT NULL, "Title" NVARCHAR(160) NOT NULL, "ArtistId" INTEGER NOT NULL,
              "Year" INTEGER, CONSTRAINT "PK_Album" PRIMARY KEY ("AlbumId"),
              FOREIGN KEY ("ArtistId") REFERENCES "Artist" ("ArtistId") ON DELETE NO ACTION ON UPDATE NO ACTION);
            INSERT INTO "new_Album" ("AlbumId", "Title", "ArtistId") SELECT "AlbumId", "Title", "ArtistId" FROM "Album";
            DROP TABLE "Album";
            ALTER TABLE "new_Album" RENAME TO "Album";
            UPDATE "Album" SET "Year" = 1980 WHERE "AlbumId" = 1;
            PRAGMA user_version = 7;
            COMMIT;
            PRAGMA foreign_key_check;
            """
        for (db, name) in [(hq, "HQ"), (site, "S1")] {
            try h.ok(["refresh", db, "--before-migration"], key: name)
            XCTAssertEqual(try h.sqlite(db, rebuildAlbum), "", "no orphans after the rebuild")
            try h.ok(["refresh", db], key: name)
        }
        try h.sqlite(hq, #"UPDATE "Album" SET "Year" = 1991 WHERE "AlbumId" = 2; INSERT INTO "Album" VALUES (1000, 'New', 1, 2026);"#)
        try h.sqlite(site, #"INSERT INTO "Track" ("TrackId", "Name", "AlbumId", "MediaTypeId", "Milliseconds", "UnitPrice") VALUES (90000, 'new track', 2, 1, 1000, 0.99);"#)
        try h.send((hq, "HQ"), to: (site, "S1"))
        try h.send((site, "S1"), to: (hq, "HQ"))
        for table in ["Album", "Track"] {
            let key = table == "Album" ? "AlbumId" : "TrackId"
            XCTAssertEqual(try h.dump(hq, table: table, orderBy: key), try h.dump(site, table: table, orderBy: key), table)
        }
        XCTAssertEqual(try value(site, #"SELECT "Year" FROM "Album" WHERE "AlbumId" = 2;"#), "1991")
        XCTAssertEqual(try value(hq, "PRAGMA foreign_key_check;"), "")
        try doctorPasses(hq)
        try doctorPasses(site)
    }

    // MARK: schema versions

    func testBundleFromANewerSchemaIsHeldNamingBothVersions() throws {
        try h.sqlite(a, "ALTER TABLE t ADD COLUMN color TEXT; PRAGMA user_version = 5;")
        try h.ok(["refresh", a])
        try h.sqlite(a, "UPDATE t SET color = 'red' WHERE id = '1';")
        try h.sqlite(b, "PRAGMA user_version = 4;")
        let result = try h.ok(["import", b, try h.export(a, as: "A")], key: "B")
        XCTAssertTrue(result.stderr.contains("schema version 5, this replica on 4"), result.stderr)
        let status = try h.okJSON(["status", b])
        XCTAssertEqual(status["schema_version"] as? Int, 4)
    }
}
