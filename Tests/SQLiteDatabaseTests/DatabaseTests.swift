import Foundation
import XCTest

@testable import SQLiteDatabase

final class DatabaseTests: XCTestCase {
    private func database() throws -> (TemporaryFolder, Database) {
        let folder = try TemporaryFolder()
        let database = try Database(path: folder.path("test.db"))
        try database.execute("CREATE TABLE t (id TEXT PRIMARY KEY, n INTEGER, r REAL, b BLOB)")
        return (folder, database)
    }

    func testValuesRoundTripExactly() throws {
        let (folder, database) = try database()
        defer { withExtendedLifetime(folder) {} }
        let values: [SQLValue] = [.text("é\u{0}x"), .integer(Int64.min), .real(-1.25e-300), .blob([0, 255, 7])]
        try database.run("INSERT INTO t VALUES (?, ?, ?, ?)", values)
        let row = try XCTUnwrap(database.row("SELECT id, n, r, b FROM t"))
        XCTAssertEqual(row.values, values)
        XCTAssertEqual(try row.int64("n"), Int64.min)
        XCTAssertEqual(try row.blob("b"), [0, 255, 7])
    }

    /// A quote followed by a combining mark is one Character to Swift but two scalars to
    /// SQLite: it is doubled all the same, so the name and the literal stay whole.
    func testQuotingDoublesAQuoteBeforeACombiningMark() throws {
        let (folder, database) = try database()
        defer { withExtendedLifetime(folder) {} }
        let name = "x\"\u{301} INTEGER); DROP TABLE t; --"
        try database.execute("CREATE TABLE \(quoteIdentifier(name)) (v TEXT)")
        XCTAssertEqual(try database.rows("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name").map(\.values), [[.text("t")], [.text(name)]])
        let text = "it'\u{301}s'); DROP TABLE t; --"
        XCTAssertEqual(try database.rows("SELECT \(quoteLiteral(text))").map(\.values), [[.text(text)]])
    }

    /// A query and its reader that disagree fail loudly instead of reading 0.
    func testMissingColumnOrWrongTypeIsAnError() throws {
        let (folder, database) = try database()
        defer { withExtendedLifetime(folder) {} }
        try database.run("INSERT INTO t (id, n) VALUES ('a', NULL)")
        let row = try XCTUnwrap(database.row("SELECT id, n FROM t"))
        XCTAssertThrowsError(try row.int64("count")) { error in
            XCTAssertTrue("\(error)".contains("no column named count"), "\(error)")
        }
        XCTAssertThrowsError(try row.int64("n"), "NULL is not an integer")
        XCTAssertNil(try row.optionalInt64("n"))
        XCTAssertThrowsError(try row.int64("id"), "text is not an integer")
        XCTAssertThrowsError(try database.int64("SELECT n FROM t WHERE id = 'none'"), "no row is not 0")
    }

    func testRecordsAreDecodedByName() throws {
        struct Item: RowDecodable, Equatable {
            var id: String
            var n: Int64
            init(id: String, n: Int64) { (self.id, self.n) = (id, n) }
            init(row: Row) throws { (id, n) = (try row.string("id"), try row.int64("n")) }
        }
        let (folder, database) = try database()
        defer { withExtendedLifetime(folder) {} }
        try database.run("INSERT INTO t (id, n) VALUES ('a', 1), ('b', 2)")
        XCTAssertEqual(try database.records(Item.self, "SELECT n, id FROM t ORDER BY id"), [Item(id: "a", n: 1), Item(id: "b", n: 2)])
    }

    func testConstraintErrorsCarryNamedCodesAndSQLitesWords() throws {
        let (folder, database) = try database()
        defer { withExtendedLifetime(folder) {} }
        try database.run("INSERT INTO t (id) VALUES ('a')")
        XCTAssertThrowsError(try database.run("INSERT INTO t (id) VALUES ('a')")) { error in
            let error = error as! SQLiteError
            XCTAssertEqual(error.code, .constraintPrimaryKey)
            XCTAssertEqual(error.code.primary, .constraint)
            XCTAssertTrue(error.isUniqueConstraint)
            XCTAssertTrue(error.message.contains("UNIQUE constraint failed: t.id"), error.message)
        }
    }

    /// The cache hands out a statement ready to bind, even one left in the middle of its rows.
    func testCachedStatementsComeBackReset() throws {
        let (folder, database) = try database()
        defer { withExtendedLifetime(folder) {} }
        try database.run("INSERT INTO t (id, n) VALUES ('a', 1), ('b', 2)")
        let first = try database.statement("SELECT id FROM t ORDER BY id")
        XCTAssertTrue(try first.step())
        let again = try database.statement("SELECT id FROM t ORDER BY id")
        XCTAssertTrue(first === again, "one statement per SQL text")
        XCTAssertTrue(try again.step())
        XCTAssertEqual(again.value(at: 0), .text("a"), "reset: the first row again")
        XCTAssertEqual(try again.fetchOne { $0.value(at: 0) }, .text("b"))
    }

    func testTransactionsRollBackOnAThrowAndNestAsSavepoints() throws {
        struct Stop: Error {}
        let (folder, database) = try database()
        defer { withExtendedLifetime(folder) {} }
        XCTAssertThrowsError(
            try database.inTransaction {
                try database.run("INSERT INTO t (id) VALUES ('a')")
                try database.inTransaction(commit: false) { try database.run("INSERT INTO t (id) VALUES ('b')") }
                XCTAssertEqual(try database.int64("SELECT count(*) FROM t"), 1, "the dry run rolled back")
                throw Stop()
            })
        XCTAssertEqual(try database.int64("SELECT count(*) FROM t"), 0)
        XCTAssertFalse(database.isInTransaction)
    }

    func testScalarAndAggregateFunctions() throws {
        final class Sum { var total: Int64 = 0 }
        let (folder, database) = try database()
        defer { withExtendedLifetime(folder) {} }
        try database.register(
            SQLFunction("twice", argumentCount: 1) { arguments, result in
                arguments.storageClass(0) == .integer ? result.setInt64(arguments.int64(0) * 2) : result.setError("not an integer")
            })
        try database.register(
            .aggregate(
                "total_of", argumentCount: 1, makeState: Sum.init, step: { sum, arguments in sum.total += arguments.int64(0) },
                final: { sum, result in result.setInt64(sum?.total ?? -1) }))
        try database.run("INSERT INTO t (id, n) VALUES ('a', 1), ('b', 2)")
        XCTAssertEqual(try database.int64("SELECT twice(21)"), 42)
        XCTAssertThrowsError(try database.int64("SELECT twice('x')")) { error in
            XCTAssertEqual((error as? SQLiteError)?.message, "not an integer")
        }
        XCTAssertEqual(try database.int64("SELECT total_of(n) FROM t"), 3)
        XCTAssertEqual(try database.int64("SELECT total_of(n) FROM t WHERE 0"), -1, "a group without rows")
    }

    func testBackupCopiesTheDatabase() throws {
        let (folder, database) = try database()
        try database.run("INSERT INTO t (id, n) VALUES ('a', 1)")
        try database.backup(toPath: folder.path("copy.db"))
        XCTAssertEqual(try Database(path: folder.path("copy.db"), create: false).int64("SELECT n FROM t"), 1)
    }
}
