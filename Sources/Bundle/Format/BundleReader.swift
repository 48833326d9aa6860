import ChangeLog
import Crypto
import FoundationEssentials
import Glibc
import SQLiteDatabase

/// Opens a bundle file and checks it before anything in it is read as data
/// (docs/BUNDLE_FORMAT.md, "Reading"): the trailer's two lengths, bounded; the sender's
/// SSHSIG signature over the envelope, and whether its key is trusted; then the envelope; then
/// the SHA-512 of everything before it, in one streaming pass. Segments are read afterwards,
/// each only once its origin's signature checks, and each chunk only once its hash does.
/// Memory stays bounded whatever the file declares. Not Sendable on purpose.
public final class BundleReader {
    public let path: String
    public let fileSize: Int
    /// The sender's signature over the envelope.
    public let signature: SSHSignature
    /// The signer's principal in `allowed_signers`; nil when opened without a trust file.
    public let principal: String?
    public let envelope: BundleEnvelope
    /// Where the envelope starts: the signed payload is the envelope itself.
    private let envelopeOffset: Int
    private let envelopeLength: Int
    /// The file as opened once: every later read (segments, copies to relay) reads these same
    /// bytes, even if the name is given to another file meanwhile. For an encrypted bundle,
    /// its plaintext, in a file that has no name.
    private let descriptor: Int32
    /// The recipients an encrypted (age) bundle names; empty for one in the clear.
    public let recipients: [AgeFile.Recipient]
    public var isEncrypted: Bool { !recipients.isEmpty }
    /// The signed envelope's size, for measuring what a bundle carries beyond its changes.
    public var envelopeSize: Int { envelopeLength }

