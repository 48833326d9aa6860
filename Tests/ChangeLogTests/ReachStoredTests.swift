import SQLiteDatabase
import TestSupport
import XCTest

@testable import ChangeLog

/// A reach's stored form (`_sqsync_reach."labels"`), written by hand rather than by a JSON
/// encoder: SQLite's `json_each` (the reach SQL) and sqsync's reader both read it back as the
/// same labels, whatever characters a label holds.
final class ReachStoredTests: XCTestCase {
    func testAStoredReachReadsBackAsTheSameLabelsInSQLAndInSwift() throws {
        let labels = ["north", #"a "quoted" one"#, #"back\slash"#, "tab\there", "line\nbreak", "\u{1}\u{1F}", "a/b", "Zürich", "🚚", ""]
        let reach = Reach(labels)
        XCTAssertEqual(Reach.read(stored: reach.stored), reach)
        let database = try Database(path: ":memory:")
        let readBySQL = try database.valueRows(#"SELECT "value" FROM json_each(?) ORDER BY "key""#, .text(reach.stored))
        XCTAssertEqual(readBySQL.compactMap { $0[0].stringValue }, reach.sorted)
        XCTAssertEqual(try database.valueRows("SELECT json_valid(?)", .text(reach.stored)), [[.integer(1)]])
        XCTAssertEqual(Reach([]).stored, "[]")
        XCTAssertEqual(Reach(["b", "a"]).stored, #"["a","b"]"#)
    }
}
