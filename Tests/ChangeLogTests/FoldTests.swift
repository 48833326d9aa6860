import Foundation
import SQLiteDatabase
import TestSupport
import XCTest

@testable import ChangeLog

/// The capture log is an implementation detail: whether or not writes still wait in it,
/// every reader (status, export, conflicts, purge) gives the same answers, and a process
/// that dies between a write and the fold loses nothing.
final class FoldTests: XCTestCase {
    private var sandbox: Sandbox!

    override func setUpWithError() throws { sandbox = try Sandbox() }
    override func tearDown() { sandbox = nil }

    private let schema = """
        CREATE TABLE items (id TEXT PRIMARY KEY, name TEXT, qty INTEGER, note);
        CREATE TABLE pairs (a TEXT, b INTEGER, v, PRIMARY KEY (a, b)) WITHOUT ROWID;
        """

    private func pendingLogRows(_ replica: Replica) throws -> Int64 {
        try replica.database.scalar(#"SELECT count(*) FROM "_sqsync_log""#)?.int64Value ?? -1
    }

    /// A mix of writes made by the sqlite3 shell, so they wait in the log.
    private func writeMix(_ replica: Replica, round: Int) throws {
        try sqlite3Shell(
            replica.path,
            """
            INSERT INTO items VALUES ('a\(round)', 'apple', \(round), NULL), ('b\(round)', 'banana', 2, x'00');
            UPDATE items SET qty = qty + 10 WHERE id = 'a\(round)';
            UPDATE items SET name = 'cherry', note = 'n' WHERE id = 'b\(round)';
            INSERT INTO pairs VALUES ('k', \(round), 'v'), ('k', \(round + 100), 'w');
            DELETE FROM pairs WHERE b = \(round + 100);
            UPDATE pairs SET b = \(round + 200) WHERE b = \(round);
            DELETE FROM items WHERE id = 'b\(round)';
            """)
    }

    private func statusFigures(_ replica: Replica) throws -> [String] {
        let status = try replica.status()
        return [
            "\(status.localChanges)", "\(status.tombstones)", "\(status.knowledge)", "\(status.conflicts)",
        ] + status.peers.map { "\($0.peer.name) \($0.unacknowledged) \($0.tombstonesHeldBack)" }
            + status.trackedTables.map { "\($0.name) \($0.rows)" }
    }

    /// `_sqsync_changes` keeps a change until every live peer acknowledged it: a peer that has
    /// not keeps it, retiring that peer lets it go, and with no live peer nothing is kept but
    /// the window of the newest own changes that `export --since` reads (``Replica/sinceWindow``).
    func testChangeNotesLeaveOnceEveryLivePeerAcknowledged() throws {
        let a = try sandbox.replica("a", schema: schema, track: ["items"])
        let (b, c) = (try sandbox.clone(a, "b"), try sandbox.clone(a, "c"))
        let window = Replica.sinceWindow
        func notes() throws -> Int64 {
            try a.fold()
            return try XCTUnwrap(
                a.database.scalar(#"SELECT count(*) FROM "_sqsync_changes" WHERE "site" = ?"#, .integer(Int64(a.site)))?.int64Value)
        }
        // More than a window's worth of changes: kept whole while c lacks them all.
        try a.database.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < \(window + 5)) INSERT INTO items SELECT 'w' || i, 'w', i, NULL FROM n"
        )
        try sync(from: a, to: b)
        try sync(from: b, to: a)
        XCTAssertEqual(try notes(), window + 5, "c has not acknowledged them")
        try sync(from: a, to: c)
        try sync(from: c, to: a)
        XCTAssertEqual(try notes(), window, "every peer holds them: the window of the newest stays")

        try a.database.execute("UPDATE items SET qty = 10 WHERE id = 'w1'")
        XCTAssertEqual(try notes(), window, "the window slides")
        _ = try a.retire(peer: c.knowledgeID)
        // What c lacks is still exported.
        try sync(from: a, to: c)
        XCTAssertEqual(try c.database.scalar("SELECT qty FROM items WHERE id = 'w1'")?.int64Value, 10)
        try a.database.execute("DELETE FROM items WHERE id = 'w2'")
        _ = try a.retire(peer: b.knowledgeID)
        XCTAssertEqual(try notes(), window, "no live peer: the window only")
    }

    /// With no peer at all, `export --since` a knowledge within the window reads the rows
    /// through the change notes, and sends exactly what that knowledge lacks.
    func testExportSinceWithNoPeerReadsTheWindow() throws {
        let a = try sandbox.replica("lonely", schema: schema, track: ["items"])
        try a.database.execute("INSERT INTO items VALUES ('x', 'one', 1, NULL), ('y', 'two', 2, NULL)")
        try a.fold()
        let before = try a.knowledge()
        try a.database.execute("UPDATE items SET qty = 5 WHERE id = 'y'; INSERT INTO items VALUES ('z', 'three', 3, NULL)")
        try a.fold()
        XCTAssertEqual(
            try a.database.int64(#"SELECT count(*) FROM "_sqsync_changes" WHERE "site" = ?"#, .integer(Int64(a.site))), 4,
            "kept with no peer to acknowledge them")
        let keys = try ChangeExporter.snapshot(of: a, ownChangesAfter: before[a.knowledgeID]) { exporter in
            var keys: [[SQLValue]] = []
            try exporter.forEachChange { keys.append($0.key) }
            return keys
        }
        XCTAssertEqual(Set(keys), [[.text("y")], [.text("z")]])
    }

    func testReadersGiveTheSameAnswersWithOrWithoutPendingLogRows() throws {
        let original = try sandbox.replica("fold", schema: schema, track: ["items", "pairs"])
        let peer = try sandbox.clone(original, "fold-peer")
        try writeMix(peer, round: 9)
        try sync(from: peer, to: original)
        try writeMix(original, round: 1)
        try writeMix(original, round: 2)
        XCTAssertGreaterThan(try pendingLogRows(original), 0, "the shell's writes wait in the log")

        // The same file twice: one folded now, one read with its log still full.
        let copyPath = sandbox.path("fold-copy.db")
        try original.database.execute("VACUUM INTO '\(copyPath)'")
        let unfolded = try Replica(path: copyPath)
        XCTAssertGreaterThan(try pendingLogRows(unfolded), 0)
        try original.fold()
        XCTAssertEqual(try pendingLogRows(original), 0, "every fold empties the log")

        XCTAssertEqual(try statusFigures(unfolded), try statusFigures(original))
        XCTAssertEqual(try pendingLogRows(unfolded), 0)
        let exportedUnfolded = try changeSet(from: unfolded, since: Knowledge())
        let exportedFolded = try changeSet(from: original, since: Knowledge())
        XCTAssertEqual(exportedUnfolded.changes, exportedFolded.changes)
        XCTAssertEqual(exportedUnfolded.header.originKnowledge, exportedFolded.header.originKnowledge)
        XCTAssertFalse(exportedFolded.changes.isEmpty)
        XCTAssertEqual(try metadata(of: unfolded), try metadata(of: original))
        XCTAssertEqual(try unfolded.purge(dryRun: true).tombstones, try original.purge(dryRun: true).tombstones)

        // Conflicts: the peer's concurrent edit meets pending and folded writes alike.
        try peer.database.execute("UPDATE items SET qty = 999 WHERE id = 'a1'")
        try writeMix(original, round: 3)
        try original.database.execute("VACUUM INTO '\(sandbox.path("fold-copy2.db"))'")
        let unfoldedAgain = try Replica(path: sandbox.path("fold-copy2.db"))
        try original.fold()
        let fromPeer = try changeSet(from: peer, since: Knowledge())
        _ = try apply(fromPeer, to: original)
        _ = try apply(fromPeer, to: unfoldedAgain)
        XCTAssertEqual(try rows(of: unfoldedAgain, table: "items"), try rows(of: original, table: "items"))
        XCTAssertEqual(try unfoldedAgain.conflicts().count, try original.conflicts().count)
    }

    /// The shell writes and exits; a new process opens the replica later. Nothing is lost
    /// between capture and fold, and the changes reach a peer.
    func testWritesSurviveUntilTheNextFoldInAnotherProcess() throws {
        let replica = try sandbox.replica("crash", schema: schema, track: ["items", "pairs"])
        let peer = try sandbox.clone(replica, "crash-peer")
        try writeMix(replica, round: 1)
        let path = replica.path
        let reopened = try Replica(path: path)
        XCTAssertGreaterThan(try pendingLogRows(reopened), 0)
        try sync(from: reopened, to: peer)
        try assertSameRows([reopened, peer], table: "items")
        try assertSameRows([reopened, peer], table: "pairs")
        XCTAssertEqual(try rows(of: peer, table: "items"), [[.text("a1"), .text("apple"), .integer(11), .null]])
    }

    /// Few changes are found through the (site, seq) indexes and read by key; many by one
    /// pass over each table. Both give the same change set.
    func testExportByKeyMatchesExportByScan() throws {
        let replica = try sandbox.replica("paths", schema: schema, track: ["items", "pairs"])
        let peer = try sandbox.clone(replica, "paths-peer")
        for round in 1...4 { try writeMix(replica, round: round) }
        try writeMix(peer, round: 7)
        try sync(from: peer, to: replica)
        try replica.fold()
        let since = try peer.knowledge()
        for base in [Knowledge(), since] {
            let (byKey, byScan) = try replica.readSnapshot {
                let keyed = try ChangeExporter(replica: replica, ownChangesAfter: base[replica.knowledgeID], keyPathLimit: 1_000_000)
                var keyedChanges: [RowChange] = []
                try keyed.forEachChange { keyedChanges.append($0) }
                let scanned = try ChangeExporter(replica: replica, ownChangesAfter: base[replica.knowledgeID], keyPathLimit: 0)
                var scannedChanges: [RowChange] = []
                try scanned.forEachChange { scannedChanges.append($0) }
                XCTAssertEqual(keyed.header, scanned.header)
                return (keyedChanges, scannedChanges)
            }
            XCTAssertFalse(byKey.isEmpty)
            let order = { (change: RowChange) in "\(change.table) \(change.isDelete) \(change.key)" }
            XCTAssertEqual(byKey.sorted { order($0) < order($1) }, byScan.sorted { order($0) < order($1) })
            XCTAssertEqual(byKey.map(\.isDelete), byScan.map(\.isDelete), "live rows first, deletions last, on both paths")
        }
    }

    /// A replica from before the capture log: its triggers wrote `_sqsync_rows` directly and
    /// left changes unnumbered. Opening it numbers them once, rebuilds the triggers for the
    /// log, and every change, old or new, reaches a peer.
    func testReplicaFromBeforeTheLogIsUpgradedOnOpen() throws {
        let replica = try sandbox.replica("legacy", schema: schema, track: ["items", "pairs"])
        let peer = try sandbox.clone(replica, "legacy-peer")
        let tid = try XCTUnwrap(replica.database.scalar(#"SELECT "tid" FROM "_sqsync_tables" WHERE "name" = 'items'"#))
        // What the earlier sqsync's insert trigger did: an unnumbered row entry, no log.
        try replica.database.execute(
            """
            DROP TRIGGER "_sqsync_items_after_insert";
            CREATE TRIGGER "_sqsync_items_after_insert" AFTER INSERT ON items BEGIN
              INSERT INTO "_sqsync_rows" ("tid", "pk", "cl", "hlc", "site", "seq")
                SELECT \(tid.literal), NEW.id, 1, "hlc" + 1, "site", 0 FROM "_sqsync_replica";
            END;
            UPDATE "_sqsync_replica" SET "capture_log" = 0;
            """)
        try sqlite3Shell(replica.path, "INSERT INTO items VALUES ('old1', 'before', 1, NULL), ('old2', 'before', 2, NULL);")
        XCTAssertEqual(try pendingLogRows(replica), 0)

        let upgraded = try Replica(path: replica.path)
        XCTAssertEqual(try upgraded.database.scalar(#"SELECT "capture_log" FROM "_sqsync_replica""#), .integer(1))
        XCTAssertEqual(
            try upgraded.database.scalar(#"SELECT count(*) FROM "_sqsync_rows" WHERE "seq" = 0"#), .integer(0),
            "the old triggers' changes are numbered")
        XCTAssertEqual(try upgraded.doctor(), [], "the triggers are the log's now")
        try sqlite3Shell(upgraded.path, "INSERT INTO items VALUES ('new1', 'after', 3, NULL);")
        XCTAssertEqual(try pendingLogRows(upgraded), 1)
        try sync(from: upgraded, to: peer)
        XCTAssertEqual(try rows(of: peer, table: "items").map { $0[0] }, [.text("new1"), .text("old1"), .text("old2")])
        // And an export for a peer that already holds the old changes sends only the new one.
        try sqlite3Shell(upgraded.path, "UPDATE items SET qty = 30 WHERE id = 'new1';")
        let delta = try changeSet(from: upgraded, for: peer)
        XCTAssertEqual(delta.changes.map(\.key), [[.text("new1")]])
    }

    /// A delete is logged without the wall clock (TriggerSQL) and folds to the replica's clock
    /// + 1, whenever the fold runs; the fold then moves the replica's clock up to the wall
    /// clock, and an insert or update takes the wall clock when it is later.
    func testDeleteTakesTheNextClockValueAndTheFoldTheWallClock() throws {
        let replica = try sandbox.replica("clocks", schema: schema, track: ["items"])
        func entryClock(_ key: String) throws -> Int64? {
            try replica.database.scalar(#"SELECT "hlc" FROM "_sqsync_rows" WHERE "pk" = ?"#, .text(key))?.int64Value
        }
        try sqlite3Shell(replica.path, "INSERT INTO items VALUES ('a', 'apple', 1, NULL), ('b', 'bean', 2, NULL);")
        let inserted = try clock(of: replica).hlc
        try sqlite3Shell(replica.path, "DELETE FROM items WHERE id = 'a';")
        XCTAssertEqual(try replica.database.scalar(#"SELECT "stamp" FROM "_sqsync_log""#), .null, "no clock read")
        Thread.sleep(forTimeInterval: 0.05)
        let folded = try clock(of: replica).hlc
        XCTAssertEqual(try entryClock("a"), inserted + 1, "the clock + 1, whenever the fold runs")
        XCTAssertGreaterThanOrEqual(folded, inserted + 40, "the fold moves the clock up to the wall clock")
        XCTAssertEqual(try replica.database.scalar(#"SELECT "cl" FROM "_sqsync_rows" WHERE "pk" = 'a'"#), .integer(2))
        Thread.sleep(forTimeInterval: 0.05)
        try sqlite3Shell(replica.path, "INSERT INTO items VALUES ('c', 'cress', 3, NULL);")
        _ = try clock(of: replica)
        XCTAssertGreaterThanOrEqual(try XCTUnwrap(try entryClock("c")), folded + 40, "an insert takes its write's wall clock")

        // A clock ahead of the wall clock (a peer's, seen in an import) moves on by one.
        let ahead = nowMilliseconds + 3_600_000
        try setClock(of: replica, to: ahead)
        try sqlite3Shell(replica.path, "DELETE FROM items WHERE id = 'b';")
        XCTAssertEqual(try clock(of: replica).hlc, ahead + 1)
        XCTAssertEqual(try entryClock("b"), ahead + 1)

        try sqlite3Shell(replica.path, "INSERT INTO items VALUES ('a', 'again', 2, NULL);")
        XCTAssertEqual(try clock(of: replica).hlc, ahead + 2)
        XCTAssertEqual(try entryClock("a"), ahead + 2)
        XCTAssertEqual(try replica.doctor(), [])
    }

    /// Version 8 of the metadata drops the log's NOT NULL constraints (they made SQLite keep
    /// a statement journal on every tracked update and delete) and the triggers stamp the
    /// Julian day. Log rows waiting from before keep their millisecond stamps and fold as such.
    func testLogFromBeforeVersion8KeepsItsRowsAndStamps() throws {
        let replica = try sandbox.replica("v7", schema: schema, track: ["items"])
        try sqlite3Shell(replica.path, "INSERT INTO items VALUES ('a', 'apple', 1, NULL);")
        try replica.fold()
        let wallClock = Int64(Date().timeIntervalSince1970 * 1000)
        let insertClock = try XCTUnwrap(
            replica.database.scalar(#"SELECT "hlc" FROM "_sqsync_rows" WHERE "pk" = 'a'"#)?.int64Value)
        XCTAssertLessThan(abs(insertClock - wallClock), 60_000, "a trigger's Julian day folds to ms")

        let tid = try XCTUnwrap(replica.database.scalar(#"SELECT "tid" FROM "_sqsync_tables" WHERE "name" = 'items'"#))
        let qty = try XCTUnwrap(
            replica.database.scalar(#"SELECT "cid" FROM "_sqsync_columns" WHERE "name" = 'qty' AND "tid" = ?"#, tid))
        let in2100: Int64 = 4_102_444_800_000
        try replica.database.execute(
            """
            DROP TABLE "_sqsync_log";
            CREATE TABLE "_sqsync_log" (
                "id" INTEGER PRIMARY KEY, "tid" INTEGER NOT NULL, "op" INTEGER NOT NULL, "pk" NOT NULL,
                "mask" INTEGER NOT NULL DEFAULT 0, "stamp" INTEGER NOT NULL, "delta");
            INSERT INTO "_sqsync_log" ("tid", "op", "pk", "mask", "stamp")
                VALUES (\(tid.literal), 2, 'a', \(1 << ((qty.int64Value ?? 1) - 1)), \(in2100));
            DELETE FROM "_sqsync_migrations" WHERE "version" = 8;
            UPDATE "_sqsync_replica" SET "trigger_version" = 6;
            """)

        let upgraded = try Replica(path: replica.path)
        let logTable = try XCTUnwrap(
            upgraded.database.scalar("SELECT sql FROM sqlite_schema WHERE name = '_sqsync_log'")?.stringValue)
        XCTAssertFalse(logTable.contains("NOT NULL"), logTable)
        XCTAssertEqual(try pendingLogRows(upgraded), 1, "the waiting row was kept")
        try sqlite3Shell(upgraded.path, "UPDATE items SET name = 'apricot' WHERE id = 'a';")
        try upgraded.fold()
        XCTAssertEqual(
            try cellEntries(of: upgraded).first { $0[0] == tid && $0[1] == .text("a") && $0[2] == qty }?[3],
            .integer(in2100), "a stamp in ms folds as it is")
        XCTAssertEqual(try clock(of: upgraded).hlc, in2100 + 1, "the next change orders after it")
        XCTAssertEqual(try upgraded.doctor(), [])
    }

    /// The fold writes entries a batch at a time in key order (``Replica/foldBatch``):
    /// however the log falls into batches, every entry, column clock, counter and note comes
    /// out as when each change is written in log order, a batch of one.
    func testBatchesInKeyOrderFoldAsTheLogOrderDoes() throws {
        let replica = try sandbox.replica(
            "batches", schema: schema + "CREATE TABLE mixed (k PRIMARY KEY, v);", track: ["items", "pairs", "mixed"])
        try replica.setPolicy(.counter, table: "items", column: "qty")
        for round in 1...4 { try writeMix(replica, round: round) }
        // Keys of every kind in one table: numbers (1 and 1.0 are one key), text sharing its
        // first eight bytes, UUIDs, BLOBs, each written more than once.
        let uuid = "0190a6b2-7c4d-7e5f-8a9b-0c1d2e3f4a5b"
        try sqlite3Shell(
            replica.path,
            """
            UPDATE items SET name = 'again' WHERE id = 'a1';
            UPDATE items SET qty = qty + 1;
            DELETE FROM items WHERE id = 'a3';
            INSERT INTO items VALUES ('a3', 'back', 7, NULL), ('b1', 'back', 1, NULL);
            UPDATE items SET note = 'last' WHERE id IN ('a3', 'b1');
            INSERT INTO mixed VALUES (-5, 'a'), (1, 'b'), (2.5, 'c'), ('prefix-same-1', 'd'), ('prefix-same-2', 'e'),
                ('\(uuid)', 'f'), (x'00ff', 'g'), (x'00fe01', 'h'), ('', 'i');
            UPDATE mixed SET v = v || '!';
            DELETE FROM mixed WHERE k = 1.0;
            INSERT INTO mixed VALUES (1, 'again');
            UPDATE mixed SET k = 'prefix-same-3' WHERE k = 'prefix-same-1';
            """)
        XCTAssertGreaterThan(try pendingLogRows(replica), 70)
        let metadata = [
            #"SELECT * FROM "_sqsync_rows" ORDER BY "tid", "pk""#,
            #"SELECT * FROM "_sqsync_changes" ORDER BY "site", "seq""#,
            #"SELECT * FROM "_sqsync_counters" ORDER BY "tid", "pk", "cid", "site""#,
            #"SELECT "seq" FROM "_sqsync_replica""#,
        ]
        var folded: [[[[SQLValue]]]] = []
        for size in [1, 2, 7, Replica.foldBatch] {
            let path = sandbox.path("batches-\(size).db")
            try replica.database.execute("VACUUM INTO '\(path)'")
            let copy = try Replica(path: path)
            XCTAssertEqual(try pendingLogRows(copy), try pendingLogRows(replica), "nothing folded before")
            copy.foldBatchSize = size
            try copy.fold()
            XCTAssertEqual(try pendingLogRows(copy), 0)
            folded.append(try metadata.map { try copy.database.valueRows($0) })
        }
        XCTAssertEqual(folded[0][0].count, 30, "an entry per row ever seen")
        XCTAssertFalse(folded[0][2].isEmpty, "counter entries")
        for (index, size) in [2, 7, Replica.foldBatch].enumerated() {
            XCTAssertEqual(folded[index + 1], folded[0], "batches of \(size)")
        }
    }

    /// The fold records each written row's checksum as it writes the row's entry: after any
    /// mix of writes (a row written several times, inserted then deleted, re-keyed, a
    /// counter moved) every live row's recorded checksum is that of its values, so `refresh`
    /// finds nothing to capture, and the log is empty.
    func testFoldRecordsTheChecksumOfEveryRowItWrites() throws {
        let replica = try sandbox.replica("sums", schema: schema, track: ["items", "pairs"])
        try replica.setPolicy(.counter, table: "items", column: "qty")
        try writeMix(replica, round: 1)
        try writeMix(replica, round: 2)
        try replica.fold()
        try sqlite3Shell(
            replica.path,
            """
            UPDATE items SET name = 'avocado' WHERE id = 'a1';
            UPDATE items SET qty = qty + 5, note = 'again' WHERE id = 'a1';
            UPDATE items SET qty = qty - 1 WHERE id = 'a2';
            INSERT INTO items VALUES ('gone', 'x', 1, NULL);
            DELETE FROM items WHERE id = 'gone';
            INSERT INTO items VALUES ('c', 'cherry', 3, NULL);
            UPDATE items SET id = 'c-moved' WHERE id = 'c';
            """)
        XCTAssertGreaterThan(try pendingLogRows(replica), 0)
        try replica.fold()
        XCTAssertEqual(try pendingLogRows(replica), 0)
        let mismatched = try replica.database.scalar(
            """
            SELECT count(*) FROM items t JOIN "_sqsync_rows" r ON r."pk" = sqsync_key(t.id)
            WHERE r."sum" IS NOT sqsync_row_checksum(t.id, t.name, t.qty, t.note)
            """)
        XCTAssertEqual(mismatched, .integer(0))
        XCTAssertEqual(try replica.database.scalar("SELECT count(*) FROM items"), .integer(3))
        let refreshed = try replica.refresh()
        XCTAssertEqual([refreshed.capturedInserts, refreshed.capturedUpdates, refreshed.capturedDeletes], [0, 0, 0])
    }
}
