import Foundation
import SQLiteDatabase
import XCTest

@testable import ChangeLog

/// A replica's knowledge is read again only when the database may have changed
/// (``Database/contentStamp()``): after a write through its connection, a commit by another
/// connection, and a transaction rolled back.
final class KnowledgeReadTests: XCTestCase {
    func testKnowledgeFollowsWritesCommitsElsewhereAndRollbacks() throws {
        let sandbox = try Sandbox()
        let replica = try sandbox.replica("a", schema: "CREATE TABLE t (id TEXT PRIMARY KEY, v TEXT)", track: ["t"])
        let me = replica.knowledgeID
        try replica.fold()
        XCTAssertEqual(try replica.knowledge()[me], 0)

        try replica.database.execute("INSERT INTO t VALUES ('1', 'one')")
        try replica.fold()
        XCTAssertEqual(try replica.knowledge()[me], 1, "a write through this connection")

        struct Undo: Error {}
        XCTAssertThrowsError(
            try replica.database.inTransaction {
                try replica.database.execute("INSERT INTO t VALUES ('2', 'two')")
                try replica.fold()
                XCTAssertEqual(try replica.knowledge()[me], 2, "inside the transaction")
                throw Undo()
            })
        XCTAssertEqual(try replica.knowledge()[me], 1, "the transaction was rolled back")

        let other = try Replica(path: sandbox.path("a.db"))
        try other.database.execute("INSERT INTO t VALUES ('3', 'three')")
        try other.fold()
        XCTAssertEqual(try replica.knowledge()[me], 2, "a commit by another connection")
    }

    /// The site map an import's merges share is kept while the sites are the same, and read
    /// again after a site is added here, by another connection, or in a transaction rolled
    /// back, even when the rollback leaves as many sites as before.
    func testSiteMapFollowsSitesAddedAndRolledBack() throws {
        let sandbox = try Sandbox()
        let replica = try sandbox.replica("a", schema: "CREATE TABLE t (id TEXT PRIMARY KEY, v TEXT)", track: ["t"])
        let first = try replica.siteIDs()
        try replica.database.execute("INSERT INTO t VALUES ('1', 'one')")
        try replica.fold()
        XCTAssertEqual(try replica.siteIDs(), first, "a write that adds no site")

        let b = try replica.siteNumber(for: "bbbb", name: nil)
        XCTAssertEqual(try replica.siteIDs()[b], "bbbb")
        XCTAssertEqual(try replica.siteNumbers()["bbbb"], b)

        struct Undo: Error {}
        XCTAssertThrowsError(
            try replica.database.inTransaction {
                let c = try replica.siteNumber(for: "cccc", name: nil)
                XCTAssertEqual(try replica.siteIDs()[c], "cccc", "inside the transaction")
                throw Undo()
            })
        // As many sites as inside the rolled-back transaction, under the same largest number.
        let d = try replica.siteNumber(for: "dddd", name: nil)
        XCTAssertEqual(try replica.siteIDs()[d], "dddd")
        XCTAssertNil(try replica.siteNumbers()["cccc"], "the transaction was rolled back")

        let other = try Replica(path: sandbox.path("a.db"))
        let e = try other.siteNumber(for: "eeee", name: nil)
        XCTAssertEqual(try replica.siteIDs()[e], "eeee", "a site added by another connection")
        XCTAssertEqual(try replica.siteIDs().count, first.count + 3)
    }
}
