import Foundation
import SQLiteDatabase
import TestSupport
import XCTest

@testable import ChangeLog

/// Trigger capture: what each kind of write leaves in `_sqsync_rows` and `_sqsync_cells`,
/// whoever makes it, and what `track`, `doctor`, `refresh` and `clone` do.
final class CaptureTests: XCTestCase {
    private var sandbox: Sandbox!

    override func setUpWithError() throws { sandbox = try Sandbox() }
    override func tearDown() { sandbox = nil }

    private let itemsSchema = "CREATE TABLE items (id TEXT PRIMARY KEY, name TEXT, qty INTEGER, note);"

    // MARK: Metadata readers

    private func tid(_ replica: Replica, _ table: String) throws -> Int64 {
        try XCTUnwrap(replica.database.scalar(#"SELECT "tid" FROM "_sqsync_tables" WHERE "name" = ?"#, .text(table))?.int64Value)
    }

    private func cid(_ replica: Replica, _ table: String, _ column: String) throws -> Int64 {
        try XCTUnwrap(
            replica.database.scalar(
                #"SELECT "cid" FROM "_sqsync_columns" WHERE "tid" = ? AND "name" = ?"#, .integer(tid(replica, table)),
                .text(column))?.int64Value)
    }

    /// (cl, seq) of a row's entry, nil when there is none. Reads, like every reader of the
    /// metadata, after folding the capture log.
    private func rowEntry(_ replica: Replica, _ table: String, _ key: SQLValue) throws -> (cl: Int64, seq: Int64)? {
        try replica.fold()
        return try storedRowEntry(replica, table, key)
    }

    private func storedRowEntry(_ replica: Replica, _ table: String, _ key: SQLValue) throws -> (cl: Int64, seq: Int64)? {
        guard
            let row = try replica.database.valueRows(
                #"SELECT "cl", "seq" FROM "_sqsync_rows" WHERE "tid" = ? AND "pk" = ?"#, .integer(tid(replica, table)), key
            ).first
        else { return nil }
        return (row[0].int64Value ?? -1, row[1].int64Value ?? -1)
    }

    /// cid → seq of a row's cell entries.
    private func cells(_ replica: Replica, _ table: String, _ key: SQLValue) throws -> [Int64: Int64] {
        try replica.fold()
        var result: [Int64: Int64] = [:]
        let tid = SQLValue.integer(try tid(replica, table))
        for entry in try cellEntries(of: replica) where entry[0] == tid && entry[1] == key {
            result[entry[2].int64Value ?? -1] = entry[5].int64Value ?? -1
        }
        return result
    }

    // MARK: Every kind of write, from two writers

    /// Runs the same script of writes through `write` and checks the metadata after each.
    private func checkCapture(_ replica: Replica, write: (String) throws -> Void) throws {
        let name = try cid(replica, "items", "name"), qty = try cid(replica, "items", "qty"),
            note = try cid(replica, "items", "note")
        var seq = try clock(of: replica).seq
        func expectSeq(advancedBy count: Int64, _ what: String, line: UInt = #line) throws {
            let now = try clock(of: replica).seq
            XCTAssertEqual(now, seq + count, "sequence after \(what)", line: line)
            seq = now
        }

        try write("INSERT INTO items VALUES ('a', 'apple', 1, NULL)")
        try expectSeq(advancedBy: 1, "insert")
        XCTAssertEqual(try rowEntry(replica, "items", .text("a")).map { [$0.cl, $0.seq] }, [1, seq])
        XCTAssertEqual(try cells(replica, "items", .text("a")), [:], "an insert needs no cell entries")

        try write("UPDATE items SET qty = 2 WHERE id = 'a'")
        try expectSeq(advancedBy: 1, "update of one column")
        XCTAssertEqual(try cells(replica, "items", .text("a")), [qty: seq], "only the changed column gets a cell")

        try write("UPDATE items SET name = 'apple', qty = 2 WHERE id = 'a'")
        try expectSeq(advancedBy: 0, "an update that changes nothing")

        try write("UPDATE items SET name = 'apricot', note = x'00ff', qty = 2 WHERE id = 'a'")
        try expectSeq(advancedBy: 1, "update of two columns (one change of one row)")
        let afterTwo = try cells(replica, "items", .text("a"))
        XCTAssertEqual(Set(afterTwo.keys), [name, qty, note])
        XCTAssertEqual(Set([afterTwo[name]!, afterTwo[note]!]), [seq])
        XCTAssertEqual(afterTwo[qty], seq - 1, "an unchanged column keeps its stamp")

        try write("UPDATE items SET note = 'x' WHERE id = 'a'")
        try expectSeq(advancedBy: 1, "a change of storage class")
        try write("UPDATE items SET note = 1 WHERE id = 'a'")
        try expectSeq(advancedBy: 1, "text to integer")
        try write("UPDATE items SET note = 1.0 WHERE id = 'a'")
        try expectSeq(advancedBy: 1, "1 to 1.0, which `IS` calls equal, in a column without a declared type")
        try write("UPDATE items SET qty = 2.0 WHERE id = 'a'")
        try expectSeq(advancedBy: 0, "2.0 written to an INTEGER column, which stores it as the 2 it holds")

        try write("DELETE FROM items WHERE id = 'a'")
        try expectSeq(advancedBy: 1, "delete")
        XCTAssertEqual(try rowEntry(replica, "items", .text("a")).map { [$0.cl, $0.seq] }, [2, seq])
        // The deleted row's column entries carry nothing any more: a peer gets the deletion alone.
        let deletion = try changeSet(from: replica, since: Knowledge()).changes.filter { $0.key == [.text("a")] }
        XCTAssertEqual(deletion.map(\.causalLength), [2])
        XCTAssertEqual(deletion.first?.columns, [])
        XCTAssertEqual(deletion.first?.rowStamp?.seq, seq)

        try write("INSERT INTO items VALUES ('a', 'again', 3, NULL)")
        try expectSeq(advancedBy: 1, "re-insert")
        XCTAssertEqual(try rowEntry(replica, "items", .text("a")).map { [$0.cl, $0.seq] }, [3, seq])
        XCTAssertEqual(try cells(replica, "items", .text("a")), [:], "a new life forgets the last life's cells")

        // A primary-key change is a delete of the old key and an insert of the new one.
        try write("INSERT INTO items VALUES ('b', 'banana', 5, NULL)")
        try expectSeq(advancedBy: 1, "insert b")
        try write("UPDATE items SET id = 'c', qty = 6 WHERE id = 'b'")
        try expectSeq(advancedBy: 2, "key change")
        XCTAssertEqual(try rowEntry(replica, "items", .text("b"))?.cl, 2)
        XCTAssertEqual(try rowEntry(replica, "items", .text("c"))?.cl, 1)
        XCTAssertEqual(try cells(replica, "items", .text("c")), [:])

        // INSERT OR REPLACE of an existing row: the row stays alive and every column carries
        // the new write's stamp.
        try write("UPDATE items SET qty = 7 WHERE id = 'c'")
        try expectSeq(advancedBy: 1, "update c")
        try write("INSERT OR REPLACE INTO items VALUES ('c', 'cherry', 8, 'r')")
        XCTAssertGreaterThan(try clock(of: replica).seq, seq, "INSERT OR REPLACE is captured")
        seq = try clock(of: replica).seq
        let replaced = try XCTUnwrap(rowEntry(replica, "items", .text("c")))
        XCTAssertEqual(replaced.cl % 2, 1, "the replaced row is alive")
        XCTAssertEqual(replaced.seq, seq)
        XCTAssertEqual(try cells(replica, "items", .text("c")), [:], "older cell stamps are superseded by the replace")

        // Upsert: the DO UPDATE part is an update of the columns it sets.
        try write("INSERT INTO items VALUES ('c', 'ignored', 9, NULL) ON CONFLICT (id) DO UPDATE SET qty = excluded.qty")
        try expectSeq(advancedBy: 1, "upsert")
        XCTAssertEqual(try cells(replica, "items", .text("c")), [qty: seq])
        XCTAssertEqual(try rowEntry(replica, "items", .text("c"))?.cl, replaced.cl)
        try write("INSERT INTO items VALUES ('d', 'date', 1, NULL) ON CONFLICT (id) DO UPDATE SET qty = excluded.qty")
        try expectSeq(advancedBy: 1, "upsert that inserts")
        XCTAssertEqual(try rowEntry(replica, "items", .text("d"))?.cl, 1)

        XCTAssertEqual(try replica.doctor(), [])
        XCTAssertEqual(
            try rows(of: replica, table: "items"),
            [
                [.text("a"), .text("again"), .integer(3), .null],
                [.text("c"), .text("cherry"), .integer(9), .text("r")],
                [.text("d"), .text("date"), .integer(1), .null],
            ])

        // What was captured is enough for a peer to rebuild the table.
        let peer = try sandbox.replica("peer-\(replica.name)", schema: itemsSchema, track: ["items"])
        try sync(from: replica, to: peer)
        try assertSameRows([replica, peer], table: "items")
    }

    func testCaptureThroughOwnConnection() throws {
        let replica = try sandbox.replica("own", schema: itemsSchema, track: ["items"])
        try checkCapture(replica) { try replica.database.execute($0) }
    }

    func testCaptureThroughSQLiteShell() throws {
        let replica = try sandbox.replica("shell", schema: itemsSchema, track: ["items"])
        try checkCapture(replica) { try sqlite3Shell(replica.path, $0) }
    }

    /// Only a column that can hold both 1 and 1.0 compares storage classes in its trigger
    /// (SQLite's affinity rules): a STRICT table's ANY column is one.
    func testStorageClassIsComparedWhereAColumnCanHoldBoth() throws {
        let anyClass = ["", " ", "BLOB", "blob", "ANY", "any"]
        let oneClass = ["INTEGER", "INT", "VARCHAR(20)", "TEXT", "CLOB", "REAL", "DOUBLE PRECISION", "FLOAT", "NUMERIC", "DATE",
            "BOOLEAN", "FLOATING POINT", "BLOBINT"]
        for type in anyClass {
            XCTAssertTrue(ColumnInfo(cid: 1, name: "v", primaryKeyPosition: 0, declaredType: type).holdsAnyStorageClass, type)
        }
        for type in oneClass {
            XCTAssertFalse(ColumnInfo(cid: 1, name: "v", primaryKeyPosition: 0, declaredType: type).holdsAnyStorageClass, type)
        }

        let replica = try sandbox.replica(
            "strict", schema: "CREATE TABLE s (id TEXT PRIMARY KEY, v ANY, n REAL) STRICT;", track: ["s"])
        try replica.database.execute("INSERT INTO s VALUES ('k', 1, 1)")
        try replica.fold()
        let before = try clock(of: replica).seq
        try sqlite3Shell(replica.path, "UPDATE s SET v = 1.0 WHERE id = 'k';")
        try replica.fold()
        XCTAssertEqual(try clock(of: replica).seq, before + 1, "1 to 1.0 in an ANY column is a change")
        try sqlite3Shell(replica.path, "UPDATE s SET n = 1 WHERE id = 'k';")
        try replica.fold()
        XCTAssertEqual(try clock(of: replica).seq, before + 1, "a REAL column stores 1 as the 1.0 it holds")
        let peer = try sandbox.replica("strict-peer", schema: "CREATE TABLE s (id TEXT PRIMARY KEY, v ANY, n REAL) STRICT;", track: ["s"])
        try sync(from: replica, to: peer)
        XCTAssertEqual(try peer.database.scalar("SELECT typeof(v) FROM s"), .text("real"))
    }

    /// SQLite lets a one-column TEXT key be NULL; the triggers refuse such a write with one
    /// line, and a NULL key already in the log (from before `track`) never stops the fold.
    func testNullKeysAreRefusedAndNeverStopTheFold() throws {
        let replica = try sandbox.replica("null-key", schema: itemsSchema, track: ["items"])
        try replica.database.execute("INSERT INTO items VALUES ('a', 'apple', 1, NULL)")
        XCTAssertThrowsError(try sqlite3Shell(replica.path, "INSERT INTO items VALUES (NULL, 'nothing', 1, NULL);")) { error in
            XCTAssertTrue("\(error)".contains("cannot track a row whose primary key is NULL"), "\(error)")
        }
        XCTAssertThrowsError(try replica.database.execute("UPDATE items SET id = NULL WHERE id = 'a'"))
        XCTAssertEqual(try replica.database.scalar("SELECT count(*) FROM items WHERE id IS NULL"), .integer(0))
        let tid = try tid(replica, "items")
        try replica.database.execute(#"INSERT INTO "_sqsync_log" ("tid", "op", "pk", "stamp") VALUES (\#(tid), 0, NULL, 1)"#)
        XCTAssertNoThrow(try replica.fold())
        XCTAssertEqual(try clock(of: replica).seq, 1, "the insert of 'a' only")
        XCTAssertEqual(try storedRowEntry(replica, "items", .text("a"))?.cl, 1)
    }

    /// Only columns that can hold 1 and 1.0 pay for comparing storage classes.
    func testTypedColumnsCompareValuesOnly() throws {
        let replica = try sandbox.replica("typed", schema: itemsSchema, track: ["items"])
        let update = try XCTUnwrap(
            replica.database.scalar("SELECT sql FROM sqlite_schema WHERE name = '_sqsync_items_after_update'")?.stringValue)
        XCTAssertTrue(update.contains(#"typeof(OLD."note")"#), update)
        XCTAssertFalse(update.contains(#"typeof(OLD."qty")"#), update)
        XCTAssertFalse(update.contains(#"typeof(OLD."name")"#), update)
    }

    func testRepeatedUpdatesKeepOneCellEntry() throws {
        let replica = try sandbox.replica("bounded", schema: itemsSchema, track: ["items"])
        try replica.database.execute("INSERT INTO items VALUES ('a', 'apple', 0, NULL)")
        let before = try clock(of: replica).seq
        for value in 1...1000 {
            try replica.database.run("UPDATE items SET qty = ? WHERE id = 'a'", .integer(Int64(value)))
            if value % 100 == 0 { try replica.fold() }  // numbered or not, one entry
        }
        let after = try clock(of: replica).seq
        XCTAssertGreaterThan(after, before)
        XCTAssertEqual(try cellEntries(of: replica).count, 1)
        XCTAssertEqual(try replica.database.scalar(#"SELECT count(*) FROM "_sqsync_rows""#)?.int64Value, 1)
        XCTAssertEqual(try cells(replica, "items", .text("a")).values.first, after)
        let exported = try changeSet(from: replica, since: Knowledge([replica.knowledgeID: before])).changes
        XCTAssertEqual(exported.count, 1)
        XCTAssertEqual(exported.first?.columns.map(\.value), [.integer(1000)], "only the last value travels")
    }

    /// Writing -0.0 over 0.0 changes the stored bits (REAL must round-trip bit for bit), but
    /// `OLD.v IS NOT NEW.v` treats them as equal, so the change is never captured.
    /// A program that embeds ChangeLog exports through `ChangeExporter.snapshot`, which must
    /// see the writes made so far although the triggers leave them unnumbered.
    func testExporterSnapshotSeesLocalWrites() throws {
        let replica = try sandbox.replica("embedded", schema: itemsSchema, track: ["items"])
        try replica.database.execute("INSERT INTO items VALUES ('a', 'apple', 1, NULL)")
        let changes = try ChangeExporter.snapshot(of: replica, ownChangesAfter: 0) { exporter in
            var changes: [RowChange] = []
            try exporter.forEachChange { changes.append($0) }
            return changes
        }
        XCTAssertEqual(changes.map(\.key), [[.text("a")]], "the insert is exported")
    }

    // MARK: track

    func testTrackRefusesUnsupportedTables() throws {
        let replica = try sandbox.replica(
            "refuse",
            schema: """
                CREATE TABLE nokey (a TEXT, b TEXT);
                CREATE TABLE intkey (id INTEGER PRIMARY KEY, v TEXT);
                CREATE TABLE intkey2 (id integer primary key, v TEXT);
                CREATE TABLE wr (id INTEGER PRIMARY KEY, v TEXT) WITHOUT ROWID;
                """)
        func kind(_ body: () throws -> Void) -> ChangeLogError.Kind? {
            do { try body(); return nil } catch let error as ChangeLogError { return error.kind } catch { return nil }
        }
        XCTAssertEqual(kind { try replica.track(["nokey"], allowIntegerPrimaryKey: true) }, .unsupportedTable)
        XCTAssertEqual(kind { try replica.track(["intkey"], allowIntegerPrimaryKey: false) }, .unsupportedTable)
        XCTAssertEqual(kind { try replica.track(["intkey2"], allowIntegerPrimaryKey: false) }, .unsupportedTable)
        XCTAssertEqual(kind { try replica.track(["missing"], allowIntegerPrimaryKey: false) }, .noSuchTable)
        XCTAssertEqual(kind { try replica.track(["_sqsync_rows"], allowIntegerPrimaryKey: true) }, .noSuchTable)
        XCTAssertEqual(try replica.trackedTableNames(), [], "a refused track installs nothing")
        XCTAssertEqual(try replica.database.scalar("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger'")?.int64Value, 0)

        try replica.track(["intkey"], allowIntegerPrimaryKey: true)
        try replica.track(["wr"], allowIntegerPrimaryKey: false)  // not a rowid alias: allowed
        XCTAssertEqual(try replica.trackedTableNames(), ["intkey", "wr"])
    }

    func testExistingRowsBecomeChangesOnTrack() throws {
        let schema = itemsSchema
        let replica = try sandbox.replica("existing", schema: schema)
        for index in 0..<5 {
            try replica.database.run(
                "INSERT INTO items VALUES (?, ?, ?, NULL)", .text("k\(index)"), .text("n\(index)"), .integer(Int64(index)))
        }
        let captured = try replica.track(["items"], allowIntegerPrimaryKey: false)
        XCTAssertEqual(captured.map(\.table), ["items"])
        XCTAssertEqual(captured.map(\.rows), [5])
        XCTAssertEqual(try clock(of: replica).seq, 5)
        XCTAssertEqual(
            try replica.database.valueRows(#"SELECT "cl", "seq" FROM "_sqsync_rows" ORDER BY "seq""#),
            (1...5).map { [.integer(1), .integer(Int64($0))] })
        XCTAssertEqual(
            try replica.track(["items"], allowIntegerPrimaryKey: false).map(\.rows), [0], "tracking again captures nothing twice")
        XCTAssertEqual(try replica.doctor(), [])

        let peer = try sandbox.replica("existing-peer", schema: schema, track: ["items"])
        try sync(from: replica, to: peer)
        XCTAssertEqual(try rows(of: peer, table: "items").count, 5)
        try assertSameRows([replica, peer], table: "items")
    }

    // MARK: Schemas other tools refuse

    func testIdentifiersThatNeedQuoting() throws {
        let schema = #"CREATE TABLE "order items" ("id" TEXT PRIMARY KEY, """qty""" INTEGER, "select" TEXT);"#
        let replica = try sandbox.replica("quoted", schema: schema, track: ["order items"])
        let peer = try sandbox.clone(replica, "quoted-peer")
        XCTAssertEqual(try replica.doctor(), [])
        try replica.database.execute(#"INSERT INTO "order items" VALUES ('o1', 1, 'from'), ('o2', 2, 'where')"#)
        try sqlite3Shell(
            replica.path,
            #"UPDATE "order items" SET """qty""" = 10 WHERE "id" = 'o1'; UPDATE "order items" SET "select" = 'x' WHERE "id" = 'o2';"#
        )
        XCTAssertEqual(try cells(replica, "order items", .text("o1")).keys.sorted(), [try cid(replica, "order items", "\"qty\"")])
        try sync(from: replica, to: peer)
        XCTAssertEqual(
            try rows(of: peer, table: "order items"),
            [
                [.text("o1"), .integer(10), .text("from")], [.text("o2"), .integer(2), .text("x")],
            ])
        try peer.database.execute(#"DELETE FROM "order items" WHERE "id" = 'o1'; UPDATE "order items" SET """qty""" = 20"#)
        try sync(from: peer, to: replica)
        XCTAssertEqual(try rows(of: replica, table: "order items"), [[.text("o2"), .integer(20), .text("x")]])
        XCTAssertEqual(try replica.doctor(), [])
    }

    func testCompositeKeysWithRealBlobAndAwkwardText() throws {
        let schema = "CREATE TABLE parts (a TEXT, b REAL, c BLOB, v, PRIMARY KEY (a, b, c));"
        let replica = try sandbox.replica("composite", schema: schema, track: ["parts"])
        let peer = try sandbox.clone(replica, "composite-peer")
        let keys: [[SQLValue]] = [
            [.text("it's, a \"test\""), .real(0.1 + 0.2), .blob([0x00, 0x27, 0x2C, 0xFF])],
            [.text("','"), .real(-1.5e300), .blob([])],
            [.text(""), .real(2.0), .blob(Array("X'00'".utf8))],
            [.text("naïve, ok"), .real(Double("1e-310")!), .blob([0x2C])],
        ]
        for (index, key) in keys.enumerated() {
            try replica.database.run("INSERT INTO parts VALUES (?, ?, ?, ?)", key + [.integer(Int64(index))])
        }
        try replica.fold()
        XCTAssertEqual(try replica.database.scalar(#"SELECT count(*) FROM "_sqsync_rows" WHERE "cl" = 1"#)?.int64Value, 4)
        try sync(from: replica, to: peer)
        try assertSameRows([replica, peer], table: "parts")

        try replica.database.run("UPDATE parts SET v = 'changed' WHERE a = ? AND b = ? AND c = ?", keys[0])
        for key in keys.dropFirst(2) { try replica.database.run("DELETE FROM parts WHERE a = ? AND b = ? AND c = ?", key) }
        try sync(from: replica, to: peer)
        XCTAssertEqual(try rows(of: peer, table: "parts").count, 2)
        try assertSameRows([replica, peer], table: "parts")
        try peer.database.run("DELETE FROM parts WHERE a = ? AND b = ? AND c = ?", keys[1])
        try sync(from: peer, to: replica)
        XCTAssertEqual(try rows(of: replica, table: "parts"), [keys[0] + [.text("changed")]])
        XCTAssertEqual(try replica.doctor(), [])
        XCTAssertEqual(try peer.doctor(), [])
    }

    func testWithoutRowIDTables() throws {
        let schema = """
            CREATE TABLE wr (k TEXT, n INTEGER, v, PRIMARY KEY (k, n)) WITHOUT ROWID;
            CREATE TABLE wr1 (id INTEGER PRIMARY KEY, v) WITHOUT ROWID;
            """
        let replica = try sandbox.replica("wr", schema: schema, track: ["wr", "wr1"])
        let peer = try sandbox.clone(replica, "wr-peer")
        try replica.database.execute(
            """
            INSERT INTO wr VALUES ('a', 1, 'x'), ('a', 2, 'y'), ('b', 1, NULL);
            INSERT INTO wr1 VALUES (10, 'ten'), (-3, 'minus three');
            UPDATE wr SET v = 'z' WHERE k = 'a' AND n = 2;
            DELETE FROM wr WHERE k = 'b';
            UPDATE wr1 SET id = 11 WHERE id = 10;
            """)
        try sync(from: replica, to: peer)
        XCTAssertEqual(
            try rows(of: peer, table: "wr"), [[.text("a"), .integer(1), .text("x")], [.text("a"), .integer(2), .text("z")]])
        XCTAssertEqual(try rows(of: peer, table: "wr1"), [[.integer(-3), .text("minus three")], [.integer(11), .text("ten")]])
        XCTAssertEqual(try peer.doctor(), [])
    }

    // MARK: doctor and refresh

    func testDoctorReportsSchemaDriftUntilRefresh() throws {
        let replica = try sandbox.replica("doctor", schema: itemsSchema, track: ["items"])
        XCTAssertEqual(try replica.doctor(), [])

        try replica.database.execute("ALTER TABLE items ADD COLUMN colour TEXT")
        let afterAlter = try replica.doctor()
        XCTAssertFalse(afterAlter.isEmpty)
        XCTAssertTrue(afterAlter.contains { $0.contains("colour") }, "\(afterAlter)")
        XCTAssertEqual(try replica.refresh().tables, ["items"])
        XCTAssertEqual(try replica.doctor(), [])
        try replica.database.execute("INSERT INTO items VALUES ('a', 'n', 1, NULL, 'red')")
        try replica.database.execute("UPDATE items SET colour = 'blue'")
        XCTAssertEqual(try cells(replica, "items", .text("a")).keys.sorted(), [try cid(replica, "items", "colour")])

        try replica.database.execute(#"DROP TRIGGER "_sqsync_items_after_delete""#)
        let afterDrop = try replica.doctor()
        XCTAssertTrue(afterDrop.contains { $0.contains("_sqsync_items_after_delete") }, "\(afterDrop)")
        try replica.refresh()
        XCTAssertEqual(try replica.doctor(), [])
        try replica.database.execute("DELETE FROM items")
        XCTAssertEqual(try rowEntry(replica, "items", .text("a"))?.cl, 2, "the rebuilt delete trigger captures")
    }

    // MARK: clone

    func testCloneHasNewIdentitySameDataAndKnowledge() throws {
        let source = try sandbox.replica("source", schema: itemsSchema, track: ["items"])
        try source.database.execute("INSERT INTO items VALUES ('a', 'apple', 1, NULL), ('b', 'banana', 2, x'01')")
        try source.database.execute("UPDATE items SET qty = 3 WHERE id = 'a'")
        let copy = try sandbox.clone(source, "copy")
        XCTAssertNotEqual(copy.knowledgeID, source.knowledgeID)
        XCTAssertEqual(copy.name, "copy")
        XCTAssertEqual(try rows(of: copy, table: "items"), try rows(of: source, table: "items"))
        let sourceKnowledge = try source.knowledge()
        XCTAssertEqual(sourceKnowledge[source.knowledgeID], 3)
        XCTAssertTrue(try copy.knowledge().covers(sourceKnowledge), "the clone holds what its source held")
        XCTAssertEqual(try clock(of: copy).seq, 0)
        XCTAssertEqual(try copy.peers().map(\.knowledgeID), [source.knowledgeID])
        XCTAssertEqual(try copy.doctor(), [])

        // Nothing to send either way, and the clone's own writes are its own.
        XCTAssertEqual(try changeSet(from: source, for: copy).changes, [])
        try copy.database.execute("UPDATE items SET name = 'avocado' WHERE id = 'a'")
        XCTAssertEqual(try clock(of: copy).seq, 1)
        XCTAssertEqual(try copy.knowledge()[copy.knowledgeID], 1)
        try sync(from: copy, to: source)
        XCTAssertEqual(try rows(of: source, table: "items")[0][1], .text("avocado"))
        XCTAssertThrowsError(try sandbox.clone(source, "copy"), "clone refuses to overwrite a file")
    }
}
