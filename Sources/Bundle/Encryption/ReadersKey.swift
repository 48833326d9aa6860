import ChangeLog
import Crypto
import FoundationEssentials
import Glibc

/// A mailbox's readers' key (docs/BUNDLE_FORMAT.md, "Readers' keys"): an X25519 key pair
/// the readers of a mailbox share, so that a bundle is encrypted once, to it, whatever the
/// number of its readers. Its file holds the secret encrypted to each reader's SSH key (an age
/// file any `age -d -i id_ed25519` opens into an age identity), with the reader list and the
/// public key, signed by the reader that made it.
///
/// The file's name says which readers it is for and which key it holds, so a name is never
/// reused for other content and a writer finds the key for its readers by name. A writer
/// encrypts only to a key made by one of exactly those readers, under a key it trusts, with no
/// stanza for anyone else: a key planted by someone who is not a reader would let that someone
/// read what follows. Whoever reads the bundle need not care who made the key: the bundle's
/// own signatures decide what it is.
public struct ReadersKey: Sendable {
    /// Its file's name in a mailbox's `sqsync/keys/` folder.
    public let name: String
    /// The X25519 public key bundles are encrypted to.
    public let publicKey: [UInt8]
    let secret: Curve25519.KeyAgreement.PrivateKey
    /// The readers' SSH keys, sorted; empty for a key known only by its name and secret.
    public let readers: [SSHPublicKey]
    /// The key that signed the file; nil for a key known only by its name and secret.
    public let maker: SSHPublicKey?
    /// ``fullReadersDigest(_:)`` of ``readers``, made once ("" for a key known only by its
    /// name and secret).
    public let readersFullDigest: String

    static let magicLine = "# sqsync readers' key 1"
    /// Its own SSHSIG namespace: a key file's signature never passes for a bundle's.
    static let signatureNamespace = "sqsync-readers-key"
    /// A key file: an age header of up to ``AgeFile/maxStanzas`` readers and a few lines per reader.
    public static let maxFileBytes = 2 * AgeFile.maxHeaderBytes

    /// The 32-byte secret, for a replica to keep what it opened once.
    public var secretBytes: [UInt8] { Array(secret.rawRepresentation) }

    /// A key opened before, from its name and secret.
    public init(name: String, secret bytes: [UInt8]) throws {
        secret = try Curve25519.KeyAgreement.PrivateKey(rawRepresentation: bytes)
        publicKey = Array(secret.publicKey.rawRepresentation)
        self.name = name
        readers = []
        maker = nil
        readersFullDigest = ""
    }

    private init(secret: Curve25519.KeyAgreement.PrivateKey, readers: [SSHPublicKey], maker: SSHPublicKey) {
        self.secret = secret
        publicKey = Array(secret.publicKey.rawRepresentation)
        self.readers = Self.sorted(readers)
        self.maker = maker
        readersFullDigest = Self.digest(ofSorted: self.readers)
        name = Self.fileName(readersDigest: readersFullDigest, publicKey: publicKey)
    }

    /// Each key once, in the order of their OpenSSH lines. Positions are sorted, not keys: a
    /// mailbox has thousands of readers.
    private static func sorted(_ keys: [SSHPublicKey]) -> [SSHPublicKey] {
        let order = keys.indices.sorted { keys[$0].openSSHLine < keys[$1].openSSHLine }
        var unique: [SSHPublicKey] = []
        unique.reserveCapacity(keys.count)
        for position in order where unique.last != keys[position] { unique.append(keys[position]) }
        return unique
    }

    /// The first part of the file name of every key for exactly these readers: the first 16
    /// digits of ``fullReadersDigest(_:)``.
    public static func readersDigest(_ readers: [SSHPublicKey]) -> String {
        String(fullReadersDigest(readers).prefix(16))
    }

    /// SHA-256 over the readers' sorted lines: what a writer compares, exactly, before it
    /// encrypts to a key (a name's 16 digits only find candidates).
    public static func fullReadersDigest(_ readers: [SSHPublicKey]) -> String {
        digest(ofSorted: sorted(readers))
    }

    private static func digest(ofSorted readers: [SSHPublicKey]) -> String {
        hexString(Array(SHA256.hash(data: Data(readers.map(\.openSSHLine).joined(separator: "\n").utf8))))
    }

    static func fileName(readersDigest: String, publicKey: [UInt8]) -> String {
        readersDigest.prefix(16) + "-" + hexString(Array(SHA256.hash(data: publicKey).prefix(8))) + ".age"
    }

    /// Whether `name` has the form of a key file's name (what a mailbox listing may offer).
    public static func isFileName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard bytes.count == 37, bytes[16] == UInt8(ascii: "-"), name.hasSuffix(".age") else { return false }
        return (bytes[0..<16] + bytes[17..<33]).allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    /// The signed lines and the secret's line: an age identity file (comments, then the key).
    private static func text(publicKey: [UInt8], maker: SSHPublicKey, readers: [SSHPublicKey], signature: String?, secret: [UInt8])
        -> String
    {
        var lines = [magicLine, "# public: " + Bech32.encode(prefix: "age", publicKey), "# made-by: " + maker.openSSHLine]
        lines += readers.map { "# reader: " + $0.openSSHLine }
        if let signature { lines.append("# signature: " + signature) }
        lines.append(Bech32.encode(prefix: "AGE-SECRET-KEY-", secret).uppercased())
        return lines.joined(separator: "\n") + "\n"
    }

