import Foundation
import SQLiteDatabase
import TestSupport
import XCTest

@testable import ChangeLog

/// Column clocks packed into row entries (CellClocks): the format, the SQL functions over
/// it, metadata migration 9, which moves `_sqsync_cells` into the row entries, and 10, which
/// packs them relative to their rows and keeps 32-bit row checksums.
final class CellClockTests: XCTestCase {
    private var sandbox: Sandbox!

    override func setUpWithError() throws { sandbox = try Sandbox() }
    override func tearDown() { sandbox = nil }

    private let schema = """
        CREATE TABLE items (id TEXT PRIMARY KEY, name TEXT, qty INTEGER, note);
        CREATE TABLE pairs (a TEXT, b INTEGER, v, PRIMARY KEY (a, b)) WITHOUT ROWID;
        """

    func testPackedClocksRoundTripInColumnOrder() throws {
        let row = RowClock(hlc: 1_700_000_000_000, site: 2)
        let clocks = [
            CellClock(cid: 9, hlc: 1_700_000_000_123, site: 2, seq: 57),
            CellClock(cid: 1, hlc: Int64.max, site: 300, seq: Int64.min),
            CellClock(cid: 4, hlc: -1, site: 0, seq: 0),
            CellClock(cid: -2, hlc: Int64.min, site: -1, seq: 1),
        ]
        let bytes = try XCTUnwrap(CellClocks.encode(clocks, relativeTo: row))
        XCTAssertEqual(bytes.first, CellClocks.relativeFormat)
        XCTAssertEqual(CellClocks.decode(bytes, relativeTo: row), clocks.sorted { $0.cid < $1.cid })
        XCTAssertNotEqual(
            CellClocks.decode(bytes, relativeTo: RowClock(hlc: 5, site: 3)), clocks.sorted { $0.cid < $1.cid },
            "the clocks are stored relative to their row")
        let outOfRange = [CellClock(cid: Int.min, hlc: 7, site: 2, seq: 1), CellClock(cid: Int.max, hlc: 8, site: 2, seq: 2)]
        let absolute = try XCTUnwrap(CellClocks.encode(outOfRange, relativeTo: row))
        XCTAssertEqual(absolute.first, CellClocks.absoluteFormat, "column ids beyond 2^62 fall back to format 1")
        XCTAssertEqual(CellClocks.decode(absolute, relativeTo: RowClock(hlc: 5, site: 3)), outOfRange)
        XCTAssertNil(CellClocks.encode([], relativeTo: row), "no clocks is NULL")
        XCTAssertEqual(CellClocks.decode(SQLValue.null, relativeTo: row), [])
        XCTAssertNil(CellClocks.decode([UInt8]([3, 1, 1, 1, 1]), relativeTo: row), "an unknown format version")
        XCTAssertNil(CellClocks.decode(Array(bytes.dropLast()), relativeTo: row), "a clock cut short")
        XCTAssertNil(CellClocks.decode(SQLValue.text("x"), relativeTo: row))
        // A typical clock: the column id, a clock a day after its row's, the row's site and a
        // sequence number below 2^21 cost 9 bytes with the format byte; format 1 took 13.
        let typical = try XCTUnwrap(
            CellClocks.encode([CellClock(cid: 3, hlc: 1_795_086_400_000, site: 2, seq: 40_000)],
                relativeTo: RowClock(hlc: 1_795_000_000_000, site: 2)))
        XCTAssertLessThanOrEqual(typical.count, 9)
    }

