import Foundation
import SQLiteDatabase
import TestSupport
import XCTest

@testable import ChangeLog

/// An import takes shortcuts where it can prove the long way would do the same: rows new
/// here go in a batch at a time, their checksums are computed instead of read back, entries
/// above the greatest key are not looked up, and changes every live peer holds get no note.
/// Each test checks that the outcome is what the long way gives.
final class ImportShortcutTests: XCTestCase {
    private var sandbox: Sandbox!

    override func setUpWithError() throws { sandbox = try Sandbox() }
    override func tearDown() { sandbox = nil }

    private static let declaredTypes = [
        "", "INTEGER", "INT", "BIGINT", "TEXT", "VARCHAR(10)", "CLOB", "BLOB", "REAL", "DOUBLE", "FLOAT", "NUMERIC",
        "DECIMAL(10,2)", "BOOLEAN", "DATE", "ANY",
    ]

    private static let values: [SQLValue] = [
        .null, .integer(0), .integer(-5), .integer(Int64.max), .integer(Int64.min), .real(5), .real(-0.0), .real(5.5),
        .real(-2.25), .real(1e300), .real(9.3e18), .real(.infinity), .real(-.infinity), .real(.nan), .text(""), .text("abc"),
        .text("12"), .text(" 12 "), .text("1e5"), .text("-3.5"), .text("0x10"), .text("ünïcode"), .text("5.0"),
        .text("item 7"), .blob([]), .blob([0, 1, 2, 255]),
    ]

    /// Wherever ``RowChecksum/storedAsGiven(_:in:)`` answers true, the checksum computed from
    /// the value is the one SQLite's function reads from the stored row, in plain and STRICT
    /// tables of every affinity.
    func testComputedChecksumIsWhatSQLiteStores() throws {
        let replica = try sandbox.replica("checksums")
        var checked = 0
        for (index, type) in Self.declaredTypes.enumerated() {
            for strict in [false, true] {
                let strictType = ["INTEGER", "INT", "TEXT", "BLOB", "REAL", "ANY"].contains(type) ? type : nil
                if strict && strictType == nil { continue }
                let table = "t\(index)\(strict ? "s" : "")"
                try replica.database.execute(
                    "CREATE TABLE \(table) (id INTEGER PRIMARY KEY, v \(type))\(strict ? " STRICT" : "")")
                let affinity = ColumnInfo(cid: 2, name: "v", primaryKeyPosition: 0, declaredType: type).affinity
                for (row, value) in Self.values.enumerated() where RowChecksum.storedAsGiven(value, in: affinity) {
                    do {
                        try replica.database.run("INSERT INTO \(table) VALUES (?, ?)", .integer(Int64(row)), value)
                    } catch is SQLiteError where strict {
                        continue
                    }
                    let stored = try replica.database.scalar(
                        "SELECT sqsync_row_checksum(id, v) FROM \(table) WHERE id = ?", .integer(Int64(row)))
                    XCTAssertEqual(
                        stored, .integer(RowChecksum.of([.integer(Int64(row)), value])),
                        "\(value) in a \(strict ? "STRICT " : "")column of type '\(type)'")
                    checked += 1
                }
            }
        }
        XCTAssertGreaterThan(checked, 250, "most values are stored as given")
        XCTAssertFalse(RowChecksum.storedAsGiven(.text("12"), in: .integer))
        XCTAssertFalse(RowChecksum.storedAsGiven(.real(5), in: .numeric))
        XCTAssertFalse(RowChecksum.storedAsGiven(.integer(5), in: .real))
        XCTAssertFalse(RowChecksum.storedAsGiven(.real(.nan), in: .blob))
    }

