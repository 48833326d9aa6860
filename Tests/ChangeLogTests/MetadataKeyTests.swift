import Foundation
import SQLiteDatabase
import TestSupport
import XCTest

@testable import ChangeLog

/// Keys in sqsync's metadata (MetadataKey): UUIDs in 16 bytes, BLOBs behind a 0x00 byte,
/// everything else as stored; the fold, import, export, refresh and metadata migration 11
/// all agree on the form.
final class MetadataKeyTests: XCTestCase {
    private var sandbox: Sandbox!

    override func setUpWithError() throws { sandbox = try Sandbox() }
    override func tearDown() { sandbox = nil }

    private let schema = """
        CREATE TABLE uuids (id TEXT PRIMARY KEY, v);
        CREATE TABLE blobs (id BLOB PRIMARY KEY, v);
        CREATE TABLE pairs (a TEXT, b INTEGER, v, PRIMARY KEY (a, b)) WITHOUT ROWID;
        """
    private let lower = "0190f5e2-7b3c-7def-8a12-3456789abcde"
    private let upper = "0190F5E2-7B3C-7DEF-8A12-3456789ABCDE"
    /// A BLOB key whose bytes are what a compact UUID looks like.
    private let lookalike = "x'01" + String(repeating: "ab", count: 16) + "'"

    func testKeysRoundTripAndTheSQLFunctionsAgree() throws {
        let database = try sandbox.replica("f").database
        let keys: [SQLValue] = [
            .text(lower), .text(upper), .text("0190f5e2-7b3c-7def-8A12-3456789abcde"), .text("0190f5e2-7b3c-7def-8a12-3456789abcdg"),
            .text("0190f5e2+7b3c-7def-8a12-3456789abcde"), .text("00000000-0000-0000-0000-000000000000"), .text("short"),
            .blob([]), .blob([1] + [UInt8](repeating: 0xab, count: 16)), .blob([0, 7]), .integer(42), .integer(-1), .real(2.5),
            .text("'a',1"), .text("0190f5e2-7b3c-7def-8a12-3456789abc-e"), .text("0190f5e2-7b3c07def-8a12-3456789abcde"),
            .text("0190f5e2-7b3c-7def-8a12-3456789abcdé"),
        ]
        for key in keys {
            let compact = MetadataKey.of(key)
            XCTAssertEqual(MetadataKey.stored(compact), key, "\(key)")
            XCTAssertEqual(try database.scalar("SELECT sqsync_key(?)", key), compact, "\(key)")
            XCTAssertEqual(try database.scalar("SELECT sqsync_stored_key(sqsync_key(?))", key), key, "\(key)")
        }
        XCTAssertEqual(MetadataKey.of(.text(lower)), .blob([1, 0x01, 0x90, 0xf5, 0xe2, 0x7b, 0x3c, 0x7d, 0xef, 0x8a, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde]))
        XCTAssertEqual(MetadataKey.of(.text(upper)).blobBytes?.first, 2)
        XCTAssertEqual(MetadataKey.of(.text("0190f5e2-7b3c-7def-8A12-3456789abcde")), .text("0190f5e2-7b3c-7def-8A12-3456789abcde"), "mixed case stays text")
        let distinct = Set(keys.map { MetadataKey.of($0) })
        XCTAssertEqual(distinct.count, keys.count, "no two keys share a form")
        XCTAssertNil(MetadataKey.stored(.blob([9, 1])), "a BLOB in no known form")
        XCTAssertThrowsError(try database.scalar("SELECT sqsync_stored_key(x'0901')")) { error in
            XCTAssertTrue("\(error)".contains("no form this sqsync reads"), "\(error)")
        }
    }

