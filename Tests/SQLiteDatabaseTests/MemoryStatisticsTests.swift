import CSQLite
import Foundation
import XCTest

@testable import SQLiteDatabase

final class MemoryStatisticsTests: XCTestCase {
    /// ``Database/leaveOutMemoryStatistics()`` changes the whole process, so it must not
    /// touch one where SQLite already runs: SQLite refuses it then, and keeps counting.
    func testMemoryStatisticsStayOnceSQLiteRuns() throws {
        let folder = try TemporaryFolder()
        _ = try Database(path: folder.path("open.db"))
        XCTAssertFalse(Database.leaveOutMemoryStatistics())
        let before = sqlite3_memory_used()
        let block = sqlite3_malloc64(1 << 20)
        defer { sqlite3_free(block) }
        XCTAssertNotNil(block)
        XCTAssertGreaterThanOrEqual(sqlite3_memory_used() - before, 1 << 20)
    }
}

/// A folder removed when the test ends.
final class TemporaryFolder {
    let root: String

    init() throws {
        root = NSTemporaryDirectory() + "sqsync-db-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(atPath: root) }

    func path(_ name: String) -> String { root + "/" + name }
}
