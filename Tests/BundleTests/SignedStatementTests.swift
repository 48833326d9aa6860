import ChangeLog
import Crypto
import Foundation
import TestSupport
import XCTest

@testable import Bundle

/// The signed statements of format 3 (Sources/Bundle/Identity/Statements.swift, docs/KEYS.md):
/// an acknowledgement statement says what it says in the bytes docs/BUNDLE_FORMAT.md gives,
/// and no changed byte still verifies; a key move counts only when signed by the key it leaves,
/// and a receiver follows it only for the replica that key belongs to; a key moved to is
/// trusted as long as the key it came from is.
final class SignedStatementTests: XCTestCase {
    private var directory: String!

    override func setUpWithError() throws {
        directory =
            FileManager.default.temporaryDirectory.appendingPathComponent("sqsync-statements-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    override func tearDown() {
        if let directory { try? FileManager.default.removeItem(atPath: directory) }
    }

    // MARK: The format's primitives, written here from the spec

    private func varint(_ value: Int64) -> [UInt8] {
        var bytes: [UInt8] = [], rest = UInt64(value)
        while rest >= 0x80 {
            bytes.append(UInt8(rest & 0x7f) | 0x80)
            rest >>= 7
        }
        return bytes + [UInt8(rest)]
    }

    private func id(_ text: String) -> [UInt8] { withUnsafeBytes(of: UUID(uuidString: text)!.uuid) { Array($0) } }

    /// SSH's `string`: a u32be length, then the bytes.
    private func sshString(_ bytes: [UInt8]) -> [UInt8] {
        let count = bytes.count
        return [UInt8(count >> 24 & 0xff), UInt8(count >> 16 & 0xff), UInt8(count >> 8 & 0xff), UInt8(count & 0xff)] + bytes
    }

    /// The format's `sig` of `message` by `key` verifies: Ed25519 over SSHSIG's signed data of
    /// the message's SHA-512 in namespace sqsync (PROTOCOL.sshsig).
    private func verifies(_ signature: [UInt8], _ message: [UInt8], by key: SSHPublicKey) throws -> Bool {
        let signed =
            Array("SSHSIG".utf8) + sshString(Array("sqsync".utf8)) + sshString([]) + sshString(Array("sha512".utf8))
            + sshString(Array(SHA512.hash(data: message)))
        return try Curve25519.Signing.PublicKey(rawRepresentation: key.rawRepresentation).isValidSignature(signature, for: signed)
    }

    // MARK: Acknowledgements

    func testAcknowledgementRoundTripsAndRefusesAnyChangedByte() throws {
        let key = SigningKey.generate(comment: "field")
        let me = ReplicaIdentity.knowledgeID(for: key.publicKey)
        let other = "1b2c3d4e-0000-4000-8000-000000000001", third = "ffffffff-0000-4000-8000-000000000002"
        let knowledge = Knowledge([third: 300, me: 7, other: 3])
        let statement = try AcknowledgementStatement.sign(
            replica: me, counter: 4, countersFolded: 2, knowledge: knowledge, key: key)
        XCTAssertTrue(statement.isSigned(by: key.publicKey))
        XCTAssertFalse(statement.isSigned(by: SigningKey.generate(comment: "other").publicKey))

        // The message, byte for byte as docs/BUNDLE_FORMAT.md gives it: the whole knowledge
        // in ID order.
        var message = Array("SQSYNC-ACK-3\n".utf8) + id(me) + varint(4) + varint(2) + varint(3)
        for (replica, seq) in [(other, Int64(3)), (me, 7), (third, 300)].sorted(by: { $0.0 < $1.0 }) {
            message += id(replica) + varint(seq)
        }
        let stored = try statement.stored()
        XCTAssertEqual(Array(stored.dropLast(64)), message)
        XCTAssertTrue(try verifies(Array(stored.suffix(64)), message, by: key.publicKey))

        let read = try AcknowledgementStatement(stored: stored)
        XCTAssertEqual(read, statement)
        XCTAssertEqual(read.knowledge, knowledge)
        XCTAssertTrue(read.isSigned(by: key.publicKey))
        // A replica it holds nothing of is left out: the same statement, the same signature.
        var withZero = statement
        withZero.knowledge.seqs["00000000-0000-4000-8000-000000000003"] = 0
        XCTAssertTrue(withZero.isSigned(by: key.publicKey))

        for position in stored.indices {
            var bytes = stored
            bytes[position] ^= UInt8(1 << (position % 8))
            if let changed = try? AcknowledgementStatement(stored: bytes) {
                XCTAssertFalse(
                    changed.isSigned(by: key.publicKey), "bit \(position % 8) of byte \(position) flipped still verifies")
            }
        }
        XCTAssertThrowsError(try AcknowledgementStatement(stored: stored + [0]))
        XCTAssertThrowsError(try AcknowledgementStatement(stored: Array(stored.dropLast())))
        XCTAssertThrowsError(try AcknowledgementStatement(stored: Array(stored.prefix(40))))

        var changed = statement
        changed.counter += 1
        XCTAssertFalse(changed.isSigned(by: key.publicKey), "a replayed statement cannot be renumbered")
        changed = statement
        changed.knowledge.seqs[other] = 4
        XCTAssertFalse(changed.isSigned(by: key.publicKey), "nor claim more")
        changed = statement
        changed.countersFolded = 3
        XCTAssertFalse(changed.isSigned(by: key.publicKey), "nor fold further")
        changed = statement
        changed.replica = other
        XCTAssertFalse(changed.isSigned(by: key.publicKey), "nor speak for another replica")
    }

    // MARK: Key moves

    func testKeyMoveMustBeSignedByTheKeyItLeaves() throws {
        let old = SigningKey.generate(comment: "old"), new = SigningKey.generate(comment: "new")
        let thief = SigningKey.generate(comment: "thief")
        let replica = ReplicaIdentity.knowledgeID(for: old.publicKey)
        let move = try KeyMove.sign(replica: replica, from: old, to: new.publicKey, afterSeq: 300)
        XCTAssertTrue(move.isValid)
        let stored = try move.stored()
        let message =
            Array("SQSYNC-MOVE-3\n".utf8) + id(replica) + old.publicKey.rawRepresentation + new.publicKey.rawRepresentation
            + varint(300)
        XCTAssertEqual(Array(stored.dropLast(64)), message)
        XCTAssertTrue(try verifies(move.signature, message, by: old.publicKey))
        XCTAssertEqual(try KeyMove(stored: stored), move)

        // The same move signed by another key than the one it leaves: by a thief, by the key
        // it goes to.
        for signer in [thief, new] {
            var forged = KeyMove(replica: replica, from: old.publicKey, to: new.publicKey, afterSeq: 300, signature: [])
            forged.signature = try SignedMessage.sign(try forged.message(), key: signer)
            XCTAssertFalse(forged.isValid, "signed by \(signer.comment)")
        }
        // The thief's own move away from its key is valid as a signature: it only counts for a
        // replica the thief's key belongs to (testAReceiverFollowsOnlyTheMovesOfAReplicasOwnKey).
        XCTAssertTrue(try KeyMove.sign(replica: replica, from: thief, to: new.publicKey, afterSeq: 300).isValid)
        XCTAssertFalse(
            try KeyMove.sign(replica: replica, from: old, to: old.publicKey, afterSeq: 300).isValid, "a move to itself")

        var changed = move
        changed.afterSeq = 301
        XCTAssertFalse(changed.isValid, "a move cannot be pushed later")
        changed = move
        changed.to = thief.publicKey
        XCTAssertFalse(changed.isValid, "nor redirected")
        changed = move
        changed.replica = ReplicaIdentity.knowledgeID(for: thief.publicKey)
        XCTAssertFalse(changed.isValid, "nor given to another replica")

        for position in stored.indices {
            var bytes = stored
            bytes[position] ^= UInt8(1 << (position % 8))
            if let read = try? KeyMove(stored: bytes) {
                XCTAssertFalse(read.isValid, "bit \(position % 8) of byte \(position) flipped still verifies")
            }
        }
        XCTAssertThrowsError(try KeyMove(stored: stored + [0]))
        XCTAssertThrowsError(try KeyMove(stored: Array(stored.dropLast())))
    }

    // MARK: Trust

    func testRotatedKeysInheritTrustFromTheKeyTheyLeft() throws {
        let old = SigningKey.generate(comment: "old"), new = SigningKey.generate(comment: "new")
        let newer = SigningKey.generate(comment: "newer"), stranger = SigningKey.generate(comment: "x")
        let trust = try AllowedSigners(text: AllowedSigners.line(principal: "field", key: old.publicKey) + "\n")
        let following = trust.following([(new.publicKey, newer.publicKey), (old.publicKey, new.publicKey)])
        XCTAssertEqual(following.principal(for: old.publicKey, namespace: "sqsync"), "field")
        XCTAssertEqual(following.principal(for: new.publicKey, namespace: "sqsync"), "field")
        XCTAssertEqual(following.principal(for: newer.publicKey, namespace: "sqsync"), "field", "chains are followed")
        XCTAssertNil(following.principal(for: new.publicKey, namespace: "git"), "the old line's namespaces hold")
        XCTAssertNil(trust.principal(for: new.publicKey, namespace: "sqsync"), "the file itself is unchanged")
        XCTAssertNil(trust.following([(stranger.publicKey, new.publicKey)]).principal(for: new.publicKey, namespace: "sqsync"))
        XCTAssertNil(
            try AllowedSigners(text: "").following([(old.publicKey, new.publicKey)]).principal(
                for: new.publicKey, namespace: "sqsync"),
            "without the old key's line, the new key is trusted by nothing")
    }

    /// At a receiver: a replica's move, signed by its key, makes the new key its signer and
    /// trusted through the old key's line, for bundles that no longer carry the move; the old
    /// key then signs nothing, and removing its line revokes the new key too. A trusted key of
    /// another replica cannot move the replica: the bundle is refused, the replica unchanged.
    func testAReceiverFollowsOnlyTheMovesOfAReplicasOwnKey() throws {
        let field = HandKey("field"), fieldNew = HandKey("field-new"), thief = HandKey("thief"), thiefNew = HandKey("thief-new")
        let trust = try AllowedSigners(text: field.allowedSignersLine + "\n" + thief.allowedSignersLine + "\n")
        let receiver = try Replica.initialize(path: directory + "/receiver.db", name: "receiver").replica
        var clock = ClockBound.now
        func bundle(from key: HandKey, signer: HandKey, seq: Int64 = 0, also: [HandSite] = []) -> HandBundle {
            clock += 1
            var bundle = HandBundle(
                sites: [HandSite(id: key.replicaID, name: key.name, knowledge: seq)] + also, senderSeq: seq, senderHLC: clock,
                signer: signer)
            bundle.identities = [(0, key.identity)]
            return bundle
        }
        func importing(_ bundle: HandBundle, trust: AllowedSigners) throws -> ImportResult {
            let file = directory + "/\(UUID().uuidString.prefix(8)).sqsb"
            try bundle.write(to: file)
            return try BundleExchange.importBundle(path: file, into: receiver, trust: trust)
        }
        func currentKey() throws -> SSHPublicKey? { try KeyBinding.currentKey(of: field.replicaID, replica: receiver) }
        func snapshot() throws -> [[String]] {
            try ["_sqsync_sites", "_sqsync_keys", "_sqsync_acks"].map { table in
                try receiver.database.valueRows("SELECT * FROM \(table)").map { "\($0)" }.sorted()
            }
        }

        XCTAssertEqual(try importing(bundle(from: field, signer: field), trust: trust).signer, "field")
        XCTAssertEqual(try currentKey(), try SSHPublicKey(rawRepresentation: field.publicKey))

        // The thief's trusted key signs a move of the field replica away from the thief's key.
        let before = try snapshot()
        var stolen = bundle(from: thief, signer: thief, also: [HandSite(id: field.replicaID, name: "field", knowledge: 0)])
        stolen.moves = [HandMove(site: 1, from: thief, to: thiefNew.publicKey, afterSeq: 0)]
        XCTAssertThrowsError(try importing(stolen, trust: trust)) { error in
            XCTAssertTrue("\(error)".contains("which is not that replica's"), "\(error)")
        }
        XCTAssertEqual(try snapshot(), before, "a refused move changes nothing")
        XCTAssertEqual(try currentKey(), try SSHPublicKey(rawRepresentation: field.publicKey))

        // The field replica's own move, the envelope signed by the new key, which no line of
        // allowed_signers names.
        var moved = bundle(from: field, signer: fieldNew)
        moved.moves = [HandMove(site: 0, from: field, to: fieldNew.publicKey, afterSeq: 0)]
        XCTAssertEqual(try importing(moved, trust: trust).signer, "field", "the new key signs under the old key's principal")
        XCTAssertEqual(try currentKey(), try SSHPublicKey(rawRepresentation: fieldNew.publicKey))
        XCTAssertEqual(
            try importing(bundle(from: field, signer: fieldNew), trust: trust).outcome, .applied, "the move is remembered")
        XCTAssertThrowsError(try importing(bundle(from: field, signer: field), trust: trust), "the old key signs nothing more") {
            XCTAssertTrue("\($0)".contains("moved away"), "\($0)")
        }
        let withoutField = try AllowedSigners(text: thief.allowedSignersLine + "\n")
        XCTAssertThrowsError(try importing(bundle(from: field, signer: fieldNew), trust: withoutField)) { error in
            XCTAssertEqual((error as? BundleError)?.kind, .untrusted, "\(error)")
            XCTAssertTrue("\(error)".contains("untrusted key"), "\(error)")
        }
    }

    /// A stolen key signs its replica's statement with a counter no genuine one will reach:
    /// receivers keep it to relay over every later statement of the same key, so the replica's
    /// word is frozen. Once the replica moves to a new key, its first statement by that key
    /// replaces the frozen one. (The old key cannot bring another: a bundle's statement is
    /// believed, and a mailbox file read, only by the replica's current key.)
    func testAStatementAStolenKeySignedFarAheadGivesWayToTheReplicasNextKey() throws {
        let field = HandKey("field"), fieldNew = HandKey("field-new")
        let trust = try AllowedSigners(text: field.allowedSignersLine + "\n")
        let receiver = try Replica.initialize(path: directory + "/receiver.db", name: "receiver").replica
        func importing(_ bundle: HandBundle) throws {
            let file = directory + "/\(UUID().uuidString.prefix(8)).sqsb"
            try bundle.write(to: file)
            _ = try BundleExchange.importBundle(path: file, into: receiver, trust: trust)
        }
        func signingKey(_ hand: HandKey) throws -> SigningKey {
            try hand.write(to: directory + "/\(hand.name).key")
            return try SigningKey.load(path: directory + "/\(hand.name).key")
        }
        func statement(counter: Int64, seq: Int64, by key: SigningKey) throws -> AcknowledgementStatement {
            try AcknowledgementStatement.sign(
                replica: field.replicaID, counter: counter, countersFolded: 0, knowledge: Knowledge([field.replicaID: seq]), key: key)
        }
        func heldCounter() throws -> Int64? { try KeyPins(receiver).acknowledgementStatement(of: field.replicaID)?.counter }
        var first = HandBundle(
            sites: [HandSite(id: field.replicaID, name: "field", knowledge: 0)], senderSeq: 0, senderHLC: ClockBound.now, signer: field)
        first.identities = [(0, field.identity)]
        try importing(first)

        let oldKey = try signingKey(field), newKey = try signingKey(fieldNew)
        try KeyBinding.keepStatement(try statement(counter: 1 << 40, seq: 0, by: oldKey), of: field.replicaID, replica: receiver)
        try KeyBinding.keepStatement(try statement(counter: 2, seq: 0, by: oldKey), of: field.replicaID, replica: receiver)
        XCTAssertEqual(try heldCounter(), 1 << 40, "while the key is current, the higher counter stands")

        var moved = HandBundle(
            sites: [HandSite(id: field.replicaID, name: "field", knowledge: 0)], senderSeq: 0, senderHLC: ClockBound.now + 1,
            signer: fieldNew)
        moved.identities = [(0, field.identity)]
        moved.moves = [HandMove(site: 0, from: field, to: fieldNew.publicKey, afterSeq: 0)]
        try importing(moved)
        try KeyBinding.keepStatement(try statement(counter: 3, seq: 0, by: newKey), of: field.replicaID, replica: receiver)
        XCTAssertEqual(try heldCounter(), 3, "the new key's statement replaces the frozen one")
        try KeyBinding.keepStatement(try statement(counter: 4, seq: 0, by: newKey), of: field.replicaID, replica: receiver)
        XCTAssertEqual(try heldCounter(), 4, "and the next by counter, as before")
    }
}
