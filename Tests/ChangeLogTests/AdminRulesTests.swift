import XCTest

@testable import ChangeLog

/// How admin statements replay into labels, scopes and grants (docs/SCOPES.md).
final class AdminRulesTests: XCTestCase {
    func testLaterStatementsReplaceAndGrantsAddUp() {
        let rules = AdminRules(acts: [
            .label(table: "orders", expression: "region"),
            .label(table: "lines", expression: "region"),
            .label(table: "lines", expression: ""),
            .scope(replica: "f", labels: ["south", "north", "north"]),
            .scope(replica: "g", labels: ["x"]),
            .scope(replica: "g", labels: nil),
            .grant(replica: "f", table: "orders", operations: .update, labels: ["north"]),
            .grant(replica: "f", table: "orders", operations: .insert, labels: ["north"]),
            .grant(replica: "f", table: "prices", operations: .all, labels: []),
            .revoke(replica: "f", table: "prices", operations: [.delete]),
        ])
        XCTAssertEqual(rules.labels, ["orders": "region"])
        XCTAssertEqual(rules.scope(of: "f"), ["north", "south"])
        XCTAssertNil(rules.scope(of: "g"))
        XCTAssertNil(rules.scope(of: "h"))
        XCTAssertEqual(rules.grants(of: "f", on: "orders"), [TableGrant(operations: [.insert, .update], labels: ["north"])])
        XCTAssertTrue(rules.allows("f", .update, on: "orders", label: "north"))
        XCTAssertFalse(rules.allows("f", .update, on: "orders", label: "south"))
        XCTAssertFalse(rules.allows("f", .update, on: "orders", label: nil))
        XCTAssertFalse(rules.allows("f", .delete, on: "orders", label: "north"))
        XCTAssertTrue(rules.allows("f", .update, on: "prices", label: nil))
        XCTAssertFalse(rules.allows("f", .delete, on: "prices", label: nil))
        XCTAssertFalse(rules.allows("f", .insert, on: "customers", label: nil), "a restricted replica has no grant there")
        XCTAssertTrue(rules.allows("g", .delete, on: "customers", label: nil), "an unrestricted one may do anything")
        XCTAssertEqual(rules.distinctScopes, [["north", "south"]])
    }

    func testARevokeLeavesTheReplicaRestricted() {
        let rules = AdminRules(acts: [.revoke(replica: "r", table: "orders", operations: .all)])
        XCTAssertTrue(rules.isRestricted("r"))
        XCTAssertFalse(rules.allows("r", .insert, on: "orders", label: nil))
        XCTAssertFalse(rules.allows("r", .insert, on: "prices", label: nil))
    }

    func testOperationsParseFromTheCommandLine() {
        XCTAssertEqual(GrantOperations(list: "insert,update"), [.insert, .update])
        XCTAssertEqual(GrantOperations(list: " Delete "), .delete)
        XCTAssertNil(GrantOperations(list: "insert,fly"))
        XCTAssertNil(GrantOperations(list: ""))
        XCTAssertEqual(GrantOperations.all.description, "insert,update,delete")
    }

    func testALabelIsOnePlainExpression() {
        for good in ["region", "'team:' || team_id", "CASE WHEN qty > 5 THEN 'big' ELSE \"region\" END", "region IN ('a', 'b')", "lower(region)"] {
            XCTAssertTrue(AdminAct.isAcceptableLabel(good), good)
        }
        for bad in [
            "region); DROP TABLE t; --", "region) AS TEXT), CAST((region", "(SELECT 1)", "x IN other_table",
            "x IN pragma_table_info('t')", "RAISE(IGNORE)", "region /* hidden */", "'unclosed", "region\u{0}",
        ] {
            XCTAssertFalse(AdminAct.isAcceptableLabel(bad), bad)
        }
        XCTAssertFalse(AdminAct.scope(replica: "r", labels: ["a\u{0}b"]).isWellFormed)
    }

    func testScopesHoldLabels() {
        XCTAssertTrue(Scope(nil).contains(label: nil))
        XCTAssertTrue(Scope(["a"]).contains(label: "a"))
        XCTAssertFalse(Scope(["a"]).contains(label: "b"))
        XCTAssertFalse(Scope(["a"]).contains(label: nil), "a NULL label goes only to replicas without a scope")
    }
}
