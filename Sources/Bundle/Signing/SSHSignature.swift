import Crypto

/// An OpenSSH SSHSIG signature (OpenSSH `PROTOCOL.sshsig`), so that bundles can
/// be checked with `ssh-keygen -Y verify` as well as by sqsync.
///
/// Only sha512 and ssh-ed25519 are supported: they are what `ssh-keygen -Y sign`
/// produces with an Ed25519 key, and accepting less keeps the parser small.
///
/// A valid signature says only that `publicKey` signed; whether that key may
/// sign is for `AllowedSigners` to decide.
public struct SSHSignature: Sendable {
    public let publicKey: SSHPublicKey
    public let namespace: String
    /// The raw 64-byte Ed25519 signature.
    public let signature: [UInt8]

    static let magic = Array("SSHSIG".utf8)
    static let version: UInt32 = 1
    static let hashAlgorithm = "sha512"
    static let armorLabel = "SSH SIGNATURE"

    /// Takes the digest rather than the message because SSHSIG signs a hash and
    /// bundles are streamed: the caller hashes while it writes.
    public static func sign(messageDigest: SHA512.Digest, namespace: String, key: SigningKey) throws -> SSHSignature {
        guard !namespace.isEmpty else {
            throw KeyFormatError("an SSH signature needs a namespace")
        }
        let signature = try key.signature(for: signedData(messageDigest: messageDigest, namespace: namespace))
        return SSHSignature(publicKey: key.publicKey, namespace: namespace, signature: signature)
    }

    /// Checks the namespace as well as the signature: a signature made for
    /// another purpose (git commits, say) must not pass as a bundle signature.
    public func isValid(messageDigest: SHA512.Digest, namespace: String) -> Bool {
        guard namespace == self.namespace else { return false }
        return publicKey.isValidSignature(
            signature, for: Self.signedData(messageDigest: messageDigest, namespace: namespace))
    }

    /// What Ed25519 actually signs; the magic prefix and namespace keep an
    /// SSHSIG signature from being valid in any other protocol.
    static func signedData(messageDigest: SHA512.Digest, namespace: String) -> [UInt8] {
        var writer = SSHWriter()
        writer.appendRaw(magic)
        writer.appendString(namespace)
        writer.appendString([])
        writer.appendString(hashAlgorithm)
        writer.appendString(Array(messageDigest))
        return writer.bytes
    }

    public var blob: [UInt8] {
        var inner = SSHWriter()
        inner.appendString(SSHPublicKey.keyType)
        inner.appendString(signature)

        var writer = SSHWriter()
        writer.appendRaw(Self.magic)
        writer.appendUInt32(Self.version)
        writer.appendString(publicKey.wireBlob)
        writer.appendString(namespace)
        writer.appendString([])
        writer.appendString(Self.hashAlgorithm)
        writer.appendString(inner.bytes)
        return writer.bytes
    }

    /// Strict, because a signature that parses two ways could verify in one
    /// tool and not in the other.
    public init(blob: [UInt8]) throws {
        var reader = SSHReader(blob, context: "the SSH signature")
        guard try reader.readRaw(count: Self.magic.count) == Self.magic else {
            throw KeyFormatError("not an SSH signature (it does not start with SSHSIG)")
        }
        let version = try reader.readUInt32()
        guard version == Self.version else {
            throw KeyFormatError("SSH signature version \(version) is not supported; sqsync supports only version 1")
        }
        let publicKey = try SSHPublicKey(wireBlob: reader.readString())
        let namespace = try reader.readText("namespace")
        guard try reader.readString().isEmpty else {
            throw KeyFormatError("the SSH signature's reserved field is not empty")
        }
        let hashAlgorithm = try reader.readString()
        guard hashAlgorithm == Array(Self.hashAlgorithm.utf8) else {
            throw KeyFormatError(
                "SSH signature hash algorithm \(printableName(hashAlgorithm)) is not supported; sqsync supports only sha512"
            )
        }
        var inner = SSHReader(try reader.readString(), context: "the SSH signature's signature field")
        try reader.expectEnd()
        let type = try inner.readString()
        guard type == Array(SSHPublicKey.keyType.utf8) else {
            throw KeyFormatError(
                "SSH signature type \(printableName(type)) is not supported; sqsync supports only ssh-ed25519")
        }
        let signature = try inner.readString()
        try inner.expectEnd()
        guard signature.count == 64 else {
            throw KeyFormatError("an ssh-ed25519 signature has 64 bytes, not \(signature.count)")
        }
        self.init(publicKey: publicKey, namespace: namespace, signature: signature)
    }

    init(publicKey: SSHPublicKey, namespace: String, signature: [UInt8]) {
        self.publicKey = publicKey
        self.namespace = namespace
        self.signature = signature
    }

    /// The text `ssh-keygen -Y sign` writes to `FILE.sig`.
    public var armored: String {
        Armor.encode(blob, label: Self.armorLabel)
    }

    public init(armored: String) throws {
        try self.init(blob: Armor.decode(armored, label: Self.armorLabel, what: "the SSH signature"))
    }
}