    /// The entry ceiling compares keys with ``sqliteOrder(_:_:)``: the order of SQLite's index
    /// on the entries, for every pair of values a key can be.
    func testKeyOrderIsSQLiteOrder() throws {
        let replica = try sandbox.replica("order")
        // SQLite stores a NaN as NULL, and so ranks it.
        let keys: [SQLValue] =
            Self.values + [.text("abd"), .text("ab"), .blob([0, 1]), .blob([1]), .integer(12), .real(12.5), .real(12)]
        for a in keys {
            for b in keys {
                let sqlite = try replica.database.scalar(
                    """
                    SELECT CASE WHEN ?1 IS ?2 THEN 0 ELSE
                        (SELECT CASE "i" WHEN 1 THEN -1 ELSE 1 END FROM (SELECT ?1 AS "x", 1 AS "i" UNION ALL SELECT ?2, 2) ORDER BY "x" LIMIT 1)
                    END
                    """, a, b)
                XCTAssertEqual(sqlite, .integer(Int64(sqliteOrder(a, b))), "\(a) against \(b)")
            }
        }
    }

    /// A table whose definition handles conflicts itself (`NOT NULL ON CONFLICT REPLACE`,
    /// `UNIQUE ON CONFLICT IGNORE`) may store other values than an insert gives, or none: its
    /// checksums are read back, and its rows go one at a time.
    func testNoComputedChecksumWhereTheTableHandlesConflicts() throws {
        let replica = try sandbox.replica(
            "conflicts",
            schema: """
                CREATE TABLE t (id TEXT PRIMARY KEY, v TEXT NOT NULL ON CONFLICT REPLACE DEFAULT 'x');
                CREATE TABLE u (id TEXT PRIMARY KEY, v TEXT NOT NULL);
                """, track: ["t", "u"])
        for (name, computed) in [("t", false), ("u", true)] {
            let info = try XCTUnwrap(replica.trackedTables().first { $0.name == name })
            let target = try ChangeMerger.Target(
                info: info, columns: info.columns, key: info.primaryKey, dropped: [], database: replica.database)
            let stamp = Stamp(hlc: 1, site: 0, seq: 1)
            let change = RowChange(
                table: 0, key: [.text("k")], causalLength: 1, rowStamp: stamp,
                columns: [ColumnChange(column: 1, value: .null, stamp: stamp)], counters: [])
            XCTAssertEqual(target.checksum(ofInserted: change) != nil, computed, name)
        }
    }

    /// In a UTF-16 database SQLite orders text keys otherwise than their UTF-8 bytes: no
    /// entry lookup is skipped there, so an update of a row whose key sorts apart still
    /// finds the row's entry.
    func testUTF16DatabaseLooksUpEveryEntry() throws {
        let path = sandbox.path("utf16.db")
        let setup = try Database(path: path, create: true)
        try setup.execute("PRAGMA encoding = 'UTF-16le'; CREATE TABLE items (id TEXT PRIMARY KEY, v TEXT);")
        let a = try Replica.initialize(path: path, name: "a").replica
        try a.track(["items"], allowIntegerPrimaryKey: false)
        let b = try sandbox.clone(a, "b")
        try a.database.execute("INSERT INTO items VALUES ('b', 'one'), ('\u{100}', 'two'), ('c', 'three')")
        try sync(from: a, to: b)
        try a.database.execute("UPDATE items SET v = 'changed' WHERE id = '\u{100}'")
        try sync(from: a, to: b)
        XCTAssertEqual(try b.database.scalar("PRAGMA encoding"), .text("UTF-16le"))
        try assertSameRows([a, b], table: "items")
    }

    private let schema = """
        CREATE TABLE items (id TEXT PRIMARY KEY, code TEXT UNIQUE, qty INTEGER, price REAL, note);
        """

    private func insertRows(_ replica: Replica, _ range: Range<Int>, prefix: String = "k") throws {
        try replica.database.inTransaction {
            for index in range {
                try replica.database.run(
                    "INSERT INTO items VALUES (?, ?, ?, ?, ?)", .text(String(format: "\(prefix)%05d", index)),
                    .text("code \(index)"), .integer(Int64(index)),
                    index % 3 == 0 ? .integer(Int64(index)) : .real(Double(index) / 4),
                    index % 5 == 0 ? .text("\(index)") : .blob([UInt8(index % 256)]))
            }
        }
    }