    /// Opens `path`. With `trust`, a signer it does not trust is refused before the envelope
    /// is read; without it (`inspect`), the signature is still checked. An encrypted bundle
    /// is first decrypted with `key` (docs/BUNDLE_FORMAT.md, "Encryption") into an unnamed
    /// scratch file, all of it authenticated before any of it is read as a bundle.
    /// The plaintext's scratch file goes in `scratchDirectory` (default: the temporary
    /// folder); an import puts it beside the database, which holds the same rows anyway.
    /// `readersKeys`: a mailbox's readers' keys this replica holds, for a bundle encrypted to one.
    public init(
        path: String, trust: AllowedSigners?, decryptingWith key: SigningKey? = nil, readersKeys: [ReadersKey] = [],
        scratchDirectory: String? = nil
    ) throws {
        self.path = path
        var descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw BundleError(.io, "\(path): cannot read: \(String(cString: strerror(errno)))") }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            close(descriptor)
            throw BundleError(.io, "\(path): cannot read: \(String(cString: strerror(errno)))")
        }
        guard status.st_mode & S_IFMT == S_IFREG else {
            close(descriptor)
            throw BundleError(.io, "\(path): not a regular file")
        }
        var fileSize = Int(status.st_size)
        var recipients: [AgeFile.Recipient] = []
        if AgeFile.isEncrypted(descriptor: descriptor) {
            do {
                recipients = try AgeFile.recipients(descriptor: descriptor, path: path, fileSize: fileSize)
                guard let key else {
                    throw BundleError(.notAddressed, "\(path): encrypted; this replica's key (--key) is needed to read it")
                }
                let plaintext = try HashingFileOutput(scratchFor: path, in: scratchDirectory)
                try AgeFile.decrypt(
                    descriptor: descriptor, path: path, fileSize: fileSize, with: key, readersKeys: readersKeys, into: plaintext)
                close(descriptor)
                descriptor = dup(plaintext.descriptor)
                fileSize = plaintext.bytesWritten
                guard descriptor >= 0 else { throw BundleError(.io, "\(path): cannot read: \(String(cString: strerror(errno)))") }
            } catch {
                close(descriptor)
                throw error
            }
        }
        self.descriptor = descriptor
        self.recipients = recipients
        self.fileSize = fileSize
        do {
            (signature, principal, envelope, envelopeOffset, envelopeLength) = try Self.verify(
                descriptor: descriptor, path: path, fileSize: fileSize, trust: trust)
        } catch {
            close(descriptor)
            throw error
        }
    }

    deinit { close(descriptor) }

    /// The checks of ``init(path:trust:)``, in order, on the open file.
    private static func verify(descriptor: Int32, path: String, fileSize: Int, trust: AllowedSigners?) throws -> (
        SSHSignature, String?, BundleEnvelope, Int, Int
    ) {
        func read(_ range: Range<Int>) throws -> [UInt8] {
            try HashingFileInput(descriptor: descriptor, path: path, range: range).readBytes(range.count)
        }
        let preamble = BundleCodec.magic.count + 1
        let trailer = 8 + BundleCodec.trailerMagic.count
        guard fileSize >= preamble + trailer,
            try read(0..<BundleCodec.magic.count) == BundleCodec.magic
        else { throw BundleError(.corrupt, "\(path): not a bundle") }
        let version = try read(BundleCodec.magic.count..<preamble)[0]
        guard (BundleCodec.oldestReadable...BundleCodec.version).contains(version) else {
            throw BundleError(
                .corrupt,
                version < BundleCodec.oldestReadable
                    ? "\(path): bundle format version \(version) comes from an older sqsync, whose changes are not signed by the replica that made them; upgrade sqsync where it was written"
                    : "\(path): bundle format version \(version) is newer than this sqsync reads (version \(BundleCodec.version)); upgrade sqsync"
            )
        }
        let tail = try read((fileSize - trailer)..<fileSize)
        guard Array(tail.suffix(BundleCodec.trailerMagic.count)) == BundleCodec.trailerMagic else {
            throw BundleError(.corrupt, "\(path): not a complete bundle (no signature at its end: truncated, or bytes appended)")
        }
        let envelopeLength = tail[0..<4].reduce(0) { $0 << 8 | Int($1) }
        let signatureLength = tail[4..<8].reduce(0) { $0 << 8 | Int($1) }
        guard signatureLength > 0, signatureLength <= BundleLimits.maxSignatureBytes, envelopeLength > 0,
            envelopeLength <= BundleLimits.maxEnvelopeBytes,
            envelopeLength + signatureLength <= fileSize - preamble - trailer
        else {
            throw BundleError(.corrupt, "\(path): damaged bundle (lengths at its end out of range)")
        }
        let envelopeOffset = fileSize - trailer - signatureLength - envelopeLength
        let signature: SSHSignature
        do {
            signature = try SSHSignature(blob: try read((fileSize - trailer - signatureLength)..<(fileSize - trailer)))
        } catch let error as KeyFormatError {
            throw BundleError(.corrupt, "\(path): damaged signature (\(displayText(error.description)))")
        }
        guard signature.namespace == BundleCodec.signatureNamespace else {
            throw BundleError(
                .untrusted, "\(path): signed for namespace \(displayText(signature.namespace).debugDescription), not \"sqsync\"")
        }
        let trusted = trust?.principal(for: signature.publicKey, namespace: BundleCodec.signatureNamespace)
        let untrusted = untrustedSigner(signature.publicKey, sender: nil, path: path, trustFile: trust?.fileName)
        // An untrusted signer may still be one a trusted key moved to, which only the envelope
        // says: read it (bounded) only once the signature over it verifies.
        if trust != nil && trusted == nil && envelopeLength > BundleLimits.maxUntrustedEnvelopeBytes { throw untrusted }
        let envelopeBytes = try read(envelopeOffset..<(envelopeOffset + envelopeLength))
        guard signature.isValid(messageDigest: SHA512.hash(data: envelopeBytes), namespace: BundleCodec.signatureNamespace)
        else {
            throw trust != nil && trusted == nil
                ? untrusted : BundleError(altered: "\(path): bad signature: the bundle was altered after it was signed")
        }
        let envelope = try BundleEnvelope.decode(envelopeBytes, path: path, version: version)
        var principal: String?
        if let trust {
            let moves = envelope.moves.filter(\.isValid).map { ($0.from, $0.to) }
            principal =
                trusted ?? trust.following(moves).principal(for: signature.publicKey, namespace: BundleCodec.signatureNamespace)
            if principal == nil { throw untrustedSigner(signature.publicKey, sender: envelope.sender.name, path: path, trustFile: trust.fileName) }
        }
        guard envelope.bodyLength == envelopeOffset else {
            throw BundleError(.untrusted, "\(path): the bundle's body is not the length its signed envelope gives")
        }
        let body = try HashingFileInput(descriptor: descriptor, path: path, range: 0..<envelopeOffset)
        try body.drain()
        guard Array(body.digest()) == envelope.bodyDigest else {
            throw BundleError(altered: "\(path): bad signature: the bundle was altered after it was signed")
        }
        return (signature, principal, envelope, envelopeOffset, envelopeLength)
    }

    /// The refusal of a bundle whose signer `allowed_signers` does not know, with the line that
    /// would trust it: the forgotten exchange of lines is the usual cause. `sender`: the name
    /// its envelope gives, once the signature over it verified (escaped: anyone can choose it).
    private static func untrustedSigner(_ key: SSHPublicKey, sender: String?, path: String, trustFile: String?) -> BundleError {
        let claimed = sender.flatMap { $0.isEmpty ? nil : $0 }
        let who = claimed.map { " (it says it comes from replica \(displayText($0)))" } ?? ""
        var error = BundleError(
            .untrusted,
            "\(path): signed by an untrusted key \(key.fingerprint)\(who); if you trust it, add this line to \(trustFile ?? "allowed_signers"): \(AllowedSigners.suggestedLine(for: key, name: claimed))"
        )
        error.signerNotTrusted = true
        return error
    }

    private func read(_ range: Range<Int>) throws -> [UInt8] {
        try HashingFileInput(descriptor: descriptor, path: path, range: range).readBytes(range.count)
    }

    /// The signed payload (the envelope), streamed to `destination` for `ssh-keygen -Y verify`.
    public func extractPayload(to destination: String) throws {
        let output = try HashingFileOutput(creating: destination)
        try output.write(try read(envelopeOffset..<(envelopeOffset + envelopeLength)))
        try output.sync()
    }

    /// Reads every segment in order. For each, `visit` gets a ``Segment`` whose header is
    /// decoded only once `checkOrigin` accepts the key that signed it (it throws to refuse
    /// the bundle, or returns false to pass over the segment unread) and the signature
    /// verifies. At the end, the body must still hash to what the envelope says: a file
    /// changed under the reader fails, and the caller's transaction rolls back.
    public func readSegments(
        checkOrigin: (_ entry: BundleEnvelope.SegmentEntry, _ signer: SSHPublicKey) throws -> Bool,
        _ visit: (Segment) throws -> Void
    ) throws {
        let body = try HashingFileInput(descriptor: descriptor, path: path, range: 0..<envelopeOffset)
        _ = try body.readBytes(BundleCodec.magic.count + 1)
        for entry in envelope.segments {
            let start = body.consumed
            let origin = envelope.sites[entry.site]
            guard
                let segment = try Segment(
                    entry: entry, origin: (origin.id, origin.name), input: body, path: path, checkOrigin: checkOrigin)
            else {
                try body.skip(entry.length - (body.consumed - start))
                continue
            }
            try visit(segment)
            try segment.skipRest()
        }
        guard body.isAtEnd, Array(body.digest()) == envelope.bodyDigest else {
            throw BundleError(.untrusted, "\(path): the file changed while it was being imported")
        }
    }

    /// Copies the verified bundle (its plaintext, if it came encrypted) to a new file.
    func copyWhole(to destination: String) throws {
        let input = try HashingFileInput(descriptor: descriptor, path: path, range: 0..<fileSize)
        let output = try HashingFileOutput(creating: destination, mode: 0o600)
        do {
            var remaining = fileSize
            while remaining > 0 {
                let part = try input.readBytes(min(remaining, 1 << 18))
                try output.write(part)
                remaining -= part.count
            }
            try output.sync()
        } catch {
            unlink(destination)
            throw error
        }
    }

    /// Streams one segment's bytes as they stand in the file, for a relay to keep them.
    public func copySegment(_ entry: BundleEnvelope.SegmentEntry, to consumer: ([UInt8]) throws -> Void) throws {
        let input = try HashingFileInput(descriptor: descriptor, path: path, range: entry.offset..<(entry.offset + entry.length))
        input.hashing = false
        var remaining = entry.length
        while remaining > 0 {
            let part = try input.readBytes(min(remaining, 1 << 18))
            try consumer(part)
            remaining -= part.count
        }
    }

    /// A segment a relay kept (its bytes written to `file`, as they came), read as when it came: its
    /// signer checked by `checkOrigin` and its signature before its header, each chunk's hash
    /// before its records. Nil when `checkOrigin` passes it over.
    static func keptSegment(
        in file: HashingFileOutput, origin: (id: String, name: String), base: Int64, last: Int64, length: Int,
        checkOrigin: (BundleEnvelope.SegmentEntry, SSHPublicKey) throws -> Bool
    ) throws -> Segment? {
        let input = try HashingFileInput(descriptor: file.descriptor, path: file.path, range: 0..<length)
        let entry = BundleEnvelope.SegmentEntry(site: 0, base: base, last: last, offset: 0, length: length)
        return try Segment(entry: entry, origin: origin, input: input, path: file.path, checkOrigin: checkOrigin)
    }

    /// One origin's segment, its header checked and decoded; its records are read on demand.
    public final class Segment {
        public let entry: BundleEnvelope.SegmentEntry
        public let header: SegmentHeader
        public let signer: SSHPublicKey
        private let input: HashingFileInput
        private let path: String
        private var consumed: Int
        private var recordsRead = false

        init?(
            entry: BundleEnvelope.SegmentEntry, origin: (id: String, name: String), input: HashingFileInput, path: String,
            checkOrigin: (BundleEnvelope.SegmentEntry, SSHPublicKey) throws -> Bool
        ) throws {
            self.entry = entry
            self.input = input
            self.path = path
            let start = input.consumed
            let headerLength = try input.readCount(limit: min(BundleLimits.maxSegmentHeaderBytes, entry.length))
            guard headerLength + 96 <= entry.length else { throw input.corrupt("a segment shorter than its header") }
            let headerBytes = try input.readBytes(headerLength)
            let signer: SSHPublicKey
            do {
                signer = try SSHPublicKey(rawRepresentation: try input.readBytes(32))
            } catch let error as KeyFormatError {
                throw BundleError(.corrupt, "\(path): damaged bundle (\(error.description))")
            }
            let signature = try input.readBytes(64)
            guard try checkOrigin(entry, signer) else { return nil }
            guard SignedMessage.isValid(signature, of: headerBytes, by: signer) else {
                throw BundleError(
                    .untrusted,
                    "\(path): the changes of \(displayText(origin.name.isEmpty ? origin.id : origin.name)) do not carry a valid signature of theirs; refusing the bundle"
                )
            }
            header = try SegmentHeader.decode(headerBytes, path: path)
            self.signer = signer
            let changes = header.changes
            guard changes.origin == origin.id, changes.base == entry.base, changes.last == entry.last else {
                throw BundleError(.untrusted, "\(path): a segment is not the one its envelope lists; refusing the bundle")
            }
            consumed = input.consumed - start
            guard consumed + header.chunks.reduce(0, { $0 + $1.compressedLength }) == entry.length else {
                throw input.corrupt("a segment whose chunks do not fill it")
            }
        }

        /// Streams every row change in order, each chunk checked against the signed header
        /// before it is inflated.
        public func forEachChange(_ body: (RowChange) throws -> Void) throws {
            precondition(!recordsRead, "a segment's records are read once")
            recordsRead = true
            var decoder = RecordDecoder(header: header.changes, path: path)
            let chunk = ChunkSource(path: path)
            for expected in header.chunks {
                let compressed = try input.readBytes(expected.compressedLength)
                consumed += compressed.count
                guard Array(SHA256.hash(data: compressed)) == expected.digest else {
                    throw BundleError(
                        .untrusted,
                        "\(path): the changes of \(displayText(header.changes.originLabel)) were altered after their origin signed them; refusing the bundle"
                    )
                }
                try chunk.load(compressed, rawLength: expected.rawLength)
                for _ in 0..<expected.records {
                    try body(try decoder.decode(first: try chunk.readByte(), from: chunk))
                }
                guard chunk.isAtEnd else { throw chunk.corrupt("bytes after the last record of a chunk") }
            }
        }

        /// Reads past what is left of the segment, so the body's hash covers it.
        func skipRest() throws {
            let rest = entry.length - consumed
            if rest > 0 { try input.skip(rest) }
            consumed = entry.length
        }
    }
}
