import ChangeLog
import Crypto
import Foundation
import XCTest

@testable import Bundle

/// The signed statements bundles carry (docs/KEYS.md): what they say survives encoding, and
/// any change to their bytes, or a key move signed by another key, is refused.
final class SignedStatementTests: XCTestCase {
    private let replica = "8f7d1c52-0d8e-4c59-9a53-6a3c2a1e9b10"
    private let other = "1b2c3d4e-0000-4000-8000-000000000001"

    func testAcknowledgementRoundTripsAndRefusesAnyChangedByte() throws {
        let key = SigningKey.generate(comment: "a")
        let knowledge = Knowledge([replica: 7, other: 3])
        let statement = try SignedStatement.acknowledgement(
            replica: replica, name: "field", counter: 4, knowledge: knowledge, key: key)
        let read = try SignedStatement(encoded: statement.encoded)
        XCTAssertEqual(read.replica, replica)
        XCTAssertEqual(read.signer, key.publicKey)
        XCTAssertEqual(read.claim, .acknowledgement(name: "field", counter: 4, knowledge: knowledge))
        for position in stride(from: 0, to: statement.encoded.count, by: 3) {
            var bytes = statement.encoded
            bytes[position] ^= 0x04
            XCTAssertThrowsError(try SignedStatement(encoded: bytes), "byte \(position) changed")
        }
        XCTAssertThrowsError(try SignedStatement(encoded: statement.encoded + [0]))
        XCTAssertThrowsError(try SignedStatement(encoded: Array(statement.encoded.dropLast())))
    }

    func testKeyMoveMustBeSignedByTheKeyItLeaves() throws {
        let old = SigningKey.generate(comment: "old"), new = SigningKey.generate(comment: "new")
        let move = try SignedStatement.keyMove(replica: replica, from: old, to: new.publicKey)
        XCTAssertEqual(try SignedStatement(encoded: move.encoded).claim, .keyMove(from: old.publicKey, to: new.publicKey))

        // The same text, validly signed, but by a third key: refused.
        let thief = SigningKey.generate(comment: "thief")
        let text = Array(
            "sqsync-key-move 1\nreplica \(replica)\nfrom \(old.publicKey.openSSHLine)\nto \(thief.publicKey.openSSHLine)\n"
                .utf8)
        let signature = try SSHSignature.sign(messageDigest: SHA512.hash(data: text), namespace: "sqsync", key: thief)
        var forged: [UInt8] = []
        BundleCodec.appendVarint(text.count, to: &forged)
        forged += text + thief.publicKey.rawRepresentation + signature.signature
        XCTAssertThrowsError(try SignedStatement(encoded: forged))
    }

    func testRotatedKeysInheritTrustFromTheKeyTheyLeft() throws {
        let old = SigningKey.generate(comment: "old"), new = SigningKey.generate(comment: "new")
        let newer = SigningKey.generate(comment: "newer"), stranger = SigningKey.generate(comment: "x")
        let trust = try AllowedSigners(text: AllowedSigners.line(principal: "field", key: old.publicKey) + "\n")
        let following = trust.following([(new.publicKey, newer.publicKey), (old.publicKey, new.publicKey)])
        XCTAssertEqual(following.principal(for: new.publicKey, namespace: "sqsync"), "field")
        XCTAssertEqual(following.principal(for: newer.publicKey, namespace: "sqsync"), "field", "chains are followed")
        XCTAssertNil(following.principal(for: new.publicKey, namespace: "git"), "the old line's namespaces hold")
        XCTAssertNil(trust.following([(stranger.publicKey, new.publicKey)]).principal(for: new.publicKey, namespace: "sqsync"))
    }
}