    private static func signedDigest(publicKey: [UInt8], maker: SSHPublicKey, readers: [SSHPublicKey], secret: [UInt8]) -> SHA512.Digest {
        SHA512.hash(data: Data(text(publicKey: publicKey, maker: maker, readers: readers, signature: nil, secret: secret).utf8))
    }

    /// Makes a new key for `readers` (the maker among them), signed with `signingKey`, and
    /// writes its file at `path` (a new file).
    public static func make(readers: [SSHPublicKey], signingKey: SigningKey, writingTo path: String, scratchDirectory: String? = nil)
        throws -> ReadersKey
    {
        guard readers.contains(signingKey.publicKey) else {
            throw BundleError(.io, "\(path): a readers' key is made by one of its readers")
        }
        let key = ReadersKey(secret: Curve25519.KeyAgreement.PrivateKey(), readers: readers, maker: signingKey.publicKey)
        let signature = try SSHSignature.sign(
            messageDigest: signedDigest(publicKey: key.publicKey, maker: signingKey.publicKey, readers: key.readers, secret: key.secretBytes),
            namespace: signatureNamespace, key: signingKey)
        let plain = Array(
            text(
                publicKey: key.publicKey, maker: signingKey.publicKey, readers: key.readers, signature: Base64.encode(signature.blob),
                secret: key.secretBytes
            ).utf8)
        let plaintext = try HashingFileOutput(scratchFor: path, in: scratchDirectory)
        try plaintext.write(plain)
        try plaintext.flush()
        let output = try HashingFileOutput(creating: path, mode: 0o644)
        output.hashing = false
        do {
            try AgeFile.encrypt(plaintext: plaintext.descriptor, length: plain.count, path: path, to: key.readers, into: output)
            try output.sync()
        } catch {
            unlink(path)
            throw error
        }
        return key
    }

    /// Opens the key file at `path`, found under `name`, with `key` (one of its readers'):
    /// refused unless it is what its name says, signed by one of its readers, and wrapped
    /// for its readers and no one else. Who made it (``maker``) is for the caller to trust.
    /// The secret is decrypted into an unnamed scratch file in `scratchDirectory` (default: the
    /// temporary folder), never beside the key file, which may lie in a shared folder.
    public static func open(path: String, name: String, with key: SigningKey, scratchDirectory: String? = nil) throws -> ReadersKey {
        func damaged(_ why: String) -> BundleError { BundleError(.corrupt, "\(path): not a readers' key (\(why))") }
        let descriptor = Glibc.open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW)
        guard descriptor >= 0 else { throw BundleError(.io, "\(path): cannot read: \(String(cString: strerror(errno)))") }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG else { throw damaged("not a regular file") }
        let size = Int(status.st_size)
        guard size <= maxFileBytes else { throw damaged("larger than \(maxFileBytes) bytes") }
        guard isFileName(name), AgeFile.isEncrypted(descriptor: descriptor) else { throw damaged("not an age file under a key's name") }
        let plaintext = try HashingFileOutput(scratchFor: path, in: scratchDirectory)
        let tags = try AgeFile.decrypt(descriptor: descriptor, path: path, fileSize: size, with: key, into: plaintext)
        let bytes = try HashingFileInput(descriptor: plaintext.descriptor, path: path, range: 0..<plaintext.bytesWritten)
            .readBytes(plaintext.bytesWritten)
        let lines = bytes.split(separator: 0x0a, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
        guard lines.count >= 6, lines[0] == magicLine, lines.last == "" else { throw damaged("unknown layout") }
        func field(_ line: String, _ label: String) -> String? {
            line.hasPrefix("# \(label): ") ? String(line.dropFirst(label.count + 4)) : nil
        }
        guard let publicText = field(lines[1], "public"), let publicKey = Bech32.decode(prefix: "age", publicText),
            let makerText = field(lines[2], "made-by"), let maker = try? SSHPublicKey(openSSHLine: makerText),
            let signatureText = field(lines[lines.count - 3], "signature"), let signatureBlob = Base64.decode(signatureText),
            let signature = try? SSHSignature(blob: signatureBlob),
            let secretBytes = Bech32.decode(prefix: "AGE-SECRET-KEY-", lines[lines.count - 2]), secretBytes.count == 32,
            let secret = try? Curve25519.KeyAgreement.PrivateKey(rawRepresentation: secretBytes)
        else { throw damaged("unknown layout") }
        var readers: [SSHPublicKey] = []
        for line in lines[3..<(lines.count - 3)] {
            guard let text = field(line, "reader"), let reader = try? SSHPublicKey(openSSHLine: text) else {
                throw damaged("unknown layout")
            }
            readers.append(reader)
        }
        let opened = ReadersKey(secret: secret, readers: readers, maker: maker)
        guard opened.readers == readers, opened.publicKey == publicKey else { throw damaged("its secret is not its public key's") }
        guard opened.name == name else { throw damaged("its content is not what its name says") }
        guard readers.contains(maker), signature.publicKey == maker,
            signature.isValid(
                messageDigest: signedDigest(publicKey: publicKey, maker: maker, readers: readers, secret: secretBytes),
                namespace: signatureNamespace)
        else { throw BundleError(.untrusted, "\(path): a readers' key not signed by one of its readers") }
        // One stanza per reader, tag for tag.
        let readerTags = readers.map { AgeFile.tag(of: $0) }.sorted { $0.lexicographicallyPrecedes($1) }
        guard tags.allSatisfy({ $0.type == AgeFile.stanzaType }),
            tags.map(\.tag).sorted(by: { $0.lexicographicallyPrecedes($1) }) == readerTags
        else {
            throw BundleError(.untrusted, "\(path): a readers' key wrapped for someone who is not one of its readers")
        }
        return opened
    }
}