    /// Rows new here go in a batch; a batch that meets a row written here while untracked,
    /// or a UNIQUE value a concurrent row holds, is applied row by row, which settles both as
    /// it always did. Both replicas end alike, and `refresh` finds nothing sqsync did not record.
    func testBatchThatBreaksAConstraintIsAppliedRowByRow() throws {
        let a = try sandbox.replica("a", schema: schema, track: ["items"])
        let b = try sandbox.clone(a, "b")
        try insertRows(a, 0..<180)
        // b: a concurrent row holding a's code 70, and a's row 120 written while untracked.
        try b.database.execute("INSERT INTO items VALUES ('local', 'code 70', 1, 1.5, NULL)")
        try b.fold()
        try b.database.setTriggersEnabled(false)
        try b.database.execute("INSERT INTO items VALUES ('k00120', 'stale', 0, 0, 'stale')")
        try b.database.setTriggersEnabled(true)

        let summary = try sync(from: a, to: b)
        XCTAssertEqual(summary.tables["items"]?.inserted ?? 0, 179, "every row but the one already there is inserted")
        XCTAssertEqual(try conflictCount(b), 1, "one side of the UNIQUE clash is logged")
        try syncBoth(b, a)
        try assertSameRows([a, b], table: "items")
        XCTAssertEqual(try b.database.scalar("SELECT code FROM items WHERE id = 'k00120'"), .text("code 120"))
        for replica in [a, b] {
            let refreshed = try replica.refresh()
            XCTAssertEqual(
                [refreshed.capturedInserts, refreshed.capturedUpdates, refreshed.capturedDeletes], [0, 0, 0],
                "\(replica.name): every checksum recorded matches its row")
        }
    }

