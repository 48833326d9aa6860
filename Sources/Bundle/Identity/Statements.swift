import ChangeLog
import Crypto
import FoundationEssentials
import Glibc

/// A replica's own word on what it holds, signed with its own key, which bundles carry and
/// relays pass on unchanged, so a receiver can believe what it says of a replica other than
/// the bundle's sender (docs/KEYS.md, "Acknowledgement statements"). Its signed message:
///
///     "SQSYNC-ACK-3\n" ID(16) varint(counter) varint(folded) varint(n) (ID(16) varint(seq))×n
///
/// with the knowledge in ID order and zeros left out; `counter` grows with every statement
/// the replica signs, `folded` says up to where it folded its counter entries (0: none).
public struct AcknowledgementStatement: Sendable, Equatable {
    static let tag = Array("SQSYNC-ACK-3\n".utf8)

    public var replica: String
    public var counter: Int64
    public var countersFolded: Int64
    public var knowledge: Knowledge
    /// The 64-byte Ed25519 signature of the message's SSHSIG signed data.
    public var signature: [UInt8]

    public init(replica: String, counter: Int64, countersFolded: Int64, knowledge: Knowledge, signature: [UInt8]) {
        self.replica = replica
        self.counter = counter
        self.countersFolded = countersFolded
        self.knowledge = knowledge
        self.signature = signature
    }

    public static func sign(
        replica: String, counter: Int64, countersFolded: Int64, knowledge: Knowledge, key: SigningKey
    ) throws -> AcknowledgementStatement {
        var statement = AcknowledgementStatement(
            replica: replica, counter: counter, countersFolded: countersFolded, knowledge: knowledge, signature: [])
        statement.signature = try SignedMessage.sign(try statement.message(), key: key)
        return statement
    }

    func message() throws -> [UInt8] {
        var bytes = Self.tag
        try BundleCodec.appendID(replica, to: &bytes)
        BundleCodec.appendVarint(counter, to: &bytes)
        BundleCodec.appendVarint(countersFolded, to: &bytes)
        let entries = knowledge.seqs.filter { $0.value > 0 }.sorted { $0.key < $1.key }
        BundleCodec.appendVarint(entries.count, to: &bytes)
        for (id, seq) in entries {
            try BundleCodec.appendID(id, to: &bytes)
            BundleCodec.appendVarint(seq, to: &bytes)
        }
        return bytes
    }

    public func isSigned(by key: SSHPublicKey) -> Bool {
        guard let message = try? message() else { return false }
        return SignedMessage.isValid(signature, of: message, by: key)
    }

    /// The form a replica keeps it in: the message, then the signature.
    public func stored() throws -> [UInt8] { try message() + signature }

    public init(stored bytes: [UInt8]) throws {
        guard bytes.count > Self.tag.count + 64, Array(bytes.prefix(Self.tag.count)) == Self.tag else {
            throw KeyFormatError("not an acknowledgement statement")
        }
        let source = ArraySource(Array(bytes.dropLast(64).dropFirst(Self.tag.count)), path: "statement")
        replica = try source.readID()
        counter = try source.readInt64()
        countersFolded = try source.readInt64()
        var seqs: [String: Int64] = [:]
        for _ in 0..<(try source.readCount(limit: BundleLimits.maxSites)) { seqs[try source.readID()] = try source.readInt64() }
        guard source.isAtEnd else { throw KeyFormatError("bytes after the statement") }
        knowledge = Knowledge(seqs)
        signature = Array(bytes.suffix(64))
    }
}

/// A replica's move from one key to the next, signed by the key it leaves: from the change
/// after `afterSeq` on, only the new key signs for the replica, and the old one signs
/// nothing more (docs/KEYS.md, "Rotation"). Its signed message:
///
///     "SQSYNC-MOVE-3\n" ID(16) from-key(32) to-key(32) varint(after-seq)
public struct KeyMove: Sendable, Equatable {
    static let tag = Array("SQSYNC-MOVE-3\n".utf8)

    public var replica: String
    public var from: SSHPublicKey
    public var to: SSHPublicKey
    public var afterSeq: Int64
    public var signature: [UInt8]

    public static func sign(replica: String, from key: SigningKey, to next: SSHPublicKey, afterSeq: Int64) throws -> KeyMove {
        var move = KeyMove(replica: replica, from: key.publicKey, to: next, afterSeq: afterSeq, signature: [])
        move.signature = try SignedMessage.sign(try move.message(), key: key)
        return move
    }

    func message() throws -> [UInt8] {
        var bytes = Self.tag
        try BundleCodec.appendID(replica, to: &bytes)
        bytes += from.rawRepresentation + to.rawRepresentation
        BundleCodec.appendVarint(afterSeq, to: &bytes)
        return bytes
    }

    /// Signed by the key it leaves, to another key.
    public var isValid: Bool {
        guard from != to, let message = try? message() else { return false }
        return SignedMessage.isValid(signature, of: message, by: from)
    }

    /// The form a replica keeps it in: the message, then the signature.
    public func stored() throws -> [UInt8] { try message() + signature }

    public init(replica: String, from: SSHPublicKey, to: SSHPublicKey, afterSeq: Int64, signature: [UInt8]) {
        self.replica = replica
        self.from = from
        self.to = to
        self.afterSeq = afterSeq
        self.signature = signature
    }

    public init(stored bytes: [UInt8]) throws {
        guard bytes.count > Self.tag.count + 64, Array(bytes.prefix(Self.tag.count)) == Self.tag else {
            throw KeyFormatError("not a key move")
        }
        let source = ArraySource(Array(bytes.dropLast(64).dropFirst(Self.tag.count)), path: "key move")
        replica = try source.readID()
        from = try SSHPublicKey(rawRepresentation: try source.readBytes(32))
        to = try SSHPublicKey(rawRepresentation: try source.readBytes(32))
        afterSeq = try source.readInt64()
        guard source.isAtEnd else { throw KeyFormatError("bytes after the key move") }
        signature = Array(bytes.suffix(64))
    }
}

/// The one way sqsync signs and checks a message of its own: an Ed25519 signature of the
/// SSHSIG signed data for the message's SHA-512 in namespace `sqsync`, without SSHSIG's
/// framing (64 bytes instead of about 300). Every message starts with a tag of its kind.
enum SignedMessage {
    static func sign(_ message: [UInt8], key: SigningKey, namespace: String = BundleCodec.signatureNamespace) throws -> [UInt8] {
        try SSHSignature.sign(messageDigest: SHA512.hash(data: message), namespace: namespace, key: key).signature
    }

    static func isValid(
        _ signature: [UInt8], of message: [UInt8], by key: SSHPublicKey, namespace: String = BundleCodec.signatureNamespace
    ) -> Bool {
        guard signature.count == 64 else { return false }
        let signed = SSHSignature.signedData(messageDigest: SHA512.hash(data: message), namespace: namespace)
        return key.isValidSignature(signature, for: signed)
    }
}
