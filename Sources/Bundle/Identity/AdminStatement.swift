import ChangeLog
import Crypto
import FoundationEssentials
import Glibc

/// An admin decision (a label, a scope, a grant or a revoke) signed by an admin key: a key
/// whose `allowed_signers` line allows the namespace `sqsync-admin` (docs/SCOPES.md). Its
/// signed message:
///
///     "SQSYNC-ADMIN-1\n" issuer-key(32) varint(issued ms) JSON(act)
///
/// The signature is Ed25519 over SSHSIG's signed data for the message's SHA-512 in namespace
/// `sqsync-admin`, so an admin key signs nothing that could pass for a bundle. A receiver
/// keeps the bytes as they came and never encodes them again.
public struct SignedAdminStatement: Sendable, Equatable {
    static let tag = Array("SQSYNC-ADMIN-1\n".utf8)
    public static let namespace = "sqsync-admin"
    /// A statement is a few hundred bytes; a bundle carries at most this many.
    static let maxBytes = 64 * 1024
    static let maxCount = 4096

    public var issuer: SSHPublicKey
    public var issued: Int64
    public var act: AdminAct
    /// The message followed by its 64-byte signature.
    public var bytes: [UInt8]

    public var id: [UInt8] { Array(SHA256.hash(data: bytes.dropLast(64)).prefix(16)) }

    public static func sign(_ act: AdminAct, key: SigningKey, issued: Int64 = ClockBound.now) throws -> SignedAdminStatement {
        var message = tag + key.publicKey.rawRepresentation
        BundleCodec.appendVarint(issued, to: &message)
        message += Array(try JSONEncoder().encode(act))
        let signature = try SignedMessage.sign(message, key: key, namespace: namespace)
        return SignedAdminStatement(issuer: key.publicKey, issued: issued, act: act, bytes: message + signature)
    }

    /// Parses a statement and checks its signature by the key it names; whether that key is
    /// an admin key is the caller's to check (``admitted(_:trust:path:)``).
    public init(bytes: [UInt8], path: String) throws {
        guard bytes.count > Self.tag.count + 32 + 64, bytes.count <= Self.maxBytes,
            Array(bytes.prefix(Self.tag.count)) == Self.tag
        else { throw BundleError(.corrupt, "\(path): damaged bundle (an admin statement without its tag)") }
        let message = Array(bytes.dropLast(64))
        let issuer = try SSHPublicKey(rawRepresentation: Array(message[Self.tag.count..<Self.tag.count + 32]))
        guard SignedMessage.isValid(Array(bytes.suffix(64)), of: message, by: issuer, namespace: Self.namespace) else {
            throw BundleError(.untrusted, "\(path): an admin statement whose signature does not verify; refusing the bundle")
        }
        let source = ArraySource(Array(message.dropFirst(Self.tag.count + 32)), path: path)
        issued = try source.readInt64()
        let json = try source.readBytes(source.remaining)
        guard let act = try? JSONDecoder().decode(AdminAct.self, from: Data(json)) else {
            throw BundleError(.corrupt, "\(path): damaged bundle (an admin statement that says nothing sqsync knows)")
        }
        guard act.isWellFormed else {
            throw BundleError(
                .untrusted, "\(path): an admin statement whose label is not one plain expression, or with control characters (\(displayText(act.summary))); refusing the bundle")
        }
        self.issuer = issuer
        self.act = act
        self.bytes = bytes
    }

    init(issuer: SSHPublicKey, issued: Int64, act: AdminAct, bytes: [UInt8]) {
        self.issuer = issuer
        self.issued = issued
        self.act = act
        self.bytes = bytes
    }

    /// The form a replica keeps.
    public var stored: StoredAdminStatement { StoredAdminStatement(id: id, issued: issued, act: act, signed: bytes) }

    /// Checks every statement a bundle carries that is not held here yet (`held`: their ids):
    /// signed, by a key `trust` allows the namespace `sqsync-admin`, issued no further ahead
    /// of this machine's clock than a change may be. One that is not refuses the whole bundle.
    /// A statement held already was checked when it came: removing its key from
    /// allowed_signers later does not refuse every bundle that still carries it.
    public static func admitted(
        _ carried: [[UInt8]], trust: AllowedSigners, path: String, held: Set<[UInt8]> = []
    ) throws -> [StoredAdminStatement] {
        try carried.compactMap { bytes in
            if bytes.count > 64, held.contains(Array(SHA256.hash(data: bytes.dropLast(64)).prefix(16))) { return nil }
            let statement = try SignedAdminStatement(bytes: bytes, path: path)
            if let ahead = ClockBound.excess(of: statement.issued) {
                throw BundleError(
                    .untrusted,
                    "\(path): an admin statement issued \(ClockBound.describe(ahead)) ahead of this machine's clock, more than the \(ClockBound.describe(ClockBound.milliseconds)) allowed (\(ClockBound.environmentVariable)); refusing the bundle"
                )
            }
            guard trust.principal(for: statement.issuer, namespace: namespace) != nil else {
                throw BundleError(
                    .untrusted,
                    "\(path): an admin statement (\(displayText(statement.act.summary))) signed by key \(statement.issuer.fingerprint), which is not an admin key here (its allowed_signers line must allow namespace \(namespace)); refusing the bundle"
                )
            }
            return statement.stored
        }
    }
}

extension AdminAct {
    /// One line for messages and listings.
    public var summary: String {
        switch self {
        case .label(let table, let expression):
            return expression.isEmpty ? "label of \(table) removed" : "label of \(table): \(expression)"
        case .scope(let replica, let labels):
            return "scope of \(replica): \(labels.map { $0.isEmpty ? "(none)" : $0.joined(separator: ", ") } ?? "all")"
        case .grant(let replica, let table, let operations, let labels):
            return "grant \(replica) \(operations) on \(table)" + (labels.isEmpty ? "" : " labels \(labels.joined(separator: ", "))")
        case .revoke(let replica, let table, let operations):
            return "revoke \(replica) \(operations) on \(table)"
        }
    }
}
