import Foundation
import SQLiteDatabase
import TestSupport
import XCTest

@testable import Bundle
@testable import ChangeLog

/// Reaches (docs/SCOPES.md, "Reach") between real bundle files: hq (an admin key, every row),
/// m (scope a, b) and s (scope b), one table labelled by its `label` column, and `notes`,
/// unlabelled until a test labels it.
final class ReachTests: XCTestCase {
    private var family: ReplicaFamily!
    private var replicas: [String: Replica] { family.replicas }
    private var keys: [String: SigningKey] { family.keys }
    private var trust: AllowedSigners { family.trust }
    private var directory: String { family.directory }

    override func setUpWithError() throws {
        family = try ReplicaFamily(
            ["hq", "m", "s"],
            schema: """
                CREATE TABLE items (id TEXT PRIMARY KEY, label TEXT NOT NULL, v INTEGER);
                CREATE TABLE notes (id TEXT PRIMARY KEY, label TEXT, v INTEGER);
                """, tables: ["items", "notes"], folder: "sqsync-reach")
        let hq = replicas["hq"]!
        for act in [
            AdminAct.label(table: "items", expression: "label"),
            .scope(replica: replicas["m"]!.knowledgeID, labels: ["a", "b"]),
            .scope(replica: replicas["s"]!.knowledgeID, labels: ["b"]),
        ] {
            try hq.issueAdminStatement(try SignedAdminStatement.sign(act, key: keys["hq"]!).stored)
        }
        try everyPair()
    }

    override func tearDown() { family?.removeFiles() }

    private func send(_ from: String, _ to: String) throws {
        let sender = replicas[from]!, receiver = replicas[to]!
        let exported = try BundleExchange.export(
            replica: sender, since: try receiver.knowledge(), key: keys[from]!, to: directory + "/bundles", intoDirectory: true,
            receiver: receiver.knowledgeID, scope: try sender.adminRules().scope(of: receiver.knowledgeID))
        _ = try BundleExchange.importBundle(path: exported.path, into: receiver, trust: trust)
    }

    private func everyPair() throws {
        for _ in 0..<2 { for from in ["hq", "m", "s"] { for to in ["hq", "m", "s"] where from != to { try send(from, to) } } }
    }

    private func ids(_ name: String, table: String = "items") throws -> [String] {
        try replicas[name]!.database.valueRows("SELECT id FROM \(table) ORDER BY id").compactMap { $0[0].stringValue }
    }

    private func labelNotes(at name: String = "hq") throws {
        try replicas[name]!.issueAdminStatement(
            try SignedAdminStatement.sign(.label(table: "notes", expression: "label"), key: keys["hq"]!).stored)
    }

    /// Keys `name` has any trace of: entries, ghosts, reaches.
    private func keysKnown(_ name: String) throws -> Set<String> {
        Set(
            try replicas[name]!.database.valueRows(
                #"SELECT sqsync_stored_key("pk") FROM "_sqsync_rows" UNION SELECT sqsync_stored_key("pk") FROM "_sqsync_reach""#
            ).compactMap { $0[0].stringValue })
    }

