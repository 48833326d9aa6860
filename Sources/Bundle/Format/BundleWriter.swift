import ChangeLog
import Crypto
import FoundationEssentials
import Glibc
import SQLiteDatabase

/// Streams a bundle file (docs/BUNDLE_FORMAT.md): the preamble, one segment per origin,
/// then the envelope its sender signs and the trailer.
///
/// The file is written under a temporary name beside its destination and renamed into
/// place only once signed and flushed, so a killed export never leaves a file that looks
/// like a bundle. Not Sendable on purpose.
public final class BundleWriter {
    public let destination: String
    private let output: HashingFileOutput
    private let directory: String
    private var segments: [BundleEnvelope.SegmentEntry] = []
    private var finished = false
    /// Records in the segments written so far.
    public private(set) var recordCount = 0

    /// Readers' keys the finished bundle is encrypted to (none: in the clear).
    private let recipients: [SSHPublicKey]
    /// A mailbox's readers' key the finished bundle is encrypted to as well, once.
    private let readersKey: ReadersKey?

    /// With `recipients`, the signed bundle is written to an unnamed scratch file and only
    /// its encryption (age) goes beside `destination`: no plaintext is left there, even by
    /// a killed export.
    /// `scratchDirectory`: where the unnamed plaintext goes (default: the temporary folder).
    public init(
        destination: String, encryptTo recipients: [SSHPublicKey] = [], readersKey: ReadersKey? = nil, scratchDirectory: String? = nil
    ) throws {
        self.destination = destination
        self.recipients = recipients
        self.readersKey = readersKey
        directory = URL(fileURLWithPath: destination).deletingLastPathComponent().path
        output =
            recipients.isEmpty
            ? try HashingFileOutput(creating: Self.temporaryPath(in: directory))
            : try HashingFileOutput(scratchFor: destination, in: scratchDirectory)
        output.hashing = true
        try output.write(BundleCodec.magic + [BundleCodec.version])
    }

    deinit {
        if !finished && recipients.isEmpty { unlink(output.path) }
    }

    /// A row with a value over the cap (``BundleLimits/maxValueBytes``) stops the export,
    /// named by table, key and column: receivers would refuse the whole bundle for it.
    private static func refuseOversizedValue(_ change: RowChange, header: ChangeSetHeader, cap: Int) throws {
        func size(_ value: SQLValue) -> Int {
            switch value {
            case .text(let text): return text.utf8.count
            case .blob(let bytes): return bytes.count
            default: return 0
            }
        }
        guard let oversized = change.columns.first(where: { size($0.value) > cap }) ?? nil else { return }
        let table = header.tables.indices.contains(change.table) ? header.tables[change.table] : nil
        let column = table.flatMap { $0.columns.indices.contains(oversized.column) ? $0.columns[oversized.column] : nil } ?? "?"
        let key = String(change.key.map(\.literal).joined(separator: ", ").prefix(200))
        throw BundleError(
            .io,
            "table \(displayText(table?.name ?? "?")), key \(displayText(key)): a value of \(size(oversized.value)) bytes in column \(displayText(column)) is larger than a bundle may carry (SQSYNC_MAX_VALUE_BYTES is \(cap)); nothing can be sent until the value is made smaller or every replica's cap is raised"
        )
    }

    private static func temporaryPath(in directory: String) -> String { directory + "/.tmp-" + randomName() + ".sqsb" }

    static func randomName() -> String { String(UInt64.random(in: 0...UInt64.max), radix: 16) }

    /// Writes a change set of the signer's own as a segment signed with `key`: `records`
    /// calls its argument once per row change. `site` is the origin's place in the envelope's
    /// site list. Returns how many records it wrote.
    @discardableResult
    public func writeSegment(
        _ header: ChangeSetHeader, site: Int, key: SigningKey, progress: ((Int) -> Void)? = nil,
        records: ((RowChange) throws -> Void) throws -> Void
    ) throws -> Int {
        let chunks = try ChunkFile(directory: directory)
        var encoder = RecordEncoder(tables: header.tables)
        let valueCap = BundleLimits.maxValueBytes
        var record: [UInt8] = []
        record.reserveCapacity(1024)
        var count = 0
        try records { change in
            encoder.encode(change, into: &record)
            if record.count > valueCap { try Self.refuseOversizedValue(change, header: header, cap: valueCap) }
            try chunks.append(record)
            count += 1
            if count % 10_000 == 0 { progress?(recordCount + count) }
        }
        try chunks.finish()
        let signed = try SegmentHeader(changes: header, chunks: chunks.chunks).sign(with: key)
        let offset = output.bytesWritten + output.pending
        var head: [UInt8] = []
        BundleCodec.appendVarint(signed.header.count, to: &head)
        head += signed.header + key.publicKey.rawRepresentation + signed.signature
        try output.write(head)
        try chunks.copy(to: output)
        let length = output.bytesWritten + output.pending - offset
        segments.append(.init(site: site, base: header.base, last: header.last, offset: offset, length: length))
        recordCount += count
        return count
    }

