import ChangeLog
import SQLiteDatabase
import Crypto
import Foundation

/// Opens a bundle file: reads its trailer and header, verifies its signature against the
/// payload, and streams its row changes (docs/BUNDLE_FORMAT.md). Nothing is trusted before
/// ``verify(trust:)`` succeeds. Not Sendable on purpose.
public final class BundleReader {
    public let path: String
    public let header: ChangeSetHeader
    /// Unix time in milliseconds when the bundle was written.
    public let createdAt: Int64
    public let signature: SSHSignature
    public let payloadLength: Int
    public let fileSize: Int
    /// The format version: 1 stores records as they are, 2 in deflate blocks.
    public let version: UInt8
    private let recordsOffset: Int
    /// The bundle declares the merge-policies capability (column policies, counter records).
    private let hasPolicies: Bool
    /// The payload's SHA-512 once ``verify(trust:)`` succeeded, so nothing reads it again.
    public private(set) var verifiedDigest: SHA512.Digest?

    public init(path: String) throws {
        self.path = path
        var status = stat()
        guard stat(path, &status) == 0 else {
            throw BundleError(.io, "\(path): cannot read: \(String(cString: strerror(errno)))")
        }
        guard status.st_mode & S_IFMT == S_IFREG else { throw BundleError(.io, "\(path): not a regular file") }
        fileSize = Int(status.st_size)
        let trailerEnd = BundleCodec.trailerMagic.count + 4
        guard fileSize >= BundleCodec.magic.count + trailerEnd else {
            throw BundleError(.corrupt, "\(path): not a bundle (too short)")
        }
        let tail = try Self.read(path, range: (fileSize - BundleCodec.trailerMagic.count)..<fileSize)
        guard tail == BundleCodec.trailerMagic else {
            throw BundleError(
                .corrupt, "\(path): not a complete bundle (no signature trailer at the end: truncated, or bytes appended)")
        }
        let magicStart = fileSize - BundleCodec.trailerMagic.count
        let lengthBytes = try Self.read(path, range: (magicStart - 4)..<magicStart)
        let signatureLength = lengthBytes.reduce(0) { $0 << 8 | Int($1) }
        guard signatureLength > 0, signatureLength <= 4096, signatureLength <= magicStart - 4 - BundleCodec.magic.count else {
            throw BundleError(.corrupt, "\(path): damaged bundle (signature length \(signatureLength))")
        }
        payloadLength = magicStart - 4 - signatureLength
        do {
            signature = try SSHSignature(blob: try Self.read(path, range: payloadLength..<(magicStart - 4)))
        } catch let error as KeyFormatError {
            throw BundleError(.corrupt, "\(path): damaged signature (\(error.description))")
        }

        let input = try HashingFileInput(path: path, range: 0..<payloadLength)
        guard try input.readBytes(BundleCodec.magic.count) == BundleCodec.magic else {
            throw BundleError(.corrupt, "\(path): not an sqsync bundle (wrong magic)")
        }
        version = try input.readByte()
        guard BundleCodec.readableVersions.contains(version) else {
            throw BundleError(
                .corrupt,
                "\(path): bundle format version \(version) is not supported (this sqsync reads versions \(BundleCodec.readableVersions.map(String.init).joined(separator: " and "))); \(version > BundleCodec.version ? "upgrade sqsync" : "export it again with a current sqsync")"
            )
        }
        let capabilityCount = try input.readCount(limit: 64)
        var capabilities: Set<String> = []
        for _ in 0..<capabilityCount {
            let capability = try input.readString()
            capabilities.insert(capability)
            guard BundleCodec.knownCapabilities.contains(capability) else {
                throw BundleError(
                    .corrupt,
                    "\(path): the bundle needs capability \(capability.debugDescription), which this sqsync lacks; upgrade sqsync"
                )
            }
        }
        let headerLength = try input.readCount(limit: payloadLength)
        let headerSource = ArraySource(try input.readBytes(headerLength), path: path)
        (header, createdAt) = try Self.decodeHeader(
            headerSource, version: version, policies: capabilities.contains(BundleCodec.mergePolicies))
        hasPolicies = capabilities.contains(BundleCodec.mergePolicies)
        guard headerSource.isAtEnd else { throw headerSource.corrupt("unexpected bytes after the header") }
        recordsOffset = input.consumed
    }

    private static func read(_ path: String, range: Range<Int>) throws -> [UInt8] {
        let input = try HashingFileInput(path: path, range: range)
        return try input.readBytes(range.count)
    }