    /// UUID keys (either case), BLOB keys (one that looks like a compact UUID, one empty) and
    /// composite keys go through capture, export, import, and `refresh` of writes no trigger
    /// saw, and every replica ends with the same rows.
    func testUUIDAndBlobKeysSyncAndRefreshFindsWritesNoTriggerSaw() throws {
        let replica = try sandbox.replica("a", schema: schema, track: ["uuids", "blobs", "pairs"])
        let peer = try sandbox.clone(replica, "b")
        try sqlite3Shell(
            replica.path,
            """
            INSERT INTO uuids VALUES ('\(lower)', 1), ('\(upper)', 2), ('not-a-uuid', 3);
            INSERT INTO blobs VALUES (\(lookalike), 'lookalike'), (x'', 'empty'), (x'00', 'zero');
            INSERT INTO pairs VALUES ('\(lower)', 1, 'p');
            UPDATE uuids SET v = 10 WHERE id = '\(lower)';
            """)
        try replica.fold()
        let entryKeys = try replica.database.valueRows(
            #"SELECT "pk" FROM "_sqsync_rows" WHERE "tid" = (SELECT "tid" FROM "_sqsync_tables" WHERE "name" = 'uuids') ORDER BY 1"#
        ).map { $0[0] }
        XCTAssertEqual(entryKeys.count, 3)
        XCTAssertEqual(entryKeys.filter { $0.blobBytes?.count == 17 }.count, 2, "both UUIDs take 17 bytes")
        XCTAssertEqual(try replica.database.scalar(#"SELECT count(*) FROM "_sqsync_changes" WHERE length("pk") = 17"#), .integer(3))

        _ = try apply(try changeSet(from: replica, for: peer), to: peer)
        for table in ["uuids", "blobs", "pairs"] {
            XCTAssertEqual(try rows(of: peer, table: table), try rows(of: replica, table: table), table)
        }
        XCTAssertEqual(try metadata(of: peer).count, try metadata(of: replica).count)

        try sqlite3Shell(
            peer.path,
            """
            UPDATE uuids SET v = 20 WHERE id = '\(upper)';
            DELETE FROM blobs WHERE id = \(lookalike);
            UPDATE blobs SET v = 'nothing' WHERE id = x'';
            """)
        try syncBoth(replica, peer)
        XCTAssertEqual(try rows(of: replica, table: "blobs"), [[.blob([]), .text("nothing")], [.blob([0]), .text("zero")]])

        // Writes with the triggers gone: refresh finds each by its key and captures it once.
        for table in ["uuids", "blobs"] {
            for trigger in ["insert", "delete", "update"] {
                try replica.database.execute("DROP TRIGGER \"_sqsync_\(table)_after_\(trigger)\"")
            }
        }
        try replica.database.execute(
            """
            INSERT INTO uuids VALUES ('11111111-2222-4333-8444-555555555555', 5);
            DELETE FROM uuids WHERE id = '\(upper)';
            UPDATE uuids SET v = 11 WHERE id = '\(lower)';
            UPDATE blobs SET v = 'quiet' WHERE id = x'00';
            """)
        let refreshed = try replica.refresh()
        XCTAssertEqual(
            [refreshed.capturedInserts, refreshed.capturedDeletes, refreshed.capturedUpdates], [1, 1, 2], "\(refreshed)")
        XCTAssertEqual(try replica.doctor(), [])
        XCTAssertEqual(try replica.refresh().capturedUpdates, 0, "captured once")
        try syncBoth(replica, peer)
        for table in ["uuids", "blobs", "pairs"] {
            XCTAssertEqual(try rows(of: peer, table: table), try rows(of: replica, table: table), table)
        }
        XCTAssertEqual(
            try rows(of: peer, table: "uuids").map { $0[0] },
            [.text(lower), .text("11111111-2222-4333-8444-555555555555"), .text("not-a-uuid")])
        XCTAssertEqual(try peer.doctor(), [])
    }

    /// A replica from before version 11 holds stored keys in its metadata: the upgrade gives
    /// them their compact form, BLOB keys that look like compact ones included, and the
    /// replica goes on syncing.
    func testVersion11CompactsTheKeysOfAnOlderReplica() throws {
        let replica = try sandbox.replica("v10", schema: schema, track: ["uuids", "blobs", "pairs"])
        let peer = try sandbox.clone(replica, "peer")
        try sqlite3Shell(
            replica.path,
            """
            INSERT INTO uuids VALUES ('\(lower)', 1), ('\(upper)', 2), ('plain', 3);
            INSERT INTO blobs VALUES (\(lookalike), 'lookalike'), (x'00', 'zero');
            INSERT INTO pairs VALUES ('p', 1, 'one');
            DELETE FROM uuids WHERE id = 'plain';
            """)
        try replica.prepareMigration()
        let expected = try metadata(of: replica)
        let expectedChanges = try replica.database.valueRows(#"SELECT * FROM "_sqsync_changes" ORDER BY 1, 2"#)
        let expectedSnapshot = try replica.database.valueRows(#"SELECT * FROM "_sqsync_snapshot" ORDER BY 1, 2, 3"#)
        XCTAssertFalse(expectedChanges.isEmpty)
        XCTAssertFalse(expectedSnapshot.isEmpty)

        // Version 10's metadata: stored keys, the lookalike BLOB's among them.
        for table in ["_sqsync_rows", "_sqsync_changes", "_sqsync_snapshot"] {
            try replica.database.execute(#"UPDATE "\#(table)" SET "pk" = sqsync_stored_key("pk")"#)
        }
        XCTAssertEqual(
            try replica.database.scalar(#"SELECT count(*) FROM "_sqsync_rows" WHERE "pk" = \#(lookalike)"#), .integer(1))
        XCTAssertEqual(
            try replica.database.scalar(#"SELECT count(*) FROM "_sqsync_rows" WHERE "pk" = ?"#, .text(lower)), .integer(1))
        try replica.database.execute(#"DELETE FROM "_sqsync_migrations" WHERE "version" = 11"#)

        let upgraded = try Replica(path: replica.path)
        XCTAssertEqual(try metadata(of: upgraded), expected)
        XCTAssertEqual(try upgraded.database.valueRows(#"SELECT * FROM "_sqsync_changes" ORDER BY 1, 2"#), expectedChanges)
        XCTAssertEqual(try upgraded.database.valueRows(#"SELECT * FROM "_sqsync_snapshot" ORDER BY 1, 2, 3"#), expectedSnapshot)
        try upgraded.database.execute("UPDATE uuids SET v = 7 WHERE id = '\(upper)'")
        let refreshed = try upgraded.refresh()
        XCTAssertEqual(refreshed.capturedUpdates, 1, "the snapshot still matches its rows: \(refreshed)")
        XCTAssertEqual(try upgraded.doctor(), [])
        try syncBoth(upgraded, peer)
        for table in ["uuids", "blobs", "pairs"] {
            XCTAssertEqual(try rows(of: peer, table: table), try rows(of: upgraded, table: table), table)
        }
    }
}

extension SQLValue {
    fileprivate var blobBytes: [UInt8]? {
        if case .blob(let bytes) = self { return bytes }
        return nil
    }
}
