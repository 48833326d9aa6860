import XCTest

@testable import ChangeLog

/// Tracked writes keep statement journals, which this process holds in one block of memory
/// until they outgrow ``Database/statementJournalSpill`` (``Database/statementJournalsInOneBlock``).
final class StatementJournalTests: XCTestCase {
    func testConnectionsLeaveTempStoreAloneOnceJournalsStayInOneBlock() throws {
        let sandbox = try Sandbox()
        let replica = try sandbox.replica("open")
        XCTAssertTrue(Database.statementJournalsInOneBlock, "the first connection of the process sets the threshold")
        XCTAssertEqual(try replica.database.scalar("PRAGMA temp_store")?.int64Value, 0, "SQLite's default")
    }

    /// Inside a savepoint the statement journal keeps every page the savepoint changed, so it
    /// outgrows the threshold and SQLite writes it to a file in one call. Above 131,071 bytes
    /// SQLite's unix VFS would write part of it and fail with "database or disk is full".
    func testJournalThatSpillsInsideASavepointIsWrittenWhole() throws {
        XCTAssertLessThanOrEqual(Database.statementJournalSpill, 0x1ffff, "the most SQLite's unix VFS writes in one call")
        let sandbox = try Sandbox()
        let replica = try sandbox.replica(
            "spill", schema: "CREATE TABLE items (id TEXT PRIMARY KEY, note TEXT NOT NULL, qty INTEGER)", track: ["items"])
        let database = replica.database
        XCTAssertTrue(Database.statementJournalsInOneBlock, "otherwise journals never spill and this proves nothing")
        let keys = (0..<5000).map { _ in UUID().uuidString }
        try database.inTransaction {
            let insert = try database.cached("INSERT INTO items VALUES (?, ?, 0)")
            for key in keys {
                try insert.bind([.text(key), .text(String(repeating: "n", count: 80))])
                try insert.run()
            }
        }
        try database.inTransaction {
            try database.inTransaction {
                let update = try database.cached("UPDATE items SET qty = qty + 1 WHERE id = ?")
                for key in keys.shuffled() {
                    try update.bind([.text(key)])
                    try update.run()
                }
            }
        }
        let pages = try XCTUnwrap(database.scalar("PRAGMA page_count")?.int64Value)
        XCTAssertGreaterThan(
            pages * (try XCTUnwrap(database.scalar("PRAGMA page_size")?.int64Value)), Int64(Database.statementJournalSpill) * 2,
            "the savepoint touched more pages than the threshold holds")
        XCTAssertEqual(try database.scalar("SELECT count(*) FROM items WHERE qty = 1")?.int64Value, 5000)
        try replica.numberPendingChanges()
        XCTAssertEqual(try replica.knowledge()[replica.knowledgeID], 10_000, "5,000 inserts and 5,000 updates captured")
    }
}