    /// An updated row's checksum comes from its UPDATE where SQLite stores the new values as
    /// given, and is read back from the row where it may not: a table that handles conflicts
    /// itself, a column whose affinity here converts what the sender stored (text that looks
    /// like a number, sent by a replica that declares the column TEXT, into one declared
    /// INTEGER here), a connection that enforces foreign keys. Either way it is the checksum
    /// of the row as stored: `refresh` finds nothing sqsync did not record.
    func testUpdatedRowsChecksumIsTheStoredRows() throws {
        let a = try sandbox.replica(
            "a",
            schema: schema + """
                CREATE TABLE fallback (id TEXT PRIMARY KEY, v TEXT NOT NULL ON CONFLICT REPLACE DEFAULT 'x', n INTEGER);
                CREATE TABLE pairs (a TEXT, b INTEGER, v TEXT, w REAL, PRIMARY KEY (a, b)) WITHOUT ROWID;
                """, track: ["items", "fallback", "pairs"])
        let b = try sandbox.clone(a, "b")
        try insertRows(a, 0..<60)
        try a.database.execute(
            """
            INSERT INTO fallback VALUES ('f1', 'one', 1), ('f2', 'two', 2);
            INSERT INTO pairs VALUES ('p', 1, 'one', 1.5), ('p', 2, 'two', NULL), ('q', 1, 'three', 0);
            """)
        try sync(from: a, to: b)
        try a.database.execute(
            """
            UPDATE items SET qty = qty + 100 WHERE id < 'k00020';
            UPDATE items SET price = 3 WHERE id = 'k00022';
            UPDATE items SET price = 2.5, note = 'text ' || id, code = NULL WHERE id BETWEEN 'k00030' AND 'k00039';
            UPDATE items SET note = x'0102' WHERE id = 'k00040';
            UPDATE fallback SET n = n + 10;
            UPDATE pairs SET w = 2.5 WHERE b = 1;
            UPDATE pairs SET v = 'changed', w = 7.25 WHERE a = 'p' AND b = 2;
            """)
        let summary = try sync(from: a, to: b)
        XCTAssertEqual(summary.tables["items"]?.updated, 32)
        XCTAssertEqual(summary.tables["fallback"]?.updated, 2)
        XCTAssertEqual(summary.tables["pairs"]?.updated, 3)
        for table in ["items", "fallback", "pairs"] { try assertSameRows([a, b], table: table) }
        XCTAssertEqual(try b.refresh().capturedUpdates, 0, "every checksum recorded matches its row")

        let sender = try sandbox.replica("sender", schema: "CREATE TABLE m (id TEXT PRIMARY KEY, n TEXT);", track: ["m"])
        let receiver = try sandbox.replica("receiver", schema: "CREATE TABLE m (id TEXT PRIMARY KEY, n INTEGER);", track: ["m"])
        try sender.database.execute("INSERT INTO m VALUES ('k', 'first')")
        try sync(from: sender, to: receiver)
        for (value, storedAsGiven) in [("'seven'", true), ("'7'", false), ("x'07'", true)] {
            try sender.database.execute("UPDATE m SET n = \(value) WHERE id = 'k'")
            XCTAssertEqual(try sync(from: sender, to: receiver).tables["m"]?.updated, 1, value)
            XCTAssertEqual(receiver.checksumNote.calls, storedAsGiven ? 1 : 0, "\(value): handed over by the UPDATE")
            XCTAssertEqual(try receiver.refresh().capturedUpdates, 0, value)
        }
        XCTAssertEqual(try receiver.database.scalar("SELECT typeof(n) FROM m"), .text("blob"))

        // A foreign key action may change the row after its UPDATE's WHERE clause: where they
        // are enforced, the checksum is read back. Here the row refers to itself.
        let nodes = "CREATE TABLE n (id TEXT PRIMARY KEY, code TEXT UNIQUE, parent TEXT REFERENCES n (code) ON UPDATE CASCADE);"
        let writer = try sandbox.replica("writer", schema: nodes, track: ["n"])
        let enforcing = try sandbox.replica("enforcing", schema: nodes, track: ["n"])
        try writer.database.execute("INSERT INTO n VALUES ('x', 'c', 'c')")
        try sync(from: writer, to: enforcing)
        try enforcing.database.execute("PRAGMA foreign_keys = ON")
        try writer.database.execute("UPDATE n SET code = 'd' WHERE id = 'x'")
        try sync(from: writer, to: enforcing)
        XCTAssertEqual(try enforcing.database.valueRows("SELECT code, parent FROM n"), [[.text("d"), .text("d")]], "cascaded")
        XCTAssertEqual(enforcing.checksumNote.calls, 0)
        XCTAssertEqual(try enforcing.refresh().capturedUpdates, 0)
    }

    /// An import writes no change notes: a relay forwards another replica's changes as their
    /// origin signed them (Bundle's segment store), never reads them back out of its tables,
    /// so `_sqsync_changes` holds a replica's own changes only.
    func testImportsWriteNoChangeNotes() throws {
        let a = try sandbox.replica("a", schema: schema, track: ["items"])
        let b = try sandbox.clone(a, "b")
        let c = try sandbox.clone(a, "c")
        try sync(from: c, to: b)
        try insertRows(a, 0..<120)
        try a.database.execute("UPDATE items SET qty = -1 WHERE id = 'k00007'")
        try sync(from: a, to: b)
        XCTAssertEqual(try b.database.int64(#"SELECT count(*) FROM "_sqsync_changes""#), 0)
        XCTAssertEqual(try a.database.int64(#"SELECT count(*) FROM "_sqsync_changes""#), 121, "a's own, which c lacks")
        try sync(from: b, to: c)
        try assertSameRows([a, b, c], table: "items")
    }
}