    static func decodeHeader(_ source: ArraySource, version: UInt8, policies: Bool = false) throws -> (ChangeSetHeader, Int64) {
        let siteCount = try source.readCount(limit: 1 << 20)
        guard siteCount >= 1 else { throw source.corrupt("no sender") }
        var sites: [String] = [], names: [String] = [], knowledge: [Int64] = [], base: [Int64] = [], forgotten: [Int64] = []
        for _ in 0..<siteCount {
            sites.append(try source.readString())
            names.append(try source.readString())
            knowledge.append(try source.readInt64())
            base.append(try source.readInt64())
            forgotten.append(try source.readInt64())
        }
        guard Set(sites).count == sites.count else { throw source.corrupt("a site listed twice") }
        let senderSeq = try source.readInt64()
        let senderHLC = try source.readInt64()
        let createdAt = try source.readInt64()
        var acknowledgements: [Acknowledgement] = []
        for _ in 0..<(try source.readCount(limit: siteCount)) {
            let peer = try source.readIndex(below: siteCount, "peer")
            var seqs: [Int64] = []
            for _ in 0..<siteCount { seqs.append(try source.readInt64()) }
            acknowledgements.append(Acknowledgement(peer: peer, seqs: seqs))
        }
        var tables: [TableSchema] = []
        for _ in 0..<(try source.readCount(limit: 1 << 16)) {
            let name = try source.readString()
            var columns: [String] = []
            for _ in 0..<(try source.readCount(limit: 1 << 16)) { columns.append(try source.readString()) }
            var key: [Int] = []
            for _ in 0..<(try source.readCount(limit: columns.count)) {
                key.append(try source.readIndex(below: columns.count, "key column"))
            }
            guard !key.isEmpty else { throw source.corrupt("table \(name) without a key") }
            tables.append(TableSchema(name: name, columns: columns, primaryKey: key))
        }
        var learned: [Int: LearningEvent] = [:]
        var schemaVersion: Int64?
        if version >= 2 {
            for _ in 0..<(try source.readCount(limit: siteCount)) {
                let site = try source.readIndex(below: siteCount, "learned site")
                guard learned[site] == nil else { throw source.corrupt("a learned site listed twice") }
                learned[site] = LearningEvent(
                    previous: try source.readInt64(), reached: try source.readInt64(), ownSeq: try source.readInt64())
            }
            schemaVersion = try source.readZigzag()
        }
        var header = ChangeSetHeader(
            sites: sites, siteNames: names, knowledge: knowledge, base: base, forgotten: forgotten, senderSeq: senderSeq,
            senderHLC: senderHLC, acknowledgements: acknowledgements, tables: tables, senderLearned: learned,
            schemaVersion: schemaVersion)
        // Signed statements come after the schema version within format 2: a header that ends
        // before them has none.
        if version >= 2 && !source.isAtEnd {
            for _ in 0..<(try source.readCount(limit: 1 << 20)) {
                header.statements.append(try source.readBytes(try source.readCount(limit: 1 << 16)))
            }
        }
        if policies {
            for _ in 0..<(try source.readCount(limit: 1 << 20)) {
                let table = try source.readIndex(below: header.tables.count, "policy table")
                let column = try source.readIndex(below: header.tables[table].columns.count, "policy column")
                guard let policy = MergePolicy(code: try source.readByte()) else { throw source.corrupt("unknown merge policy") }
                header.tables[table].policies[column] = policy
            }
        }
        return (header, createdAt)
    }

    /// The payload's SHA-512, read in one streaming pass.
    public func payloadDigest() throws -> SHA512.Digest {
        let input = try HashingFileInput(path: path, range: 0..<payloadLength)
        try input.drain()
        return input.digest()
    }

    /// Checks the signature over the whole payload and that its key is trusted for the
    /// `sqsync` namespace. Returns the signer's principal name.
    @discardableResult
    public func verify(trust: AllowedSigners) throws -> String {
        guard signature.namespace == BundleCodec.signatureNamespace else {
            throw BundleError(.untrusted, "\(path): signed for namespace \(signature.namespace.debugDescription), not \"sqsync\"")
        }
        let digest = try payloadDigest()
        guard signature.isValid(messageDigest: digest, namespace: BundleCodec.signatureNamespace) else {
            throw BundleError(.untrusted, "\(path): bad signature: the bundle was altered after it was signed")
        }
        guard let principal = trust.principal(for: signature.publicKey, namespace: BundleCodec.signatureNamespace) else {
            throw BundleError(
                .untrusted,
                "\(path): signed by an untrusted key \(signature.publicKey.fingerprint); add the signer's line to allowed_signers to trust it"
            )
        }
        verifiedDigest = digest
        return principal
    }

    /// The signed payload bytes, streamed to `destination` (for `ssh-keygen -Y verify`).
    public func extractPayload(to destination: String) throws {
        let input = try HashingFileInput(path: path, range: 0..<payloadLength)
        let output = try HashingFileOutput(creating: destination)
        var remaining = payloadLength
        while remaining > 0 {
            let chunk = try input.readBytes(min(remaining, 1 << 18))
            try output.write(chunk)
            remaining -= chunk.count
        }
        try output.sync()
    }

