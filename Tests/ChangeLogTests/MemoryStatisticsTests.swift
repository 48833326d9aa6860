import CSQLite
import XCTest

@testable import ChangeLog

final class MemoryStatisticsTests: XCTestCase {
    /// ``Database/leaveOutMemoryStatistics()`` changes the whole process, so it must not
    /// touch one where SQLite already runs: SQLite refuses it then, and keeps counting.
    func testMemoryStatisticsStayOnceSQLiteRuns() throws {
        let sandbox = try Sandbox()
        _ = try sandbox.replica("open")
        XCTAssertFalse(Database.leaveOutMemoryStatistics())
        let before = sqlite3_memory_used()
        let block = sqlite3_malloc64(1 << 20)
        defer { sqlite3_free(block) }
        XCTAssertNotNil(block)
        XCTAssertGreaterThanOrEqual(sqlite3_memory_used() - before, 1 << 20)
    }
}
