import ChangeLog
import Crypto
import Foundation

/// A small statement a replica signs itself, which bundles carry (and relays pass on)
/// unchanged, so a receiver can believe what it says about a replica other than the
/// bundle's sender (docs/KEYS.md). Two kinds:
///
///     sqsync-ack-statement 1            sqsync-key-move 1
///     replica <knowledge-id>            replica <knowledge-id>
///     name <name>                       from <OpenSSH public key line>
///     counter <n>                       to <OpenSSH public key line>
///     knowledge <id>:<seq>,…
///     folded <seq>   (once the replica folded counter entries)
///
/// Encoded as: varint length of the UTF-8 text, the text, the signer's 32-byte Ed25519
/// public key, and the 64-byte Ed25519 signature of SSHSIG's signed data (namespace
/// `sqsync`, sha512 of the text): an SSHSIG signature without its fixed framing, so each
/// statement costs about a hundred bytes less. An acknowledgement statement is signed by
/// the replica's own key; a key move by the key it moves away from.
public struct SignedStatement: Sendable {
    public enum Claim: Sendable, Equatable {
        case acknowledgement(name: String, counter: Int64, knowledge: Knowledge)
        case keyMove(from: SSHPublicKey, to: SSHPublicKey)
    }

    static let acknowledgementMagic = "sqsync-ack-statement 1"
    static let keyMoveMagic = "sqsync-key-move 1"
    static let namespace = BundleCodec.signatureNamespace

    public var replica: String
    public var claim: Claim
    /// The key that signed it (the signature is checked on parsing).
    public var signer: SSHPublicKey
    /// The statement as signed, to store and relay byte for byte.
    public var encoded: [UInt8]
    /// For an acknowledgement: up to which of its own sequence numbers the replica had folded
    /// its counter entries into their values (docs/MERGE_RULES.md); 0 when it says nothing.
    public var countersFolded: Int64 = 0

    /// Signs an acknowledgement: `replica` holds `knowledge`; `counter` orders its statements.
    public static func acknowledgement(
        replica: String, name: String, counter: Int64, knowledge: Knowledge, countersFolded: Int64 = 0, key: SigningKey
    ) throws -> SignedStatement {
        let folded = countersFolded > 0 ? ["folded \(countersFolded)"] : []
        let text = ([
            acknowledgementMagic, "replica \(replica)", "name \(name.filter { !$0.isNewline })", "counter \(counter)",
            "knowledge \(knowledge)",
        ] + folded + [""]).joined(separator: "\n")
        return try signed(text, key: key)
    }

    /// Signs, with the old key, that `replica` moves from `oldKey` to `newKey`.
    public static func keyMove(replica: String, from oldKey: SigningKey, to newKey: SSHPublicKey) throws -> SignedStatement {
        let text = [
            keyMoveMagic, "replica \(replica)", "from \(oldKey.publicKey.openSSHLine)", "to \(newKey.openSSHLine)", "",
        ].joined(separator: "\n")
        return try signed(text, key: oldKey)
    }

    private static func signed(_ text: String, key: SigningKey) throws -> SignedStatement {
        let payload = Array(text.utf8)
        let signature = try SSHSignature.sign(messageDigest: SHA512.hash(data: payload), namespace: namespace, key: key)
        var encoded: [UInt8] = []
        BundleCodec.appendVarint(payload.count, to: &encoded)
        encoded.append(contentsOf: payload)
        encoded.append(contentsOf: key.publicKey.rawRepresentation)
        encoded.append(contentsOf: signature.signature)
        return try SignedStatement(encoded: encoded)
    }

    /// Parses a statement and checks its signature (not yet whose key it is: ``KeyBinding``).
    /// Throws a one-line reason when it is malformed or its signature does not verify.
    public init(encoded: [UInt8]) throws {
        let source = ArraySource(encoded, path: "statement")
        let payload = try source.readBytes(try source.readCount(limit: encoded.count))
        signer = try SSHPublicKey(rawRepresentation: try source.readBytes(32))
        let signature = try source.readBytes(64)
        guard source.isAtEnd else { throw KeyFormatError("bytes after the signature") }
        let signed = SSHSignature.signedData(messageDigest: SHA512.hash(data: payload), namespace: Self.namespace)
        guard signer.isValidSignature(signature, for: signed) else { throw KeyFormatError("bad signature") }
        guard let text = String(validating: payload, as: UTF8.self) else { throw KeyFormatError("not text") }
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        var fields: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let space = line.firstIndex(of: " ") else { continue }
            fields[String(line[..<space])] = String(line[line.index(after: space)...])
        }
        guard let replica = fields["replica"], !replica.isEmpty else { throw KeyFormatError("names no replica") }
        self.replica = replica
        self.encoded = encoded
        switch lines.first.map(String.init) {
        case Self.acknowledgementMagic:
            guard let counter = fields["counter"].flatMap({ Int64($0) }),
                let knowledge = try? Knowledge(parsing: fields["knowledge"] ?? "")
            else { throw KeyFormatError("not an acknowledgement statement") }
            claim = .acknowledgement(name: fields["name"] ?? "", counter: counter, knowledge: knowledge)
            countersFolded = fields["folded"].flatMap { Int64($0) } ?? 0
        case Self.keyMoveMagic:
            let from = try SSHPublicKey(openSSHLine: fields["from"] ?? "")
            let to = try SSHPublicKey(openSSHLine: fields["to"] ?? "")
            guard from == signer else { throw KeyFormatError("a key move not signed by the key it leaves") }
            claim = .keyMove(from: from, to: to)
        default:
            throw KeyFormatError("not a statement sqsync knows")
        }
    }

}