    /// Streams every row change in file order. After a successful ``verify(trust:)`` it
    /// also checks that the bytes it read are the bytes that were verified.
    public func forEachChange(_ body: (RowChange) throws -> Void) throws {
        let input = try HashingFileInput(path: path, range: 0..<payloadLength)
        _ = try input.readBytes(recordsOffset)
        if version >= 2 {
            let records = InflatingSource(input)
            try readRecords(from: records, body)
            try records.expectEnd()
        } else {
            try readRecords(from: input, body)
        }
        guard input.isAtEnd else { throw input.corrupt("bytes after the end record") }
        if let verifiedDigest, input.digest() != verifiedDigest {
            throw BundleError(.untrusted, "\(path): the file changed while it was being imported")
        }
    }

    /// Decodes records up to and including the end record.
    private func readRecords<Source: ByteSource>(from input: Source, _ body: (RowChange) throws -> Void) throws {
        var previousHLC: Int64 = 0, previousSeq: Int64 = 0
        let siteCount = header.sites.count
        func readStamp() throws -> Stamp {
            let hlc = previousHLC &+ (try input.readZigzag())
            let site = try input.readIndex(below: siteCount, "site")
            let seq = previousSeq &+ (try input.readZigzag())
            previousHLC = hlc
            previousSeq = seq
            return Stamp(hlc: hlc, site: site, seq: seq)
        }
        let nonKeyColumns = header.tables.map(BundleCodec.nonKeyColumns)
        var count = 0
        var tableIndex = -1
        while true {
            let first = try input.readByte()
            if first == BundleCodec.endRecord { break }
            let flags = BundleCodec.RowFlags(rawValue: first)
            guard flags.contains(.row), BundleCodec.RowFlags.known.isSuperset(of: flags) else {
                throw input.corrupt("unknown record type \(first)")
            }
            if flags.contains(.sameTable) {
                guard tableIndex >= 0 else { throw input.corrupt("no previous table") }
            } else {
                tableIndex = try input.readIndex(below: header.tables.count, "table")
            }
            let table = header.tables[tableIndex]
            let causalLength = try input.readInt64()
            guard causalLength > 0 else { throw input.corrupt("causal length 0") }
            let rowStamp = flags.contains(.hasRowStamp) ? try readStamp() : nil
            guard rowStamp != nil || !flags.contains(.columnsShareRowStamp) else {
                throw input.corrupt("shared stamp without a row stamp")
            }
            var key: [SQLValue] = []
            key.reserveCapacity(table.primaryKey.count)
            for _ in table.primaryKey { key.append(try input.readValue()) }
            var columns: [ColumnChange] = []
            let inOrder = flags.contains(.allColumnsInOrder)
            let columnCount = inOrder ? nonKeyColumns[tableIndex].count : try input.readCount(limit: table.columns.count)
            columns.reserveCapacity(columnCount)
            for position in 0..<columnCount {
                let column =
                    inOrder ? nonKeyColumns[tableIndex][position] : try input.readIndex(below: table.columns.count, "column")
                let value = try input.readValue()
                if flags.contains(.columnsShareRowStamp), let rowStamp {
                    columns.append(ColumnChange(column: column, value: value, stamp: rowStamp))
                    continue
                }
                let explicit = try input.readByte()
                guard explicit <= 1 else { throw input.corrupt("bad stamp flag") }
                let stamp: Stamp
                if explicit == 1 {
                    stamp = try readStamp()
                } else {
                    guard let rowStamp else { throw input.corrupt("column without a stamp") }
                    stamp = rowStamp
                }
                columns.append(ColumnChange(column: column, value: value, stamp: stamp))
            }
            var counters: [CounterChange] = []
            if flags.contains(.hasCounters) {
                guard hasPolicies else { throw input.corrupt("counter contributions without the merge-policies capability") }
                for _ in 0..<(try input.readCount(limit: table.columns.count * siteCount)) {
                    let column = try input.readIndex(below: table.columns.count, "counter column")
                    guard table.policies[column] == .counter else { throw input.corrupt("counter contributions to a non-counter column") }
                    let stamp = try readStamp()
                    let folded = try input.readInt64()
                    let total = try input.readValue()
                    counters.append(CounterChange(column: column, total: total, folded: folded, stamp: stamp))
                }
            }
            try body(
                RowChange(
                    table: tableIndex, key: key, causalLength: causalLength, rowStamp: rowStamp, columns: columns,
                    counters: counters))
            count += 1
        }
        guard try input.readCount() == count else { throw input.corrupt("record count does not match") }
    }
}
