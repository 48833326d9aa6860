import Crypto
import FoundationEssentials
import Glibc

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A key, signature or allowed_signers file that sqsync cannot use.
///
/// One type for all of them because the user's remedy is the same: read the
/// one-line message, which names the file when there is one, and fix the file.
public struct KeyFormatError: Error, CustomStringConvertible, LocalizedError {
    public var description: String

    public init(_ description: String) {
        self.description = description
    }

    public var errorDescription: String? { description }
}

/// An Ed25519 public key as OpenSSH names it, the identity that signs bundles.
public struct SSHPublicKey: Hashable, Sendable, CustomStringConvertible {
    static let keyType = "ssh-ed25519"

    /// The 32-byte Ed25519 public key.
    public let rawRepresentation: [UInt8]
    /// `ssh-ed25519 BASE64`, made once: readers' keys sort and hash thousands of these lines.
    public let openSSHLine: String

    public init(rawRepresentation: [UInt8]) throws {
        guard rawRepresentation.count == 32 else {
            throw KeyFormatError("an ssh-ed25519 public key has 32 bytes, not \(rawRepresentation.count)")
        }
        self.rawRepresentation = rawRepresentation
        openSSHLine = "\(Self.keyType) \(Base64.encode(Self.wireBlob(of: rawRepresentation)))"
    }

    /// A key whose line is already known to be its canonical `openSSHLine`.
    private init(rawRepresentation: [UInt8], canonicalLine: String) {
        self.rawRepresentation = rawRepresentation
        openSSHLine = canonicalLine
    }

    /// The base64 of every ssh-ed25519 key blob (51 bytes: 68 characters, no padding, no
    /// stray bits, so one text per blob) begins with that of its fixed 19-byte head (type
    /// name and lengths): 25 characters, the 26th shared with the key's first bits.
    private static let canonicalHead = Array("AAAAC3NzaC1lZDI1NTE5AAAAI".utf8)
    private static let wireHead = Array(wireBlob(of: [UInt8](repeating: 0, count: 32)).prefix(19))

    public static func == (left: SSHPublicKey, right: SSHPublicKey) -> Bool { left.rawRepresentation == right.rawRepresentation }

    public func hash(into hasher: inout Hasher) { hasher.combine(rawRepresentation) }

    /// Parses the key blob that SSHSIG and OpenSSH key files embed.
    public init(wireBlob: [UInt8]) throws {
        var reader = SSHReader(wireBlob, context: "public key")
        let type = try reader.readString()
        guard type == Array(Self.keyType.utf8) else {
            throw KeyFormatError(
                "key type \(printableName(type)) is not supported; sqsync supports only ssh-ed25519 keys")
        }
        let raw = try reader.readString()
        try reader.expectEnd()
        try self.init(rawRepresentation: raw)
    }

    /// Parses a line of a `.pub` file or `authorized_keys` without options.
    /// Fields are separated by ASCII white space; a readers' key lists thousands of lines.
    public init(openSSHLine: String) throws {
        let fields = Self.firstTwoFields(of: Array(openSSHLine.utf8))
        guard fields.count == 2 else {
            throw KeyFormatError("not an OpenSSH public key line (expected \"ssh-ed25519 BASE64 [comment]\")")
        }
        guard fields[0].elementsEqual(Self.keyType.utf8) else {
            throw KeyFormatError(
                "key type \(printableName(Array(fields[0]))) is not supported; sqsync supports only ssh-ed25519 keys"
            )
        }
        // The usual line, in canonical base64: read by table, and kept as the line.
        let text = fields[1]
        if text.count == 68, text.starts(with: Self.canonicalHead), let blob = Base64.decodeUnpadded(text, canonical: true),
            blob.prefix(19).elementsEqual(Self.wireHead)
        {
            self.init(rawRepresentation: Array(blob[19...]), canonicalLine: Self.keyType + " " + String(decoding: text, as: UTF8.self))
            return
        }
        guard let blob = Base64.decode(String(decoding: fields[1], as: UTF8.self)) else {
            throw KeyFormatError("the public key is not valid base64")
        }
        try self.init(wireBlob: blob)
    }

