import SQLiteDatabase
import XCTest

@testable import ChangeLog

/// ``Database/withPageCache(ofAtLeast:_:)``: an import's larger page cache, given back after.
final class PageCacheTests: XCTestCase {
    private func cacheSize(_ database: Database) throws -> Int64? {
        try database.scalar("PRAGMA cache_size")?.int64Value
    }

    func testSmallerCacheIsRaisedForTheBodyAndGivenBackAfter() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.replica("cache").database
        let before = try cacheSize(database)
        XCTAssertLessThan(before ?? 0, 0, "SQLite's default is in KiB")
        let inside = try database.withPageCache(ofAtLeast: 16384) { try cacheSize(database) }
        XCTAssertEqual(inside, -16384)
        XCTAssertEqual(try cacheSize(database), before)

        // A setting in pages (positive) is compared in bytes: 3,000 pages of 4 KiB are less,
        // 3,000 pages of 8 KiB are not.
        try database.execute("PRAGMA cache_size = 3000")
        XCTAssertEqual(try database.withPageCache(ofAtLeast: 16384) { try cacheSize(database) }, -16384)
        XCTAssertEqual(try cacheSize(database), 3000)
        let bigPages = try Database(path: sandbox.path("big-pages.db"))
        try bigPages.execute("PRAGMA page_size = 8192; VACUUM; PRAGMA cache_size = 3000")
        XCTAssertEqual(try bigPages.scalar("PRAGMA page_size")?.int64Value, 8192)
        XCTAssertEqual(try bigPages.withPageCache(ofAtLeast: 16384) { try cacheSize(bigPages) }, 3000)
    }

    func testNestedCallLeavesTheOuterCacheToTheOuterCall() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.replica("cache").database
        let before = try cacheSize(database)
        let (inner, between) = try database.withPageCache(ofAtLeast: 16384) {
            (try database.withPageCache(ofAtLeast: 8192) { try cacheSize(database) }, try cacheSize(database))
        }
        XCTAssertEqual(inner, -16384)
        XCTAssertEqual(between, -16384)
        XCTAssertEqual(try cacheSize(database), before)
    }

    func testLargerCacheIsLeftAlone() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.replica("cache").database
        try database.execute("PRAGMA cache_size = 8192")  // 32 MiB in 4 KiB pages
        XCTAssertEqual(try database.withPageCache(ofAtLeast: 16384) { try cacheSize(database) }, 8192)
        try database.execute("PRAGMA cache_size = -65536")
        XCTAssertEqual(try database.withPageCache(ofAtLeast: 16384) { try cacheSize(database) }, -65536)
        XCTAssertEqual(try cacheSize(database), -65536)
    }

    func testFoldGivesTheCacheBackAndKeepsEveryChange() throws {
        let sandbox = try Sandbox()
        let replica = try sandbox.replica(
            "fold", schema: "CREATE TABLE items (id TEXT PRIMARY KEY, qty INTEGER)", track: ["items"])
        try replica.database.execute(
            """
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 500)
            INSERT INTO items SELECT 'k' || i, i FROM n
            """)
        let before = try cacheSize(replica.database)
        try replica.fold()
        XCTAssertEqual(try cacheSize(replica.database), before)
        XCTAssertEqual(try replica.database.scalar(#"SELECT count(*) FROM "_sqsync_rows""#)?.int64Value, 500)
        XCTAssertEqual(try replica.database.scalar(#"SELECT count(*) FROM "_sqsync_log""#)?.int64Value, 0)
    }

    func testCacheIsGivenBackWhenTheBodyThrows() throws {
        struct Failure: Error {}
        let sandbox = try Sandbox()
        let database = try sandbox.replica("cache").database
        let before = try cacheSize(database)
        XCTAssertThrowsError(try database.withPageCache(ofAtLeast: 16384) { throw Failure() })
        XCTAssertEqual(try cacheSize(database), before)
    }
}
