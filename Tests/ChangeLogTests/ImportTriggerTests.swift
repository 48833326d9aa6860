import Foundation
import XCTest

@testable import ChangeLog

/// What an import does with triggers: sqsync's capture triggers stay silent for a peer's
/// changes (turned off, or their log rows removed when the app's own triggers must run), the
/// app's triggers still fire, capture resumes on the same connection afterwards, and opening
/// a replica gives older triggers this version's SQL.
final class ImportTriggerTests: XCTestCase {
    private var sandbox: Sandbox!

    override func setUpWithError() throws { sandbox = try Sandbox() }
    override func tearDown() { sandbox = nil }

    private let itemsSchema = "CREATE TABLE items (id TEXT PRIMARY KEY, name TEXT, qty INTEGER);"
    private let auditedSchema = """
        CREATE TABLE items (id TEXT PRIMARY KEY, name TEXT, qty INTEGER);
        CREATE TABLE audit (item TEXT, what TEXT);
        CREATE TRIGGER items_inserted AFTER INSERT ON items BEGIN INSERT INTO audit VALUES (NEW.id, 'insert'); END;
        CREATE TRIGGER items_updated AFTER UPDATE ON items BEGIN INSERT INTO audit VALUES (NEW.id, 'update'); END;
        """

    private func count(_ replica: Replica, _ sql: String) throws -> Int64 {
        try XCTUnwrap(replica.database.scalar(sql)?.int64Value)
    }

    /// This replica's own changes, its pending writes folded first.
    private func ownSeq(_ replica: Replica) throws -> Int64 {
        try replica.fold()
        return try replica.knowledge()[replica.knowledgeID]
    }