    /// The first two runs of bytes between spaces, tabs and line breaks (fewer if there are not two).
    private static func firstTwoFields(of line: [UInt8]) -> [ArraySlice<UInt8>] {
        func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || (0x09...0x0D).contains(byte) }
        var fields: [ArraySlice<UInt8>] = []
        var index = 0
        while fields.count < 2 {
            while index < line.count && isSpace(line[index]) { index += 1 }
            guard index < line.count else { break }
            let start = index
            while index < line.count && !isSpace(line[index]) { index += 1 }
            fields.append(line[start..<index])
        }
        return fields
    }

    public var wireBlob: [UInt8] { Self.wireBlob(of: rawRepresentation) }

    private static func wireBlob(of rawRepresentation: [UInt8]) -> [UInt8] {
        var writer = SSHWriter()
        writer.appendString(keyType)
        writer.appendString(rawRepresentation)
        return writer.bytes
    }

    /// The fingerprint `ssh-keygen -l` and `ssh-keygen -Y verify` show, so users
    /// can compare what sqsync reports with what OpenSSH reports.
    public var fingerprint: String {
        let digest = Base64.encode(Array(SHA256.hash(data: wireBlob)))
        return "SHA256:" + digest.replacing("=", with: "")
    }

    public var description: String { openSSHLine }

    public func isValidSignature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        guard signature.count == 64,
            let key = try? Curve25519.Signing.PublicKey(rawRepresentation: rawRepresentation)
        else { return false }
        return key.isValidSignature(signature, for: message)
    }
}

/// The private half of a signer's identity, kept in the file format OpenSSH
/// uses so one key serves `ssh`, `ssh-keygen -Y` and sqsync alike.
///
/// Only the seed is stored: swift-crypto 3's `Curve25519.Signing.PrivateKey`
/// is not `Sendable`, and rebuilding it per signature is cheap next to the
/// signing itself.
public struct SigningKey: Sendable, CustomStringConvertible {
    private let seed: [UInt8]
    public let publicKey: SSHPublicKey
    public var comment: String

    static let magic = Array("openssh-key-v1\0".utf8)
    static let armorLabel = "OPENSSH PRIVATE KEY"
    /// Cipher "none" pads the private section to 8 bytes (OpenSSH `cipher.c`).
    static let blockSize = 8

    public init(privateKey: Curve25519.Signing.PrivateKey, comment: String) {
        self.seed = Array(privateKey.rawRepresentation)
        // A 32-byte key from swift-crypto is always a valid public key.
        self.publicKey = try! SSHPublicKey(rawRepresentation: Array(privateKey.publicKey.rawRepresentation))
        self.comment = comment
    }

    public static func generate(comment: String) -> SigningKey {
        SigningKey(privateKey: Curve25519.Signing.PrivateKey(), comment: comment)
    }

    /// The 32-byte Ed25519 seed, from which an encrypted bundle's X25519 key is derived.
    var seedBytes: [UInt8] { seed }

    var privateKey: Curve25519.Signing.PrivateKey {
        // The seed came out of a PrivateKey, so it is always 32 bytes.
        try! Curve25519.Signing.PrivateKey(rawRepresentation: seed)
    }

    public init(openSSHText: String) throws {
        try self.init(openSSHText: openSSHText, path: nil)
    }

