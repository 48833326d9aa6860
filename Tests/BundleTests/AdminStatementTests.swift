import Foundation
import TestSupport
import XCTest

@testable import Bundle
@testable import ChangeLog

/// Signed admin statements (docs/SCOPES.md): what an admin key signs is read back as it was,
/// any changed byte is refused, and only a key allowed the namespace `sqsync-admin` counts.
final class AdminStatementTests: XCTestCase {
    private func key(_ name: String, in directory: String) throws -> (HandKey, SigningKey) {
        let hand = HandKey(name)
        try hand.write(to: directory + "/\(name).key")
        return (hand, try SigningKey.load(path: directory + "/\(name).key"))
    }

    func testRoundTripAnyChangedByteAndNonAdminKeys() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqsync-admin-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (adminHand, admin) = try key("hq", in: directory)
        let (fieldHand, field) = try key("field", in: directory)
        let trust = try AllowedSigners(text: adminHand.adminSignersLine + "\n" + fieldHand.allowedSignersLine + "\n")
        let act = AdminAct.grant(replica: "0d9e0f3a-1111-8222-9333-444455556666", table: "orders", operations: .update, labels: ["north"])
        let statement = try SignedAdminStatement.sign(act, key: admin, issued: 1_700_000_000_000)
        let read = try SignedAdminStatement(bytes: statement.bytes, path: "b.sqsb")
        XCTAssertEqual(read.act, act)
        XCTAssertEqual(read.issued, 1_700_000_000_000)
        XCTAssertEqual(read.id, statement.id)
        XCTAssertEqual(try SignedAdminStatement.admitted([statement.bytes], trust: trust, path: "b.sqsb").map(\.act), [act])

        for index in statement.bytes.indices {
            var altered = statement.bytes
            altered[index] ^= 0x20
            XCTAssertThrowsError(try SignedAdminStatement.admitted([altered], trust: trust, path: "b.sqsb"), "byte \(index)")
        }
        let byField = try SignedAdminStatement.sign(act, key: field)
        XCTAssertThrowsError(try SignedAdminStatement.admitted([byField.bytes], trust: trust, path: "b.sqsb")) { error in
            XCTAssertTrue("\(error)".contains("not an admin key"), "\(error)")
        }
        // The same bytes signed in the bundle namespace do not verify as an admin statement.
        let message = Array(statement.bytes.dropLast(64))
        let wrongNamespace = message + adminHand.sign(message, namespace: "sqsync")
        XCTAssertThrowsError(try SignedAdminStatement.admitted([wrongNamespace], trust: trust, path: "b.sqsb"))
        XCTAssertThrowsError(try SignedAdminStatement(bytes: [UInt8](repeating: 0, count: 70_000), path: "b.sqsb"))
    }
}
