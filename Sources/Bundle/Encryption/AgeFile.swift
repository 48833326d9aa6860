import Crypto
import FoundationEssentials
import Glibc

/// Files in the age format (age-encryption.org/v1, C2SP `age.md`), to and from `ssh-ed25519`
/// recipients (the reference code's `agessh`), so that the standard `age` tool decrypts a
/// bundle with a reader's SSH key and sqsync reads what `age -R` wrote. Only confidentiality:
/// age authenticates no sender, so the signed bundle goes inside and its signatures decide
/// (sign, then encrypt). Streamed in age's 64 KiB chunks: memory stays bounded whatever the
/// file's size.
public enum AgeFile {
    static let magicLine = "age-encryption.org/v1"
    static let magic = Array((magicLine + "\n").utf8)
    static let stanzaType = "ssh-ed25519"
    static let sshLabel = Array("age-encryption.org/v1/ssh-ed25519".utf8)
    static let x25519Type = "X25519"
    static let x25519Label = Array("age-encryption.org/v1/X25519".utf8)
    /// The stanza that names the mailbox readers' key an `X25519` stanza is for, so that a
    /// reader fetches that one key file; age skips stanzas it does not know.
    static let readersKeyType = "sqsync-readers"
    static let chunkSize = 64 << 10
    static let tagSize = 16
    /// A header of a few dozen recipients is a few KB; these bound what a hostile one costs.
    /// An `ssh-ed25519` stanza is about 110 bytes, so the most recipients a writer may name
    /// (``maxStanzas``) fit the header with room to spare: whatever sqsync writes, it reads.
    static let maxHeaderBytes = 1 << 20
    public static let maxStanzas = 8192
    /// Stanzas naming this replica's key tag that are tried (a tag is 4 bytes: a second one is
    /// already a coincidence or a forgery).
    static let maxTagMatches = 4

    /// A recipient stanza as a reader sees it: the 4-byte tag of the SSH key it is for.
    public struct Recipient: Sendable, Equatable {
        public var type: String
        /// For `ssh-ed25519`: the first 4 bytes of SHA-256 of the key's SSH wire form.
        public var tag: [UInt8]
    }