    func testSQLFunctionsEditThePackedClocks() throws {
        let database = try sandbox.replica("f").database
        // Every function takes the row's clock and site after the packed value: here 90 and 1.
        let row = RowClock(hlc: 90, site: 1)
        func clocks(_ sql: String, _ values: SQLValue..., relativeTo base: RowClock = row) throws -> [CellClock]? {
            CellClocks.decode(try XCTUnwrap(try database.scalar(sql, values)), relativeTo: base)
        }
        let one = try XCTUnwrap(CellClocks.encode([CellClock(cid: 2, hlc: 100, site: 1, seq: 5)], relativeTo: row))
        XCTAssertEqual(
            try clocks("SELECT sqsync_cells_set(NULL, 90, 1, 2, 100, 1, 5)"), [CellClock(cid: 2, hlc: 100, site: 1, seq: 5)])
        XCTAssertEqual(
            try clocks("SELECT sqsync_cells_set(?, 90, 1, 2, 200, 3, 0)", .blob(one)),
            [CellClock(cid: 2, hlc: 200, site: 3, seq: 0)], "a column's clock is replaced")
        let two = try XCTUnwrap(try database.scalar("SELECT sqsync_cells_set(?, 90, 1, 1, 300, 3, 0)", .blob(one)))
        XCTAssertEqual(
            try clocks("SELECT ?", two),
            [CellClock(cid: 1, hlc: 300, site: 3, seq: 0), CellClock(cid: 2, hlc: 100, site: 1, seq: 5)])
        XCTAssertEqual(
            try clocks("SELECT sqsync_cells_without(?, 90, 1, 1)", two), [CellClock(cid: 2, hlc: 100, site: 1, seq: 5)])
        XCTAssertEqual(try database.scalar("SELECT sqsync_cells_without(?, 90, 1, 2)", .blob(one)), .null, "none left is NULL")
        XCTAssertEqual(try database.scalar("SELECT sqsync_cells_count(?, 90, 1, 1, 4)", two), .integer(1))
        XCTAssertEqual(try database.scalar("SELECT sqsync_cells_count(?, 90, 1, 1, 5)", two), .integer(0))
        XCTAssertEqual(try database.scalar("SELECT sqsync_cells_at(?, 90, 1, 3, 0)", two), .integer(1))
        XCTAssertEqual(
            try clocks("SELECT sqsync_cells_adopt(?, 90, 1, 4, 7)", two),
            [CellClock(cid: 1, hlc: 300, site: 7, seq: 0), CellClock(cid: 2, hlc: 100, site: 1, seq: 5)],
            "only unnumbered clocks change site")
        XCTAssertEqual(
            try clocks("SELECT sqsync_cells_adopt(?, 90, 1, 0, 7)", two, relativeTo: RowClock(hlc: 90, site: 7)),
            [CellClock(cid: 1, hlc: 300, site: 7, seq: 0), CellClock(cid: 2, hlc: 100, site: 1, seq: 5)],
            "an unnumbered row is adopted too: its clocks are packed relative to the new site")
        XCTAssertEqual(try database.scalar("SELECT sqsync_cells_newer(?, 90, 1, '1:5,3:9')", two), .integer(0))
        XCTAssertEqual(try database.scalar("SELECT sqsync_cells_newer(?, 90, 1, '1:4')", .blob(one)), .integer(1))
        XCTAssertEqual(
            try database.scalar("SELECT sqsync_cells_newer(?, 90, 1, '')", .blob(one)), .integer(1), "unknown site: 0")
        XCTAssertEqual(
            try clocks(
                """
                SELECT sqsync_pack_cells(cid, hlc, site, seq, 90, 1)
                FROM (SELECT 5 AS cid, 50 AS hlc, 1 AS site, 2 AS seq UNION ALL SELECT 3, 30, 2, 1)
                """),
            [CellClock(cid: 3, hlc: 30, site: 2, seq: 1), CellClock(cid: 5, hlc: 50, site: 1, seq: 2)])
        XCTAssertEqual(try database.scalar("SELECT sqsync_pack_cells(1, 2, 3, 4, 90, 1) WHERE 0"), .null)
        let formatOne: [UInt8] = [1, 4, 200, 1, 2, 10]
        XCTAssertEqual(
            try clocks("SELECT sqsync_cells_repack(?, 90, 1)", .blob(formatOne)), [CellClock(cid: 2, hlc: 100, site: 1, seq: 5)],
            "format 1 is read and written again relative to the row")
        XCTAssertEqual(try database.scalar("SELECT length(sqsync_cells_repack(?, 90, 1))", .blob(formatOne)), .integer(4))
        XCTAssertEqual(
            try clocks("SELECT sqsync_cells_set(NULL, 90, 1, -1, -2, -3, -4)"), [CellClock(cid: -1, hlc: -2, site: -3, seq: -4)],
            "damaged values are kept, not a crash")
        XCTAssertThrowsError(try database.scalar("SELECT sqsync_cells_count(x'0201', 90, 1, 1, 0)")) { error in
            XCTAssertTrue("\(error)".contains("not in a format this sqsync reads"), "\(error)")
        }
    }