    /// Takes the path only to put it into the `ssh-keygen -p` hint.
    init(openSSHText text: String, path: String?) throws {
        if !text.contains("-----BEGIN \(Self.armorLabel)-----") {
            if text.hasPrefix("ssh-") || text.hasPrefix("ecdsa-") || text.hasPrefix("sk-") {
                throw KeyFormatError("this is a public key; sqsync needs the private key file (the one without .pub)")
            }
            if text.contains("PRIVATE KEY-----") {
                throw KeyFormatError(
                    "not an OpenSSH ed25519 private key; only ssh-ed25519 keys are supported (`sqsync keygen` makes one)"
                )
            }
        }
        let bytes = try Armor.decode(text, label: Self.armorLabel, what: "the private key")
        var reader = SSHReader(bytes, context: "the private key")
        guard try reader.readRaw(count: Self.magic.count) == Self.magic else {
            throw KeyFormatError("the private key is not in openssh-key-v1 format")
        }
        let cipher = try reader.readText("cipher name")
        let kdf = try reader.readText("kdf name")
        _ = try reader.readString()
        guard cipher == "none" else {
            throw KeyFormatError(
                "the private key is protected by a passphrase (cipher \(cipher)); sqsync needs an unencrypted key: "
                    + "remove the passphrase with `ssh-keygen -p -N '' -f \(path ?? "KEYFILE")`")
        }
        guard kdf == "none" else {
            throw KeyFormatError("the private key names kdf \"\(kdf)\" without a cipher; it is damaged")
        }
        let count = try reader.readUInt32()
        guard count == 1 else {
            throw KeyFormatError("the private key file holds \(count) keys; sqsync needs exactly one")
        }
        let publicKey = try SSHPublicKey(wireBlob: reader.readString())
        let section = try reader.readString()
        try reader.expectEnd()

        guard section.count % Self.blockSize == 0 else {
            throw KeyFormatError("the private key section is not padded to \(Self.blockSize) bytes")
        }
        var secret = SSHReader(section, context: "the private key section")
        guard try secret.readUInt32() == secret.readUInt32() else {
            throw KeyFormatError("the private key's check values differ; the key is damaged")
        }
        let type = try secret.readString()
        guard type == Array(SSHPublicKey.keyType.utf8) else {
            throw KeyFormatError(
                "key type \(printableName(type)) is not supported; sqsync supports only ssh-ed25519 keys")
        }
        let embeddedPublic = try secret.readString()
        let pair = try secret.readString()
        // ssh-keygen stores the comment as bytes; a non-UTF-8 one must not make the key unusable.
        let comment = String(decoding: try secret.readString(), as: UTF8.self)
        let padding = try secret.readRaw(count: secret.remaining)
        guard padding.enumerated().allSatisfy({ $0.element == UInt8(truncatingIfNeeded: $0.offset + 1) }) else {
            throw KeyFormatError("the private key's padding is wrong; the key is damaged")
        }
        guard embeddedPublic == publicKey.rawRepresentation, pair.count == 64,
            Array(pair[32...]) == publicKey.rawRepresentation
        else {
            throw KeyFormatError("the private key's public parts disagree; the key is damaged")
        }
        let privateKey = try Curve25519.Signing.PrivateKey(rawRepresentation: pair[..<32])
        guard Array(privateKey.publicKey.rawRepresentation) == publicKey.rawRepresentation else {
            throw KeyFormatError("the private key does not match its public key; the key is damaged")
        }
        self.init(privateKey: privateKey, comment: comment)
    }

    public static func load(path: String) throws -> SigningKey {
        guard let bytes = try readFileIfExists(atPath: path) else {
            throw KeyFormatError("\(path): no such key file; `sqsync keygen` creates one")
        }
        do {
            return try SigningKey(openSSHText: String(decoding: bytes, as: UTF8.self), path: path)
        } catch let error as KeyFormatError {
            throw KeyFormatError("\(path): \(error.description)")
        }
    }

    /// The key in the exact layout `ssh-keygen` writes, so OpenSSH tools accept
    /// the file and a key written by sqsync looks like any other.
    public func openSSHText() -> String {
        openSSHText(checkInt: UInt32.random(in: .min ... .max))
    }

    /// Takes the check value as a parameter so tests can reproduce a file that
    /// `ssh-keygen` wrote byte for byte.
    func openSSHText(checkInt: UInt32) -> String {
        var secret = SSHWriter()
        secret.appendUInt32(checkInt)
        secret.appendUInt32(checkInt)
        secret.appendString(SSHPublicKey.keyType)
        secret.appendString(publicKey.rawRepresentation)
        secret.appendString(seed + publicKey.rawRepresentation)
        secret.appendString(comment)
        var pad: UInt8 = 0
        while secret.bytes.count % Self.blockSize != 0 {
            pad += 1
            secret.appendRaw([pad])
        }

        var writer = SSHWriter()
        writer.appendRaw(Self.magic)
        writer.appendString("none")
        writer.appendString("none")
        writer.appendString([])
        writer.appendUInt32(1)
        writer.appendString(publicKey.wireBlob)
        writer.appendString(secret.bytes)
        return Armor.encode(writer.bytes, label: Self.armorLabel)
    }

