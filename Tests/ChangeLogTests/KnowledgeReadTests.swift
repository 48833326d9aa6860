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
}