    /// Rows written by the import are the peer's changes, never the receiver's; a write made
    /// through the importing connection afterwards is captured.
    private func checkImport(schema: String, file: StaticString = #filePath, line: UInt = #line) throws -> (Replica, Replica) {
        let (a, b) = (try sandbox.replica("a", schema: schema, track: ["items"]), try sandbox.replica("b", schema: schema))
        try b.track(["items"], allowIntegerPrimaryKey: false)
        try a.database.execute("INSERT INTO items VALUES ('x', 'one', 1), ('y', 'two', 2), ('z', 'three', 3)")
        try sync(from: a, to: b)
        try a.database.execute("UPDATE items SET qty = 20 WHERE id = 'y'")
        try sync(from: a, to: b)

        XCTAssertEqual(try count(b, #"SELECT count(*) FROM "_sqsync_log""#), 0, file: file, line: line)
        XCTAssertEqual(try ownSeq(b), 0, "the import made no local change", file: file, line: line)
        XCTAssertEqual(try sync(from: b, to: a).changes, 0, file: file, line: line)
        XCTAssertEqual(try count(b, "SELECT qty FROM items WHERE id = 'y'"), 20, file: file, line: line)

        try b.database.execute("UPDATE items SET name = 'changed here' WHERE id = 'z'")
        XCTAssertEqual(try ownSeq(b), 1, "capture resumed on the importing connection", file: file, line: line)
        XCTAssertEqual(try sync(from: b, to: a).changes, 1, file: file, line: line)
        XCTAssertEqual(
            try a.database.scalar("SELECT name FROM items WHERE id = 'z'")?.stringValue, "changed here", file: file, line: line)
        return (a, b)
    }

    func testImportWithOnlySqsyncTriggers() throws {
        _ = try checkImport(schema: itemsSchema)
    }

    func testAppTriggersFireOnImportAndTheirLogRowsAreNotLocalChanges() throws {
        let (a, b) = try checkImport(schema: auditedSchema)
        // Three inserts and one update from a, then the local update on b.
        XCTAssertEqual(try count(b, "SELECT count(*) FROM audit WHERE what = 'insert'"), 3)
        XCTAssertEqual(try count(b, "SELECT count(*) FROM audit WHERE what = 'update'"), 2)
        XCTAssertEqual(try count(a, "SELECT count(*) FROM audit WHERE what = 'update'"), 2)
    }

    func testImportThatFailsLeavesCaptureOn() throws {
        let (a, b) = (try sandbox.replica("a", schema: itemsSchema, track: ["items"]), try sandbox.replica("b", schema: itemsSchema))
        try b.track(["items"], allowIntegerPrimaryKey: false)
        try a.database.execute("INSERT INTO items VALUES ('x', 'one', 1)")
        let set = try changeSet(from: a, for: b)
        struct Interrupted: Error {}
        XCTAssertThrowsError(
            try b.database.inTransaction {
                let applier = try ChangeMerger(replica: b, header: set.header)
                for change in set.changes { try applier.apply(change) }
                throw Interrupted()
            })
        XCTAssertEqual(try count(b, "SELECT count(*) FROM items"), 0)
        try b.database.execute("INSERT INTO items VALUES ('w', 'local', 5)")
        XCTAssertEqual(try ownSeq(b), 1)
    }

    func testOpeningRewritesTriggersOfAnOlderVersion() throws {
        let replica = try sandbox.replica("old", schema: itemsSchema, track: ["items"])
        let table = try XCTUnwrap(try replica.trackedTables().first)
        let current = try XCTUnwrap(TriggerSQL(table: table).updateTrigger)
        // The update trigger as sqsync 0.x wrote it: the mask in a FROM subquery.
        try replica.database.execute(
            """
            DROP TRIGGER "_sqsync_items_after_update";
            CREATE TRIGGER "_sqsync_items_after_update" AFTER UPDATE ON "items"
            WHEN OLD."id" IS NEW."id"
            BEGIN
              INSERT INTO "_sqsync_log" ("tid", "op", "pk", "mask", "stamp")
                SELECT 1, 2, NEW."id", "_sqsync_mask", 0
                FROM (SELECT ((OLD."name" IS NOT NEW."name") << 1) | ((OLD."qty" IS NOT NEW."qty") << 2) AS "_sqsync_mask"), "_sqsync_replica"
                WHERE "applying" = 0 AND "_sqsync_mask" != 0;
            END;
            UPDATE "_sqsync_replica" SET "trigger_version" = 5;
            """)
        let path = replica.path
        let reopened = try Replica(path: path)
        XCTAssertEqual(
            try reopened.database.scalar(
                "SELECT sql FROM sqlite_schema WHERE name = '_sqsync_items_after_update'")?.stringValue, current)
        XCTAssertEqual(try count(reopened, #"SELECT "trigger_version" FROM "_sqsync_replica""#), Int64(TriggerSQL.version))
        XCTAssertEqual(try reopened.doctor(), [])
    }

    /// The rewrite only makes capture faster, so a replica whose rewrite fails still opens:
    /// here a table was renamed (its triggers went with it, names and all) and a new one took
    /// its name, so the new triggers' names are taken.
    func testOpeningSurvivesATriggerRewriteThatFails() throws {
        let replica = try sandbox.replica("renamed", schema: itemsSchema, track: ["items"])
        try replica.database.execute(
            """
            ALTER TABLE items RENAME TO items_before;
            \(itemsSchema)
            UPDATE "_sqsync_replica" SET "trigger_version" = 5;
            """)
        let reopened = try Replica(path: replica.path)
        XCTAssertEqual(try count(reopened, #"SELECT "trigger_version" FROM "_sqsync_replica""#), 5, "tried again next time")
        XCTAssertFalse(try reopened.doctor().isEmpty)
    }

    /// An older sqsync would fold the log rows this version's triggers write during its imports
    /// as local changes; from this version on, a replica a newer sqsync used is refused instead.
    func testAReplicaANewerSqsyncUsedIsRefused() throws {
        let replica = try sandbox.replica("newer", schema: itemsSchema, track: ["items"])
        try replica.database.execute(#"INSERT INTO "_sqsync_migrations" ("version") VALUES (99)"#)
        XCTAssertThrowsError(try Replica(path: replica.path)) { error in
            let message = (error as? ChangeLogError)?.description ?? "\(error)"
            XCTAssertTrue(message.contains(replica.path) && message.contains("newer sqsync"), message)
        }
    }

    func testOpeningLeavesTriggersOfATableBeingMigrated() throws {
        let replica = try sandbox.replica("migrating", schema: itemsSchema, track: ["items"])
        try replica.database.execute("INSERT INTO items VALUES ('x', 'one', 1)")
        _ = try replica.prepareMigration()
        try replica.database.execute(#"UPDATE "_sqsync_replica" SET "trigger_version" = 5"#)
        let reopened = try Replica(path: replica.path)
        // Only the marker that follows a rename stays; no capture trigger is put back.
        XCTAssertEqual(
            try count(reopened, "SELECT count(*) FROM sqlite_schema WHERE name LIKE '\\_sqsync\\_items\\_after%' ESCAPE '\\'"), 0)
        try reopened.database.execute("UPDATE items SET qty = 7")
        _ = try reopened.refresh()
        XCTAssertEqual(try reopened.doctor(), [])
        XCTAssertEqual(try ownSeq(reopened), 2, "the insert, then the update made while the triggers were off")
    }
}