    /// Writes the key pair the way `ssh-keygen -f` does.
    ///
    /// The private file is created with mode 0600 in the same call that creates
    /// it, so there is no moment at which another user could open it. Existing
    /// files are never replaced: losing a signing key cannot be undone.
    public func write(privateKeyPath: String) throws {
        guard !comment.contains(where: \.isNewline) else {
            throw KeyFormatError("the key comment contains a line break, which a .pub file cannot hold")
        }
        let publicKeyPath = privateKeyPath + ".pub"
        let publicText = publicKey.openSSHLine + (comment.isEmpty ? "" : " " + comment) + "\n"

        let privateFile = try createExclusive(atPath: privateKeyPath, mode: 0o600)
        let publicFile: Int32
        do {
            publicFile = try createExclusive(atPath: publicKeyPath, mode: 0o644)
        } catch {
            close(privateFile)
            unlink(privateKeyPath)
            throw error
        }
        let privateWritten = Result { try writeAndClose(privateFile, Array(openSSHText().utf8), path: privateKeyPath) }
        let publicWritten = Result { try writeAndClose(publicFile, Array(publicText.utf8), path: publicKeyPath) }
        do {
            try privateWritten.get()
            try publicWritten.get()
        } catch {
            unlink(privateKeyPath)
            unlink(publicKeyPath)
            throw error
        }
    }

    func signature(for message: [UInt8]) throws -> [UInt8] {
        Array(try privateKey.signature(for: message))
    }

    /// Shows the public identity only, so a key that ends up in a log or a
    /// test failure message does not leak its secret.
    public var description: String {
        "SigningKey(\(publicKey.fingerprint)\(comment.isEmpty ? "" : " " + comment))"
    }
}

// MARK: - Files

private func posixMessage(_ call: String, _ path: String, _ code: Int32) -> String {
    "\(path): \(call) failed: \(String(cString: strerror(code)))"
}

/// Returns nil when the file does not exist, so callers can tell the user how
/// to create it instead of reporting a bare ENOENT.
func readFileIfExists(atPath path: String) throws -> [UInt8]? {
    var fd: Int32
    repeat { fd = open(path, O_RDONLY | O_CLOEXEC) } while fd < 0 && errno == EINTR
    if fd < 0 {
        if errno == ENOENT { return nil }
        throw KeyFormatError(posixMessage("open", path, errno))
    }
    defer { close(fd) }
    var result: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n < 0 {
            if errno == EINTR { continue }
            throw KeyFormatError(posixMessage("read", path, errno))
        }
        if n == 0 { return result }
        result.append(contentsOf: chunk[..<n])
    }
}

private func createExclusive(atPath path: String, mode: mode_t) throws -> Int32 {
    var fd: Int32
    repeat {
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
    } while fd < 0 && errno == EINTR
    if fd < 0 {
        if errno == EEXIST {
            throw KeyFormatError("\(path) already exists; sqsync does not overwrite key files")
        }
        throw KeyFormatError(posixMessage("open", path, errno))
    }
    return fd
}

/// Always closes `fd`, exactly once, so the caller only has to remove the
/// file when this throws.
private func writeAndClose(_ fd: Int32, _ bytes: [UInt8], path: String) throws {
    var isClosed = false
    defer { if !isClosed { close(fd) } }
    var offset = 0
    while offset < bytes.count {
        let n = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        if n < 0 {
            if errno == EINTR { continue }
            throw KeyFormatError(posixMessage("write", path, errno))
        }
        offset += n
    }
    guard fsync(fd) == 0 else {
        throw KeyFormatError(posixMessage("fsync", path, errno))
    }
    isClosed = true
    guard close(fd) == 0 else {
        throw KeyFormatError(posixMessage("close", path, errno))
    }
}