    private func reach(_ name: String, _ id: String, table: String = "items") throws -> [String]? {
        try replicas[name]!.database.valueRows(
            #"""
            SELECT x."labels" FROM "_sqsync_reach" x JOIN "_sqsync_tables" t ON t."tid" = x."tid"
            WHERE t."name" = ? AND sqsync_stored_key(x."pk") = ?
            """#, .text(table), .text(id)
        ).first?[0].stringValue.map { Reach.read(stored: $0)!.sorted }
    }

    /// A row of label a, moved to c and deleted at hq: its key never reaches s, whose scope
    /// never held it; m saw it come and go. Each replica records the row's reach.
    func testARowNeverInAScopeNeverReachesIt() throws {
        try replicas["hq"]!.database.execute("INSERT INTO items VALUES ('x', 'a', 1)")
        try everyPair()
        try replicas["hq"]!.database.execute("UPDATE items SET label = 'c' WHERE id = 'x'")
        try everyPair()
        XCTAssertEqual(try ids("m"), [])
        try replicas["hq"]!.database.execute("DELETE FROM items WHERE id = 'x'")
        try everyPair()
        XCTAssertEqual(try reach("hq", "x"), ["a", "c"])
        XCTAssertEqual(try reach("m", "x"), ["a", "c"], "m received the departure and the deletion")
        XCTAssertFalse(try keysKnown("s").contains("x"), "s learned a key of rows it never could hold")
        XCTAssertEqual(try replicas["hq"]!.purge(dryRun: false).tombstones, 1)
    }

    /// A new label expression adds each held row's new label to its reach: readers of the old
    /// value may still hold it, readers of the new one will. Where it is issued, rows whose
    /// label it changes start new lives, and reach their new readers whole.
    func testANewLabelJoinsTheRowsNewLabelToItsReach() throws {
        try replicas["hq"]!.database.execute("INSERT INTO items VALUES ('x', 'a', 9)")
        try everyPair()
        XCTAssertEqual(try reach("hq", "x"), ["a"])
        XCTAssertEqual(try reach("m", "x"), ["a"])
        try replicas["hq"]!.issueAdminStatement(
            try SignedAdminStatement.sign(
                .label(table: "items", expression: "CASE WHEN v > 5 THEN 'b' ELSE label END"), key: keys["hq"]!
            ).stored)
        XCTAssertEqual(try reach("hq", "x"), ["a", "b"])
        XCTAssertEqual(try replicas["hq"]!.startNewLives(ofRowsRelabelledFrom: "label", in: "items"), 1)
        try everyPair()
        for name in ["hq", "m", "s"] { XCTAssertEqual(try reach(name, "x"), ["a", "b"], name) }
        XCTAssertEqual(try ids("s"), ["x"], "x is b now: s holds it")
        try replicas["hq"]!.database.execute("DELETE FROM items WHERE id = 'x'")
        try everyPair()
        for name in ["hq", "m", "s"] { XCTAssertEqual(try ids(name), [], name) }
    }

    /// hq moves a row of label a to c while m moves it to b; hq's move wins (a later clock),
    /// but it went out before hq knew of b, so not to s, which took m's. hq, merging m's
    /// move, announces the row again as its own new life, and s sees it leave.
    func testConcurrentMovesReachEveryReaderThatTookEither() throws {
        try replicas["hq"]!.database.execute("INSERT INTO items VALUES ('x', 'a', 1)")
        try everyPair()
        try replicas["m"]!.database.execute("UPDATE items SET label = 'b' WHERE id = 'x'")
        try replicas["m"]!.fold()
        // hq's move comes later by the clock (both clocks saw each other's in the exchanges).
        usleep(20_000)
        try replicas["hq"]!.database.execute("UPDATE items SET label = 'c' WHERE id = 'x'")
        try replicas["hq"]!.fold()
        try send("m", "s")
        XCTAssertEqual(try ids("s"), ["x"])
        try send("hq", "s")
        XCTAssertEqual(try ids("s"), ["x"], "hq's move went out before hq knew of b")
        try send("m", "hq")
        XCTAssertEqual(try reach("hq", "x"), ["a", "b", "c"])
        try send("hq", "s")
        XCTAssertEqual(try ids("s"), [], "hq's announcement reached s")
        try everyPair()
        for name in ["m", "s"] { XCTAssertEqual(try ids(name), [], name) }
        XCTAssertEqual(
            try replicas["hq"]!.database.valueRows("SELECT label FROM items"), [[.text("c")]])
    }

    /// The same race where hq deletes the row: the deletion went to readers of a only; m's
    /// move to b arrives at hq after it, loses (a later life ended there), and hq deletes the
    /// row again under its own stamp for s.
    func testADeletionRacingAMoveReachesTheMovesReaders() throws {
        try replicas["hq"]!.database.execute("INSERT INTO items VALUES ('x', 'a', 1)")
        try everyPair()
        try replicas["m"]!.database.execute("UPDATE items SET label = 'b' WHERE id = 'x'")
        try replicas["hq"]!.database.execute("UPDATE items SET label = 'c' WHERE id = 'x'")
        try replicas["hq"]!.database.execute("DELETE FROM items WHERE id = 'x'")
        try send("m", "s")
        try send("hq", "s")
        XCTAssertEqual(try ids("s"), ["x"])
        try send("m", "hq")
        try send("hq", "s")
        try everyPair()
        for name in ["hq", "m", "s"] { XCTAssertEqual(try ids(name), [], name) }
    }

    // MARK: rows from before a label (issue 54, item 7)

    /// Rows written before `notes` had a label get one when the label is issued (at hq) or
    /// first learned (at m and s): a deletion of an `a` row then waits for m only, and s,
    /// whose scope never held it under the label, holds nothing back.
    func testRowsHeldWhenALabelArrivesGetItsReach() throws {
        try replicas["hq"]!.database.execute("INSERT INTO notes VALUES ('n1', 'a', 1), ('n2', 'b', 2), ('n3', NULL, 3)")
        try everyPair()
        XCTAssertEqual(try ids("s", table: "notes"), ["n1", "n2", "n3"], "an unlabelled table reaches every reader")
        try labelNotes()
        XCTAssertEqual(try reach("hq", "n1", table: "notes"), ["a"])
        XCTAssertEqual(try reach("hq", "n2", table: "notes"), ["b"])
        XCTAssertEqual(try reach("hq", "n3", table: "notes"), [], "a NULL label is in no scope")
        try everyPair()
        XCTAssertEqual(try ids("s", table: "notes"), ["n2"])
        XCTAssertEqual(try reach("m", "n1", table: "notes"), ["a"])
        XCTAssertEqual(try reach("s", "n2", table: "notes"), ["b"])

        try replicas["hq"]!.database.execute("DELETE FROM notes WHERE id IN ('n1', 'n3')")
        try send("hq", "m")
        try send("m", "hq")
        XCTAssertEqual(try ids("m", table: "notes"), ["n2"])
        let purged = try replicas["hq"]!.purge(dryRun: false)
        XCTAssertEqual(purged.tombstones, 2, "s holds back a deletion its scope never held")
        XCTAssertEqual(purged.heldBackBy.map(\.name), [])
    }

    /// m moves a row from a to b before it knows `notes` is labelled, and s (scope b) takes
    /// m's version, while hq, which labelled the table, deletes the row: its deletion reaches
    /// readers of a only, not s. m's update reaches hq after the deletion and loses there; it
    /// was made where the label was not known, so it may have moved the row anywhere: hq
    /// announces the deletion again to every reader, and s lets the row go. Without that,
    /// s would keep m's version for good (m, scoped, announces nothing). When m learns the
    /// label, its update, which hq had not acknowledged yet, goes out again as a new life for
    /// readers of b (docs/SCOPES.md, "A new label expression"); that life is later than the
    /// deletion, so every replica ends holding it.
    func testAVersionMovedWhereTheLabelWasNotKnownStillSeesTheDeletion() throws {
        try replicas["hq"]!.database.execute("INSERT INTO notes VALUES ('y', 'a', 1)")
        try everyPair()
        try labelNotes()
        try replicas["hq"]!.database.execute("DELETE FROM notes WHERE id = 'y'")
        try replicas["m"]!.database.execute("UPDATE notes SET label = 'b' WHERE id = 'y'")
        try replicas["m"]!.fold()
        try send("m", "s")
        try send("hq", "s")
        XCTAssertEqual(try ids("s", table: "notes"), ["y"], "hq's deletion went to readers of a")
        XCTAssertEqual(try reach("s", "y", table: "notes"), ["b"])
        try send("m", "hq")
        XCTAssertNil(try reach("hq", "y", table: "notes"), "an update made without the label leaves the reach unknown")
        try send("hq", "s")
        XCTAssertEqual(try ids("s", table: "notes"), [], "hq announced the deletion again to every reader")
        try everyPair()
        let notes = "SELECT id, label, v FROM notes ORDER BY id"
        let atHQ = try replicas["hq"]!.database.valueRows(notes)
        XCTAssertEqual(atHQ, [[.text("y"), .text("b"), .integer(1)]])
        for name in ["m", "s"] { XCTAssertEqual(try replicas[name]!.database.valueRows(notes), atHQ, name) }
    }

    /// s, granted insert and update of b rows only, inserts a key it never held: elsewhere
    /// that key is an a row in its second life, which never reached s. hq denies the insert (a
    /// life over a row of a) and it loses there anyway (an earlier life), but s would keep it
    /// for good: hq gives the row a new life whose reach holds b, and s lets its insert go.
    func testAnInsertOfAKeyHeldElsewhereInALaterLifeLeavesItsWriter() throws {
        try replicas["hq"]!.issueAdminStatement(
            try SignedAdminStatement.sign(
                .grant(replica: replicas["s"]!.knowledgeID, table: "items", operations: [.insert, .update], labels: ["b"]),
                key: keys["hq"]!
            ).stored)
        try replicas["hq"]!.database.execute("INSERT INTO items VALUES ('x', 'a', 1)")
        try replicas["hq"]!.fold()
        try replicas["hq"]!.database.execute("DELETE FROM items WHERE id = 'x'")
        try replicas["hq"]!.fold()
        try replicas["hq"]!.database.execute("INSERT INTO items VALUES ('x', 'a', 2)")
        try everyPair()
        XCTAssertFalse(try keysKnown("s").contains("x"))
        try replicas["s"]!.database.execute("INSERT INTO items VALUES ('x', 'b', 3)")
        try everyPair()
        for name in ["hq", "m"] {
            XCTAssertEqual(try replicas[name]!.database.valueRows("SELECT label, v FROM items WHERE id = 'x'"), [[.text("a"), .integer(2)]], name)
        }
        XCTAssertEqual(try ids("s"), [], "s let its insert go")
    }
}