    /// True when the file starts as an age file does.
    public static func isEncrypted(descriptor: Int32) -> Bool {
        var head = [UInt8](repeating: 0, count: magic.count)
        let got = head.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress!, magic.count, 0) }
        return got == magic.count && head == magic
    }

    /// The tag an `ssh-ed25519` stanza names its key by.
    public static func tag(of key: SSHPublicKey) -> [UInt8] {
        Array(SHA256.hash(data: key.wireBlob).prefix(4))
    }

    // MARK: Encrypting

    /// Encrypts the whole of `plaintext` (an open file, read from offset 0 to `length`) into
    /// `destination`, to each of `recipients` and, when given, once to `readersKey` (an
    /// `X25519` stanza and the stanza naming it), whatever the number of its readers.
    static func encrypt(
        plaintext: Int32, length: Int, path: String, to recipients: [SSHPublicKey], readersKey: ReadersKey? = nil,
        into destination: HashingFileOutput
    ) throws {
        guard recipients.count <= maxStanzas else {
            throw BundleError(
                .io,
                "\(path): \(recipients.count) recipients, more than the \(maxStanzas) an encrypted bundle may name; readers would refuse it")
        }
        let fileKey = SymmetricKey(size: .bits128)
        var header = magic
        for recipient in recipients {
            guard let stanza = try wrap(fileKey, for: recipient) else {
                throw BundleError(.io, "\(path): key \(recipient.fingerprint) cannot receive an encrypted bundle (it has no X25519 form)")
            }
            header += stanza
        }
        if let readersKey {
            header += try wrap(fileKey, forX25519: readersKey.publicKey)
            header += Array("-> \(readersKeyType) \(readersKey.name)\n\n".utf8)
        }
        header += Array("---".utf8)
        let mac = HMAC<SHA256>.authenticationCode(for: header, using: headerKey(fileKey))
        header += Array((" " + base64(Array(mac)) + "\n").utf8)
        try destination.write(header)
        var nonce = [UInt8](repeating: 0, count: 16)
        for index in nonce.indices { nonce[index] = UInt8.random(in: 0...255) }
        try destination.write(nonce)
        let payloadKey = payloadKey(fileKey, nonce: nonce)
        let input = try HashingFileInput(descriptor: plaintext, path: path, range: 0..<length)
        var counter: UInt64 = 0
        var remaining = length
        repeat {
            let take = min(chunkSize, remaining)
            let chunk = try input.readBytes(take)
            remaining -= take
            let sealed = try ChaChaPoly.seal(chunk, using: payloadKey, nonce: chunkNonce(counter, last: remaining == 0))
            try destination.write(Array(sealed.ciphertext) + Array(sealed.tag))
            counter += 1
        } while remaining > 0
    }

    /// One `ssh-ed25519` stanza: the file key sealed under a key only `recipient`'s private
    /// half can agree on (agessh's `Wrap`). Nil for a key with no X25519 form.
    static func wrap(_ fileKey: SymmetricKey, for recipient: SSHPublicKey) throws -> [UInt8]? {
        guard let theirs = EdwardsToMontgomery.publicKey(recipient),
            let theirKey = try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: theirs)
        else { return nil }
        let ephemeral = Curve25519.KeyAgreement.PrivateKey()
        let share = Array(ephemeral.publicKey.rawRepresentation)
        guard let shared = try tweakedSecret(try ephemeral.sharedSecretFromKeyAgreement(with: theirKey), recipient: recipient)
        else { return nil }
        let wrapping = wrappingKey(shared, salt: share + theirs)
        let sealed = try ChaChaPoly.seal(fileKey.withUnsafeBytes { Array($0) }, using: wrapping, nonce: zeroNonce)
        let body = Array(sealed.ciphertext) + Array(sealed.tag)
        let line = "-> \(stanzaType) \(base64(tag(of: recipient))) \(base64(share))\n"
        return Array(line.utf8) + bodyLines(body)
    }

    /// age's native `X25519` stanza (age.md, "The X25519 recipient type").
    private static func wrap(_ fileKey: SymmetricKey, forX25519 recipient: [UInt8]) throws -> [UInt8] {
        let theirKey = try Curve25519.KeyAgreement.PublicKey(rawRepresentation: recipient)
        let ephemeral = Curve25519.KeyAgreement.PrivateKey()
        let share = Array(ephemeral.publicKey.rawRepresentation)
        let shared = try ephemeral.sharedSecretFromKeyAgreement(with: theirKey).withUnsafeBytes { Array($0) }
        let wrapping = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: shared), salt: share + recipient, info: x25519Label, outputByteCount: 32)
        let sealed = try ChaChaPoly.seal(fileKey.withUnsafeBytes { Array($0) }, using: wrapping, nonce: zeroNonce)
        return Array("-> \(x25519Type) \(base64(share))\n".utf8) + bodyLines(Array(sealed.ciphertext) + Array(sealed.tag))
    }

    // MARK: Decrypting

    /// True when the file at `path` starts as an age file does.
    public static func isEncrypted(path: String) -> Bool {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        return isEncrypted(descriptor: descriptor)
    }

    /// The recipients of the file at `path`; empty when it is not encrypted.
    public static func recipients(ofFile path: String) throws -> [Recipient] {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return [] }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG, isEncrypted(descriptor: descriptor) else {
            return []
        }
        return try recipients(descriptor: descriptor, path: path, fileSize: Int(status.st_size))
    }

    /// The name of the mailbox readers' key the file at `path` is encrypted to, if any: the
    /// argument of its first `sqsync-readers` stanza, when it is a plain file name.
    public static func readersKeyName(ofFile path: String) -> String? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG, isEncrypted(descriptor: descriptor),
            let header = try? Header(descriptor: descriptor, path: path, fileSize: Int(status.st_size)),
            let stanza = header.stanzas.first(where: { $0.arguments.first == readersKeyType }), stanza.arguments.count == 2
        else { return nil }
        return ReadersKey.isFileName(stanza.arguments[1]) ? stanza.arguments[1] : nil
    }

    /// The recipients a file names, for `inspect`; the header is read, nothing decrypted.
    public static func recipients(descriptor: Int32, path: String, fileSize: Int) throws -> [Recipient] {
        try Header(descriptor: descriptor, path: path, fileSize: fileSize).recipients
    }

    /// Decrypts `descriptor` (an age file of `fileSize` bytes) into `output` with `key`'s
    /// private half, or with one of `readersKeys` (a mailbox's, for its `X25519` stanzas).
    /// A file for other keys only, an altered header or chunk, and a file cut short are
    /// refused (``BundleError``), before or while the plaintext is written: the caller reads
    /// nothing of it unless this returns. Returns the recipients the header names.
    @discardableResult
    static func decrypt(
        descriptor: Int32, path: String, fileSize: Int, with key: SigningKey, readersKeys: [ReadersKey] = [],
        into output: HashingFileOutput
    ) throws -> [Recipient] {
        let header = try Header(descriptor: descriptor, path: path, fileSize: fileSize)
        var fileKey: SymmetricKey?
        let identity = try Identity(key)
        var tried = 0
        for stanza in header.stanzas where stanza.arguments.first == stanzaType {
            guard stanza.arguments.count == 3 else {
                throw BundleError(.corrupt, "\(path): damaged encrypted bundle (an ssh-ed25519 stanza without its two arguments)")
            }
            guard decodeBase64(stanza.arguments[1]) == identity.tag, tried < maxTagMatches else { continue }
            tried += 1
            if let unwrapped = try unwrap(stanza, with: identity, path: path) {
                fileKey = unwrapped
                break
            }
        }
        if fileKey == nil && !readersKeys.isEmpty {
            // Each X25519 stanza costs one key agreement per key: a few are tried, no more.
            for stanza in header.stanzas.lazy.filter({ $0.arguments.first == x25519Type }).prefix(maxTagMatches) {
                for readersKey in readersKeys {
                    if let unwrapped = try unwrap(x25519: stanza, with: readersKey, path: path) {
                        fileKey = unwrapped
                        break
                    }
                }
                if fileKey != nil { break }
            }
        }
        guard let fileKey else {
            throw BundleError(
                .notAddressed,
                "\(path): encrypted, but not addressed to this replica's key \(key.publicKey.fingerprint) (\(header.stanzas.count == 1 ? "its one recipient is another key" : "its \(header.stanzas.count) recipients are other keys")); if this replica should read it, its sender's allowed_signers lacks this replica's line: \(AllowedSigners.suggestedLine(for: key.publicKey, name: nil))"
            )
        }
        guard HMAC<SHA256>.isValidAuthenticationCode(header.mac, authenticating: header.authenticated, using: headerKey(fileKey))
        else {
            throw BundleError(.untrusted, "\(path): the encrypted bundle's header was altered (its MAC does not match)")
        }
        var offset = header.length
        guard fileSize - offset >= 16 + tagSize else { throw truncated(path) }
        let nonce = try readExactly(descriptor, offset, 16, path: path)
        offset += 16
        let payloadKey = payloadKey(fileKey, nonce: nonce)
        let input = try HashingFileInput(descriptor: descriptor, path: path, range: offset..<fileSize)
        var remaining = fileSize - offset
        var counter: UInt64 = 0
        while remaining > 0 {
            let take = min(chunkSize + tagSize, remaining)
            guard take >= tagSize else { throw truncated(path) }
            let sealed = try input.readBytes(take)
            remaining -= take
            let last = remaining == 0
            if last && take == tagSize && counter > 0 {
                throw BundleError(.corrupt, "\(path): damaged encrypted bundle (an empty last chunk after others)")
            }
            let box = try ChaChaPoly.SealedBox(
                nonce: chunkNonce(counter, last: last), ciphertext: sealed.prefix(take - tagSize), tag: sealed.suffix(tagSize))
            guard let plain = try? ChaChaPoly.open(box, using: payloadKey) else {
                var error = BundleError(
                    .untrusted, "\(path): the encrypted bundle was altered or cut short (chunk \(counter + 1) does not authenticate)")
                error.altered = true
                throw error
            }
            try output.write(Array(plain))
            counter += 1
        }
        try output.flush()
        return header.recipients
    }

    /// A replica's key as a recipient: what unwrapping needs, computed once per file.
    private struct Identity {
        let publicKey: SSHPublicKey
        let tag: [UInt8]
        let montgomery: [UInt8]
        let secret: Curve25519.KeyAgreement.PrivateKey

        init(_ key: SigningKey) throws {
            publicKey = key.publicKey
            tag = AgeFile.tag(of: key.publicKey)
            guard let montgomery = EdwardsToMontgomery.publicKey(key.publicKey) else {
                throw BundleError(.io, "key \(key.publicKey.fingerprint) has no X25519 form")
            }
            self.montgomery = montgomery
            secret = EdwardsToMontgomery.privateKey(seed: key.seedBytes)
        }
    }

    /// agessh's `Unwrap`: nil when the stanza is not for this key after all.
    private static func unwrap(_ stanza: Header.Stanza, with identity: Identity, path: String) throws -> SymmetricKey? {
        guard let share = decodeBase64(stanza.arguments[2]), share.count == 32, stanza.body.count == 32,
            let theirKey = try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: share)
        else {
            throw BundleError(.corrupt, "\(path): damaged encrypted bundle (an ssh-ed25519 recipient stanza is malformed)")
        }
        let ours = identity.montgomery
        guard
            let shared = try tweakedSecret(
                try identity.secret.sharedSecretFromKeyAgreement(with: theirKey), recipient: identity.publicKey)
        else {
            throw BundleError(.untrusted, "\(path): an ssh-ed25519 recipient stanza gives a low-order share (all-zero secret)")
        }
        let wrapping = wrappingKey(shared, salt: share + ours)
        guard
            let box = try? ChaChaPoly.SealedBox(nonce: zeroNonce, ciphertext: stanza.body.prefix(16), tag: stanza.body.suffix(16)),
            let fileKey = try? ChaChaPoly.open(box, using: wrapping)
        else { return nil }
        return SymmetricKey(data: fileKey)
    }

    /// age's X25519 `Unwrap`: nil when the stanza is not for this key.
    private static func unwrap(x25519 stanza: Header.Stanza, with readersKey: ReadersKey, path: String) throws -> SymmetricKey? {
        guard stanza.arguments.count == 2, let share = decodeBase64(stanza.arguments[1]), share.count == 32, stanza.body.count == 32,
            let theirKey = try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: share)
        else {
            throw BundleError(.corrupt, "\(path): damaged encrypted bundle (an X25519 recipient stanza is malformed)")
        }
        let shared = try readersKey.secret.sharedSecretFromKeyAgreement(with: theirKey).withUnsafeBytes { Array($0) }
        guard shared.contains(where: { $0 != 0 }) else {
            throw BundleError(.untrusted, "\(path): an X25519 recipient stanza gives a low-order share (all-zero secret)")
        }
        let wrapping = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: shared), salt: share + readersKey.publicKey, info: x25519Label, outputByteCount: 32)
        guard
            let box = try? ChaChaPoly.SealedBox(nonce: zeroNonce, ciphertext: stanza.body.prefix(16), tag: stanza.body.suffix(16)),
            let fileKey = try? ChaChaPoly.open(box, using: wrapping)
        else { return nil }
        return SymmetricKey(data: fileKey)
    }

    // MARK: Keys

    /// The X25519 secret tweaked by the recipient's SSH key, as agessh does; nil when either
    /// step gives all zeros (a low-order point), which age refuses and swift-crypto does not.
    private static func tweakedSecret(_ secret: SharedSecret, recipient: SSHPublicKey) throws -> [UInt8]? {
        let raw = secret.withUnsafeBytes { Array($0) }
        guard raw.contains(where: { $0 != 0 }) else { return nil }
        // agessh: HKDF with no secret, salted with the recipient's SSH key.
        let tweak = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: [UInt8]()), salt: recipient.wireBlob, info: sshLabel, outputByteCount: 32)
        let scalar = try Curve25519.KeyAgreement.PrivateKey(rawRepresentation: tweak.withUnsafeBytes { Array($0) })
        let tweaked = try scalar.sharedSecretFromKeyAgreement(with: try Curve25519.KeyAgreement.PublicKey(rawRepresentation: raw))
            .withUnsafeBytes { Array($0) }
        return tweaked.contains(where: { $0 != 0 }) ? tweaked : nil
    }

    private static func wrappingKey(_ shared: [UInt8], salt: [UInt8]) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(inputKeyMaterial: SymmetricKey(data: shared), salt: salt, info: sshLabel, outputByteCount: 32)
    }

    static func headerKey(_ fileKey: SymmetricKey) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(inputKeyMaterial: fileKey, salt: [UInt8](), info: Array("header".utf8), outputByteCount: 32)
    }

    static func payloadKey(_ fileKey: SymmetricKey, nonce: [UInt8]) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(inputKeyMaterial: fileKey, salt: nonce, info: Array("payload".utf8), outputByteCount: 32)
    }

    /// age seals a stanza's file key once per wrapping key, so a zero nonce is safe.
    private static var zeroNonce: ChaChaPoly.Nonce { try! ChaChaPoly.Nonce(data: [UInt8](repeating: 0, count: 12)) }

    /// STREAM's nonce: an 11-byte big-endian chunk counter, then 1 for the last chunk.
    static func chunkNonce(_ counter: UInt64, last: Bool) -> ChaChaPoly.Nonce {
        var bytes = [UInt8](repeating: 0, count: 3)
        for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: counter >> UInt64(shift))) }
        bytes.append(last ? 1 : 0)
        return try! ChaChaPoly.Nonce(data: bytes)
    }

    // MARK: Text

    /// Standard base64 without padding, as age writes it.
    static func base64(_ bytes: [UInt8]) -> String {
        var text = Base64.encode(bytes)
        while text.hasSuffix("=") { text.removeLast() }
        return text
    }

    /// Canonical unpadded base64 only (age refuses padding and stray bits).
    static func decodeBase64(_ text: String) -> [UInt8]? {
        var text = text
        return text.withUTF8 { decodeBase64(bytes: $0) }
    }

    /// ``decodeBase64(_:)`` of text as bytes: a header holds a stanza per reader, thousands of them.
    static func decodeBase64<Bytes: Collection>(bytes text: Bytes) -> [UInt8]? where Bytes.Element == UInt8 {
        Base64.decodeUnpadded(text, canonical: true)
    }

    /// A stanza body: base64 in lines of 64 columns, the last one shorter (empty if need be).
    private static func bodyLines(_ body: [UInt8]) -> [UInt8] {
        var text = base64(body)
        var lines = ""
        while text.count >= 64 {
            lines += text.prefix(64) + "\n"
            text.removeFirst(64)
        }
        return Array((lines + text + "\n").utf8)
    }

    private static func truncated(_ path: String) -> BundleError {
        BundleError(.corrupt, "\(path): the encrypted bundle is cut short (no final chunk)")
    }

    static func readExactly(_ descriptor: Int32, _ offset: Int, _ count: Int, path: String) throws -> [UInt8] {
        let input = try HashingFileInput(descriptor: descriptor, path: path, range: offset..<(offset + count))
        let bytes = try input.readBytes(count)
        guard bytes.count == count else { throw truncated(path) }
        return bytes
    }

    private static func counted(_ count: Int, _ noun: String) -> String { "\(count) \(noun)\(count == 1 ? "" : "s")" }

    /// The header as read from a file, bounded.
    struct Header {
        struct Stanza {
            var arguments: [String]
            var body: [UInt8]
        }

        var stanzas: [Stanza] = []

        var recipients: [Recipient] {
            stanzas.map {
                Recipient(
                    type: $0.arguments.first ?? "",
                    tag: $0.arguments.first == stanzaType ? (decodeBase64($0.arguments.count > 1 ? $0.arguments[1] : "") ?? []) : [])
            }
        }
        /// Everything the MAC covers: from the first byte through "---".
        var authenticated: [UInt8] = []
        var mac: [UInt8] = []
        /// Bytes up to the payload's nonce.
        var length = 0

        init(descriptor: Int32, path: String, fileSize: Int) throws {
            let limit = min(fileSize, maxHeaderBytes)
            let input = try HashingFileInput(descriptor: descriptor, path: path, range: 0..<limit)
            func corrupt(_ what: String) -> BundleError { BundleError(.corrupt, "\(path): damaged encrypted bundle (\(what))") }
            // Every byte read so far, from the file's first: what the MAC covers is a prefix of it.
            var read: [UInt8] = []
            var position = 0
            /// The next line's bytes, without its newline.
            func line() throws -> Range<Int> {
                let start = position
                while true {
                    if let newline = read[position...].firstIndex(of: 0x0a) {
                        position = newline + 1
                        break
                    }
                    position = read.count
                    guard read.count < limit else {
                        throw limit >= maxHeaderBytes ? corrupt("a header over \(maxHeaderBytes) bytes") : corrupt("the header ends too soon")
                    }
                    read += try input.readBytes(min(16 << 10, limit - read.count))
                }
                let range = start..<(position - 1)
                guard read[range].allSatisfy({ $0 >= 0x20 && $0 < 0x7f }) else { throw corrupt("a header byte out of range") }
                return range
            }
            func text(_ range: Range<Int>) -> String { String(decoding: read[range], as: UTF8.self) }
            let arrow = Array("-> ".utf8)
            guard text(try line()) == magicLine else { throw corrupt("not age-encryption.org/v1") }
            var current = try line()
            while read[current].starts(with: arrow) {
                guard stanzas.count < maxStanzas else { throw corrupt("more than \(maxStanzas) recipients") }
                let arguments = read[(current.lowerBound + 3)..<current.upperBound].split(separator: 0x20, omittingEmptySubsequences: false)
                    .map { String(decoding: $0, as: UTF8.self) }
                guard !arguments.isEmpty, !arguments.contains(where: \.isEmpty) else { throw corrupt("an empty stanza argument") }
                var body: [UInt8] = []
                while true {
                    let bodyLine = try line()
                    guard bodyLine.count <= 64, let bytes = decodeBase64(bytes: read[bodyLine]) else {
                        throw corrupt("a stanza body that is not base64")
                    }
                    body += bytes
                    if bodyLine.count < 64 { break }
                }
                stanzas.append(Stanza(arguments: arguments, body: body))
                current = try line()
            }
            let macLine = read[current]
            guard macLine.starts(with: Array("--- ".utf8)), let mac = decodeBase64(bytes: macLine.dropFirst(4)), mac.count == 32 else {
                throw corrupt("no header MAC line")
            }
            guard !stanzas.isEmpty else { throw corrupt("no recipient") }
            self.mac = mac
            length = position
            // The MAC covers the header up to and including "---", not the space after it:
            // the very bytes parsed above.
            authenticated = Array(read[..<(current.lowerBound + 3)])
        }
    }
}
