import Foundation
import SQLiteDatabase
import TestSupport
import XCTest

@testable import ChangeLog

/// Whether a label applies here is known before a merge writes anything (LabelCheck.swift).
final class LabelCheckTests: XCTestCase {
    private var directory = ""
    private var replica: Replica!

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqsync-labels-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let database = try Database(path: directory + "/r.db")
        try database.execute(#"CREATE TABLE "orders" ("id" TEXT PRIMARY KEY, "region" TEXT, "qty" INTEGER)"#)
        replica = try Replica.initialize(path: directory + "/r.db", name: "r", knowledgeID: "r-id").replica
        try replica.track(["orders"], allowIntegerPrimaryKey: false)
    }

    override func tearDown() {
        replica = nil
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// A restricted origin's changes judged by a label over a column the table lacks wait,
    /// naming the table and SQLite's reason; over a column it has, or on a table not here,
    /// nothing waits. The check writes nothing.
    func testALabelOverAMissingColumnHoldsTheOriginsChanges() throws {
        let before = try replica.database.everyTable()
        func hold(_ label: String, table: String = "orders") throws -> HoldReason? {
            let rules = AdminRules(acts: [
                .label(table: table, expression: label),
                .grant(replica: "o", table: table, operations: .all, labels: ["north"]),
            ])
            return try replica.labelHold(judging: "o", by: rules, tables: [table], path: "b.sqsb")
        }
        let missing = try XCTUnwrap(try hold("area"))
        XCTAssertEqual(missing.kind, .labelNotApplicable(table: "orders"))
        XCTAssertTrue(missing.message.contains("no such column: area"), missing.message)
        XCTAssertNil(try hold("region"))
        XCTAssertNil(try hold("lower(region) || 'x'"))
        XCTAssertNil(try hold("area", table: "absent"), "a table not here waits for its own reason")
        XCTAssertEqual(try replica.database.everyTable(), before)
    }

    /// Statements about to be added are replayed with those held, in (issued, id) order: a
    /// bad label that a later statement replaces holds nothing; the same label as the last
    /// word does.
    func testStatementsAboutToBeAddedAreJudgedAsTheyWouldBeReplayed() throws {
        func statement(_ byte: UInt8, issued: Int64, label: String) -> StoredAdminStatement {
            StoredAdminStatement(
                id: [UInt8](repeating: byte, count: 16), issued: issued, act: .label(table: "orders", expression: label), signed: [])
        }
        let bad = statement(1, issued: 10, label: "area"), good = statement(2, issued: 20, label: "region")
        XCTAssertNil(try replica.labelHold(adding: [bad, good], path: "b.sqsb"))
        let reason = try XCTUnwrap(try replica.labelHold(adding: [good, statement(3, issued: 30, label: "area")], path: "b.sqsb"))
        XCTAssertEqual(reason.kind, .labelNotApplicable(table: "orders"))
        XCTAssertNil(try replica.labelHold(adding: [], path: "b.sqsb"))
    }
}