    /// A replica from before version 9 keeps every column clock of its live rows, now in the
    /// row entries; clocks the triggers of versions before the capture log left unnumbered
    /// are numbered first, as the upgrade always did; those of deleted rows go.
    func testCellsFromBeforeVersion9MoveIntoTheRowEntries() throws {
        let replica = try sandbox.replica("v8", schema: schema, track: ["items", "pairs"])
        let peer = try sandbox.clone(replica, "peer")
        try sqlite3Shell(
            replica.path,
            """
            INSERT INTO items VALUES ('a', 'apple', 1, NULL), ('b', 'banana', 2, 'x'), ('c', 'cherry', 3, NULL);
            INSERT INTO pairs VALUES ('p', 1, 'one');
            UPDATE items SET qty = 10, note = 'ripe' WHERE id = 'a';
            UPDATE items SET name = 'blueberry' WHERE id = 'b';
            UPDATE pairs SET v = 'uno' WHERE a = 'p';
            DELETE FROM items WHERE id = 'c';
            """)
        try replica.fold()
        let expected = try cellEntries(of: replica)
        XCTAssertEqual(expected.count, 4)
        let site = SQLValue.integer(Int64(replica.site))
        let (seqBefore, _) = try clock(of: replica)

        // Version 8's layout: a table of column entries, one of them unnumbered, and a stray
        // one of a deleted row.
        try replica.database.execute(
            """
            CREATE TABLE "_sqsync_cells" (
                "tid" INTEGER NOT NULL, "pk" NOT NULL, "cid" INTEGER NOT NULL, "hlc" INTEGER NOT NULL,
                "site" INTEGER NOT NULL, "seq" INTEGER NOT NULL, PRIMARY KEY ("tid", "pk", "cid")) WITHOUT ROWID;
            """)
        for entry in expected {
            try replica.database.run(#"INSERT INTO "_sqsync_cells" VALUES (?, ?, ?, ?, ?, ?)"#, entry)
        }
        let items = expected[0][0]
        try replica.database.execute(
            """
            UPDATE "_sqsync_cells" SET "seq" = 0 WHERE "pk" = 'b';
            INSERT INTO "_sqsync_cells" VALUES (\(items.literal), 'c', 2, 1, \(site.literal), 1);
            DROP INDEX "_sqsync_tombstones";
            CREATE INDEX "_sqsync_tombstones" ON "_sqsync_rows" ("tid", "pk", "site", "seq") WHERE "cl" % 2 = 0;
            ALTER TABLE "_sqsync_rows" DROP COLUMN "cells";
            DELETE FROM "_sqsync_migrations" WHERE "version" = 9;
            """)

        let upgraded = try Replica(path: replica.path)
        XCTAssertEqual(
            try upgraded.database.scalar("SELECT count(*) FROM sqlite_schema WHERE name = '_sqsync_cells'"), .integer(0))
        var moved = try cellEntries(of: upgraded)
        XCTAssertEqual(moved.count, expected.count, "the deleted row's clock is gone")
        let numbered = try XCTUnwrap(moved.firstIndex { $0[1] == .text("b") })
        XCTAssertEqual(moved[numbered][4], site)
        XCTAssertEqual(moved[numbered][5], .integer(seqBefore + 1), "the unnumbered clock got the next number")
        XCTAssertEqual(try clock(of: upgraded).seq, seqBefore + 1)
        moved[numbered][5] = expected[numbered][5]
        XCTAssertEqual(moved, expected)

        // The clocks still decide what a peer is sent and how it merges.
        try sqlite3Shell(upgraded.path, "UPDATE items SET note = 'soft' WHERE id = 'a';")
        _ = try apply(try changeSet(from: upgraded, for: peer), to: peer)
        XCTAssertEqual(try rows(of: peer, table: "items"), try rows(of: upgraded, table: "items"))
        XCTAssertEqual(try rows(of: peer, table: "pairs"), try rows(of: upgraded, table: "pairs"))
        XCTAssertEqual(try upgraded.doctor(), [])
    }

    /// Metadata version 10 folds the stored 64-bit checksums to the 32 bits the function now
    /// gives, and packs format-1 column clocks again relative to their rows.
    func testVersion10FoldsChecksumsAndRepacksClocks() throws {
        let replica = try sandbox.replica("v9", schema: schema, track: ["items", "pairs"])
        let peer = try sandbox.clone(replica, "peer")
        try sqlite3Shell(
            replica.path,
            """
            INSERT INTO items VALUES ('a', 'apple', 1, NULL), ('b', 'banana', 2, 'x');
            UPDATE items SET qty = 10, note = 'ripe' WHERE id = 'a';
            UPDATE items SET name = 'blueberry' WHERE id = 'b';
            """)
        try replica.fold()
        let expected = try cellEntries(of: replica)
        XCTAssertEqual(expected.count, 3)
        let entries = try replica.database.valueRows(#"SELECT "pk", "sum", "cells", "hlc", "site" FROM "_sqsync_rows" ORDER BY 1"#)
        XCTAssertEqual(entries.count, 2)

        // Version 9's entries: a 64-bit checksum whose halves XOR to today's, and clocks in
        // format 1 (absolute, zigzag).
        for (entry, high) in zip(entries, [UInt32(0x0BAD_F00D), 0xDEAD_BEEF]) {
            let sum = UInt32(bitPattern: Int32(try XCTUnwrap(entry[1].int64Value)))
            let wide = Int64(bitPattern: UInt64(high) << 32 | UInt64(sum ^ high))
            let row = RowClock(hlc: try XCTUnwrap(entry[3].int64Value), site: Int(try XCTUnwrap(entry[4].int64Value)))
            let clocks = try replica.cellClocks(entry[2], of: row)
            try replica.database.run(
                #"UPDATE "_sqsync_rows" SET "sum" = ?, "cells" = ? WHERE "pk" = ?"#,
                .integer(wide), .blob(Self.formatOne(clocks)), entry[0])
        }
        try replica.database.execute(#"DELETE FROM "_sqsync_migrations" WHERE "version" = 10"#)

        let upgraded = try Replica(path: replica.path)
        XCTAssertEqual(
            try upgraded.database.valueRows(#"SELECT "pk", "sum" FROM "_sqsync_rows" ORDER BY 1"#),
            entries.map { [$0[0], $0[1]] }, "the folded checksums are the ones the function gives")
        XCTAssertEqual(
            try upgraded.database.scalar(#"SELECT count(*) FROM "_sqsync_rows" WHERE substr("cells", 1, 1) = x'02'"#),
            .integer(2))
        XCTAssertEqual(try cellEntries(of: upgraded), expected)
        XCTAssertEqual(try upgraded.doctor(), [], "no row looks changed behind sqsync's back")

        try sqlite3Shell(upgraded.path, "UPDATE items SET note = 'soft' WHERE id = 'b';")
        _ = try apply(try changeSet(from: upgraded, for: peer), to: peer)
        XCTAssertEqual(try rows(of: peer, table: "items"), try rows(of: upgraded, table: "items"))
    }

    /// Format 1: per column the id, clock, site and sequence number, zigzag LEB128 varints.
    private static func formatOne(_ clocks: [CellClock]) -> [UInt8] {
        var bytes: [UInt8] = [1]
        for clock in clocks {
            for field in [Int64(clock.cid), clock.hlc, Int64(clock.site), clock.seq] {
                var rest = UInt64(bitPattern: (field << 1) ^ (field >> 63))
                while rest >= 0x80 {
                    bytes.append(UInt8(truncatingIfNeeded: rest) | 0x80)
                    rest >>= 7
                }
                bytes.append(UInt8(rest))
            }
        }
        return bytes
    }

    /// A replica from before the capture log has triggers that write `_sqsync_cells`:
    /// migration 9 must not drop that table before those triggers are replaced, or every
    /// write by any program would fail in between. Opening it replaces the triggers, numbers
    /// what they wrote, and packs the clocks, in that order.
    func testReplicaFromBeforeTheCaptureLogPacksItsCellsAfterItsTriggersAreReplaced() throws {
        let replica = try sandbox.replica("legacy", schema: schema, track: ["items"])
        let peer = try sandbox.clone(replica, "legacy-peer")
        let tid = try XCTUnwrap(replica.database.scalar(#"SELECT "tid" FROM "_sqsync_tables" WHERE "name" = 'items'"#))
        let qty = try XCTUnwrap(
            replica.database.scalar(#"SELECT "cid" FROM "_sqsync_columns" WHERE "name" = 'qty' AND "tid" = ?"#, tid))
        try replica.database.execute(
            """
            CREATE TABLE "_sqsync_cells" (
                "tid" INTEGER NOT NULL, "pk" NOT NULL, "cid" INTEGER NOT NULL, "hlc" INTEGER NOT NULL,
                "site" INTEGER NOT NULL, "seq" INTEGER NOT NULL, PRIMARY KEY ("tid", "pk", "cid")) WITHOUT ROWID;
            DROP INDEX "_sqsync_tombstones";
            CREATE INDEX "_sqsync_tombstones" ON "_sqsync_rows" ("tid", "pk", "site", "seq") WHERE "cl" % 2 = 0;
            ALTER TABLE "_sqsync_rows" DROP COLUMN "cells";
            DELETE FROM "_sqsync_migrations" WHERE "version" = 9;
            DROP TRIGGER "_sqsync_items_after_insert";
            CREATE TRIGGER "_sqsync_items_after_insert" AFTER INSERT ON items BEGIN
              INSERT INTO "_sqsync_rows" ("tid", "pk", "cl", "hlc", "site", "seq")
                SELECT \(tid.literal), NEW.id, 1, "hlc" + 1, "site", 0 FROM "_sqsync_replica";
              DELETE FROM "_sqsync_cells" WHERE "tid" = \(tid.literal) AND "pk" = NEW.id;
            END;
            DROP TRIGGER "_sqsync_items_after_update";
            CREATE TRIGGER "_sqsync_items_after_update" AFTER UPDATE OF qty ON items BEGIN
              INSERT OR REPLACE INTO "_sqsync_cells" ("tid", "pk", "cid", "hlc", "site", "seq")
                SELECT \(tid.literal), NEW.id, \(qty.literal), "hlc" + 2, "site", 0 FROM "_sqsync_replica";
            END;
            UPDATE "_sqsync_replica" SET "capture_log" = 0;
            CREATE TABLE "probe" ("capture_log");
            CREATE TRIGGER "probe_migration_9" AFTER INSERT ON "_sqsync_migrations" WHEN NEW."version" = 9 BEGIN
              INSERT INTO "probe" SELECT "capture_log" FROM "_sqsync_replica";
            END;
            """)
        try sqlite3Shell(
            replica.path,
            "INSERT INTO items VALUES ('old1', 'before', 1, NULL), ('old2', 'before', 2, NULL); UPDATE items SET qty = 5 WHERE id = 'old1';"
        )

        let upgraded = try Replica(path: replica.path)
        XCTAssertEqual(
            try upgraded.database.valueRows(#"SELECT "capture_log" FROM "probe""#), [[.integer(1)]],
            "migration 9 ran once the capture log's triggers were in place")
        try upgraded.database.execute(#"DROP TRIGGER "probe_migration_9"; DROP TABLE "probe";"#)
        XCTAssertEqual(try upgraded.database.scalar(#"SELECT "capture_log" FROM "_sqsync_replica""#), .integer(1))
        XCTAssertEqual(
            try upgraded.database.scalar(#"SELECT count(*) FROM "_sqsync_migrations" WHERE "version" = 9"#), .integer(1))
        XCTAssertEqual(
            try upgraded.database.scalar("SELECT count(*) FROM sqlite_schema WHERE name = '_sqsync_cells'"), .integer(0))
        let cells = try cellEntries(of: upgraded)
        XCTAssertEqual(cells.map { [$0[1], $0[2]] }, [[.text("old1"), qty]], "the old trigger's clock, packed")
        let rowSeqs = try upgraded.database.valueRows(#"SELECT "seq" FROM "_sqsync_rows""#).compactMap { $0[0].int64Value }
        XCTAssertEqual(rowSeqs.sorted(), [1, 2], "rows are numbered first")
        XCTAssertEqual(cells.first?[5], .integer(3), "then the column clocks")
        XCTAssertEqual(try upgraded.doctor(), [])

        try sqlite3Shell(upgraded.path, "UPDATE items SET qty = 6 WHERE id = 'old2';")
        try sync(from: upgraded, to: peer)
        XCTAssertEqual(try rows(of: peer, table: "items"), try rows(of: upgraded, table: "items"))
        XCTAssertEqual(try rows(of: peer, table: "items").map { $0[2] }, [.integer(5), .integer(6)])
    }
}
