import Foundation
import XCTest

@testable import SQLiteDatabase

/// Writes that fire triggers keep statement journals, which this process holds in one block
/// of memory until they outgrow ``Database/statementJournalSpill``
/// (``Database/statementJournalsInOneBlock``).
final class StatementJournalTests: XCTestCase {
    func testConnectionsLeaveTempStoreAloneOnceJournalsStayInOneBlock() throws {
        let folder = try TemporaryFolder()
        let database = try Database(path: folder.path("open.db"))
        XCTAssertTrue(Database.statementJournalsInOneBlock, "the first connection of the process sets the threshold")
        XCTAssertEqual(try database.int64("PRAGMA temp_store"), 0, "SQLite's default")
    }

    /// Inside a savepoint the statement journal keeps every page the savepoint changed, so it
    /// outgrows the threshold and SQLite writes it to a file in one call. Above 131,071 bytes
    /// SQLite's unix VFS would write part of it and fail with "database or disk is full".
    func testJournalThatSpillsInsideASavepointIsWrittenWhole() throws {
        XCTAssertLessThanOrEqual(Database.statementJournalSpill, 0x1ffff, "the most SQLite's unix VFS writes in one call")
        let folder = try TemporaryFolder()
        let database = try Database(path: folder.path("spill.db"))
        try database.useWriteAheadLog()
        try database.execute(
            """
            CREATE TABLE items (id TEXT PRIMARY KEY, note TEXT NOT NULL, qty INTEGER);
            CREATE TABLE log (id INTEGER PRIMARY KEY, item TEXT, stamp);
            CREATE TRIGGER items_insert AFTER INSERT ON items BEGIN
                INSERT INTO log (item, stamp) VALUES (NEW.id, julianday('now'));
            END;
            CREATE TRIGGER items_update AFTER UPDATE ON items BEGIN
                INSERT INTO log (item, stamp) VALUES (NEW.id, julianday('now'));
            END;
            """)
        XCTAssertTrue(Database.statementJournalsInOneBlock, "otherwise journals never spill and this proves nothing")
        let keys = (0..<5000).map { _ in UUID().uuidString }
        try database.inTransaction {
            let insert = try database.statement("INSERT INTO items VALUES (?, ?, 0)")
            for key in keys {
                try insert.bind([.text(key), .text(String(repeating: "n", count: 80))])
                try insert.run()
            }
        }
        try database.inTransaction {
            try database.inTransaction {
                let update = try database.statement("UPDATE items SET qty = qty + 1 WHERE id = ?")
                for key in keys.shuffled() {
                    try update.bind([.text(key)])
                    try update.run()
                }
            }
        }
        let bytes = try database.int64("PRAGMA page_count") * (try database.int64("PRAGMA page_size"))
        XCTAssertGreaterThan(bytes, Int64(Database.statementJournalSpill) * 2, "the savepoint touched more pages than the threshold holds")
        XCTAssertEqual(try database.int64("SELECT count(*) FROM items WHERE qty = 1"), 5000)
        XCTAssertEqual(try database.int64("SELECT count(*) FROM log"), 10_000, "every write fired its trigger")
    }
}