    /// Copies a segment another replica signed, byte for byte, as this replica received it.
    public func copySegment(
        site: Int, base: Int64, last: Int64, records: Int, length: Int, bytes: (([UInt8]) throws -> Void) throws -> Void
    ) throws {
        let offset = output.bytesWritten + output.pending
        try bytes { try output.write($0) }
        guard output.bytesWritten + output.pending - offset == length else {
            throw BundleError(.io, "\(destination): a relayed segment is not the length recorded for it")
        }
        segments.append(.init(site: site, base: base, last: last, offset: offset, length: length))
        recordCount += records
    }

    /// Ends the body, signs the envelope (its body fields and segment list filled in here),
    /// flushes the file and renames it into place. Returns the size of the finished file.
    @discardableResult
    public func finish(envelope: BundleEnvelope, signingKey: SigningKey) throws -> (bytes: Int, envelope: BundleEnvelope) {
        var envelope = envelope
        envelope.bodyDigest = Array(try output.digest())
        envelope.bodyLength = output.bytesWritten
        envelope.segments = segments
        output.hashing = false
        let encoded = try envelope.encoded()
        let signature = try SSHSignature.sign(
            messageDigest: SHA512.hash(data: encoded), namespace: BundleCodec.signatureNamespace, key: signingKey
        ).blob
        var trailer = encoded + signature
        for length in [encoded.count, signature.count] {
            trailer += [UInt8(length >> 24 & 0xff), UInt8(length >> 16 & 0xff), UInt8(length >> 8 & 0xff), UInt8(length & 0xff)]
        }
        trailer += BundleCodec.trailerMagic
        try output.write(trailer)
        var written = output
        if recipients.isEmpty {
            try output.sync()
        } else {
            try output.flush()
            let encrypted = try HashingFileOutput(creating: Self.temporaryPath(in: directory))
            encrypted.hashing = false
            do {
                try AgeFile.encrypt(
                    plaintext: output.descriptor, length: output.bytesWritten, path: destination, to: recipients, readersKey: readersKey,
                    into: encrypted)
                try encrypted.sync()
            } catch {
                unlink(encrypted.path)
                throw error
            }
            written = encrypted
        }
        if rename(written.path, destination) != 0 {
            if written !== output { unlink(written.path) }
            throw BundleError(
                .io, "\(destination): cannot rename the finished bundle into place: \(String(cString: strerror(errno)))")
        }
        finished = true
        let directoryDescriptor = open(directory, O_RDONLY | O_DIRECTORY)
        if directoryDescriptor >= 0 {
            fsync(directoryDescriptor)
            close(directoryDescriptor)
        }
        return (written.bytesWritten, envelope)
    }
}

/// A segment's records, compressed a chunk at a time into a temporary file while the
/// segment's header (which lists the chunks) is not yet written. Chunks end at a record's
/// end: each is a whole list of records, so a relay could one day leave one out.
final class ChunkFile {
    private let output: HashingFileOutput
    private var pending: [UInt8] = []
    private var pendingRecords = 0
    private(set) var chunks: [SegmentHeader.Chunk] = []
    /// Read once: the limit comes from the environment, which is slow to ask per record.
    private let maxChunkBytes = BundleLimits.maxChunkBytes

    init(directory: String) throws {
        output = try HashingFileOutput(creating: directory + "/.tmp-" + BundleWriter.randomName() + ".chunks")
        output.hashing = false
        unlink(output.path)
        pending.reserveCapacity(BundleLimits.chunkBytes)
    }

    func append(_ record: [UInt8]) throws {
        guard record.count <= maxChunkBytes else {
            throw BundleError(
                .io,
                "a row of \(record.count) bytes is larger than a bundle may carry (SQSYNC_MAX_VALUE_BYTES is \(BundleLimits.maxValueBytes)); it cannot be sent"
            )
        }
        if !pending.isEmpty && pending.count + record.count > BundleLimits.chunkBytes { try flush() }
        pending += record
        pendingRecords += 1
    }

    private func flush() throws {
        guard !pending.isEmpty else { return }
        let compressed = try BlockCompression.compress(pending)
        chunks.append(
            .init(
                rawLength: pending.count, compressedLength: compressed.count, records: pendingRecords,
                digest: Array(SHA256.hash(data: compressed))))
        try output.write(compressed)
        pending.removeAll(keepingCapacity: true)
        pendingRecords = 0
    }

    func finish() throws {
        try flush()
        try output.flush()
    }

    /// Copies the compressed chunks into `destination`.
    func copy(to destination: HashingFileOutput) throws {
        let input = try HashingFileInput(descriptor: output.descriptor, path: output.path, range: 0..<output.bytesWritten)
        var remaining = output.bytesWritten
        while remaining > 0 {
            let part = try input.readBytes(min(remaining, 1 << 18))
            try destination.write(part)
            remaining -= part.count
        }
    }
}
