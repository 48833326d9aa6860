import Crypto
import FoundationEssentials
import Glibc

/// A replica's knowledge ID made from its first public key and its birth, so that no other
/// key can claim it: a receiver that has never heard of the replica checks the claim by
/// hashing the key and the birth, without trusting whoever spoke first (docs/KEYS.md,
/// "Identity"). The birth, 16 random bytes drawn when the replica is made, lets one key own
/// several replicas (two databases on one laptop, a replica made again after a lost disk),
/// each with an identity of its own.
///
/// The ID is the first 16 bytes of SHA-256("sqsync-replica-id\0" ‖ the 32-byte Ed25519 key ‖
/// birth), written as a UUID of version 8 (RFC 9562's version for custom layouts) in
/// lowercase. Replicas made by sqsync 0.2 and 0.3 have an empty birth (their IDs stay as they
/// were). A replica made by an earlier sqsync, or without a key, has a random version-4 ID
/// instead, bound to the first key a receiver sees signing for it.
public enum ReplicaIdentity {
    private static let domain = Array("sqsync-replica-id\u{0}".utf8)
    /// A birth's length; 0 for replicas of sqsync 0.2 and 0.3.
    public static let birthLength = 16

    /// A new replica's birth.
    public static func newBirth() -> [UInt8] { (0..<birthLength).map { _ in UInt8.random(in: 0...255) } }

    /// The knowledge ID of a replica born with `key` and `birth`.
    public static func knowledgeID(for key: SSHPublicKey, birth: [UInt8] = []) -> String {
        var bytes = Array(SHA256.hash(data: domain + key.rawRepresentation + birth).prefix(16))
        bytes[6] = bytes[6] & 0x0f | 0x80
        bytes[8] = bytes[8] & 0x3f | 0x80
        let uuid = bytes.withUnsafeBytes { $0.loadUnaligned(as: uuid_t.self) }
        return UUID(uuid: uuid).uuidString.lowercased()
    }

    /// True for an ID made from a key: only that key's holder can speak for it first.
    public static func isKeyBound(_ knowledgeID: String) -> Bool {
        guard let uuid = UUID(uuidString: knowledgeID) else { return false }
        return uuid.uuid.6 >> 4 == 8 && uuid.uuid.8 >> 6 == 2
    }

    /// True when the ID was made from `key` and `birth`.
    public static func isBound(_ knowledgeID: String, to key: SSHPublicKey, birth: [UInt8] = []) -> Bool {
        knowledgeID.lowercased() == Self.knowledgeID(for: key, birth: birth)
    }
}
