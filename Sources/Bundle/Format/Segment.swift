import ChangeLog
import Crypto
import FoundationEssentials
import Glibc

/// One origin's signed changes as a bundle carries them (docs/BUNDLE_FORMAT.md, "Segments"):
/// a header the origin signs, then the records in compressed chunks the header lists by
/// SHA-256. A relay copies a segment byte for byte; a receiver checks the origin's signature
/// on the header, and each chunk against the header before it inflates it.
public struct SegmentHeader: Sendable, Equatable {
    static let tag = Array("SQSYNC-SEGMENT-3\n".utf8)

    /// One chunk of records: at most ``BundleLimits/chunkBytes`` raw, but one larger row.
    public struct Chunk: Sendable, Equatable {
        public var rawLength: Int
        public var compressedLength: Int
        public var records: Int
        /// SHA-256 of the compressed bytes.
        public var digest: [UInt8]
    }

    public var changes: ChangeSetHeader
    public var chunks: [Chunk]

    public var recordCount: Int { chunks.reduce(0) { $0 + $1.records } }

    /// The header as the origin signs it.
    func encoded() throws -> [UInt8] {
        var bytes = Self.tag
        try BundleCodec.appendID(changes.origin, to: &bytes)
        BundleCodec.appendString(changes.originName, to: &bytes)
        BundleCodec.appendVarint(changes.base, to: &bytes)
        BundleCodec.appendVarint(changes.last, to: &bytes)
        BundleCodec.appendVarint(changes.createdHLC, to: &bytes)
        if let version = changes.schemaVersion {
            bytes.append(1)
            BundleCodec.appendZigzag(version, to: &bytes)
        } else {
            bytes.append(0)
        }
        var capabilities = changes.tables.contains(where: \.hasPolicies) ? [BundleCodec.mergePolicies] : []
        if !changes.adminStatements.isEmpty { capabilities.append(BundleCodec.adminStatements) }
        if changes.scope != nil { capabilities.append(BundleCodec.scope) }
        if changes.carriesReach { capabilities.append(BundleCodec.reach) }
        BundleCodec.appendVarint(capabilities.count, to: &bytes)
        for capability in capabilities { BundleCodec.appendString(capability, to: &bytes) }
        let knowledge = changes.originKnowledge.seqs.filter { $0.value > 0 }.sorted { $0.key < $1.key }
        BundleCodec.appendVarint(knowledge.count, to: &bytes)
        for (id, seq) in knowledge {
            try BundleCodec.appendID(id, to: &bytes)
            BundleCodec.appendVarint(seq, to: &bytes)
        }
        let learned = changes.learned.sorted { $0.key < $1.key }
        BundleCodec.appendVarint(learned.count, to: &bytes)
        for (id, event) in learned {
            try BundleCodec.appendID(id, to: &bytes)
            BundleCodec.appendVarint(event.previous, to: &bytes)
            BundleCodec.appendVarint(event.reached, to: &bytes)
            BundleCodec.appendVarint(event.ownSeq, to: &bytes)
        }
        BundleCodec.appendVarint(changes.tables.count, to: &bytes)
        for table in changes.tables {
            BundleCodec.appendString(table.name, to: &bytes)
            BundleCodec.appendVarint(table.columns.count, to: &bytes)
            for column in table.columns { BundleCodec.appendString(column, to: &bytes) }
            BundleCodec.appendVarint(table.primaryKey.count, to: &bytes)
            for index in table.primaryKey { BundleCodec.appendVarint(index, to: &bytes) }
            if table.hasPolicies {
                bytes.append(1)
                for policy in table.policies { bytes.append(policy.code) }
            } else {
                bytes.append(0)
            }
        }
        BundleCodec.appendVarint(chunks.count, to: &bytes)
        for chunk in chunks {
            BundleCodec.appendVarint(chunk.rawLength, to: &bytes)
            BundleCodec.appendVarint(chunk.compressedLength, to: &bytes)
            BundleCodec.appendVarint(chunk.records, to: &bytes)
            bytes += chunk.digest
        }
        if !changes.adminStatements.isEmpty {
            BundleCodec.appendVarint(changes.adminStatements.count, to: &bytes)
            for id in changes.adminStatements { bytes += id }
        }
        if let scope = changes.scope {
            BundleCodec.appendVarint(scope.count, to: &bytes)
            for label in scope { BundleCodec.appendString(label, to: &bytes) }
        }
        return bytes
    }

    /// Decodes a header whose origin signature has been checked; `path` names the file in
    /// messages. Refuses anything malformed, and tables that are SQLite's or sqsync's own.
    static func decode(_ bytes: [UInt8], path: String) throws -> SegmentHeader {
        guard Array(bytes.prefix(tag.count)) == tag else {
            throw BundleError(.corrupt, "\(path): damaged bundle (a segment header without its tag)")
        }
        let source = ArraySource(Array(bytes.dropFirst(tag.count)), path: path)
        let origin = try source.readID()
        let originName = try source.readString(limit: 1024)
        let base = try source.readInt64()
        let last = try source.readInt64()
        guard base <= last else { throw source.corrupt("a segment whose range ends before it begins") }
        let created = try source.readInt64()
        let schemaVersion: Int64? = try source.readByte() == 1 ? try source.readZigzag() : nil
        var capabilities: Set<String> = []
        for _ in 0..<(try source.readCount(limit: 64)) {
            let capability = try source.readString(limit: 256)
            guard BundleCodec.knownCapabilities.contains(capability) else {
                throw BundleError(
                    .corrupt,
                    "\(path): the bundle needs capability \(displayText(capability).debugDescription), which this sqsync lacks; upgrade sqsync"
                )
            }
            capabilities.insert(capability)
        }
        var knowledge: [String: Int64] = [:]
        for _ in 0..<(try source.readCount(limit: BundleLimits.maxSites)) { knowledge[try source.readID()] = try source.readInt64() }
        var learned: [String: LearningEvent] = [:]
        for _ in 0..<(try source.readCount(limit: BundleLimits.maxSites)) {
            learned[try source.readID()] = LearningEvent(
                previous: try source.readInt64(), reached: try source.readInt64(), ownSeq: try source.readInt64())
        }
        var tables: [TableSchema] = []
        var names: Set<String> = []
        for _ in 0..<(try source.readCount(limit: 1 << 16)) {
            let name = try source.readString(limit: 4096)
            guard !Self.isInternal(name) else {
                throw BundleError(
                    .untrusted,
                    "\(path): the bundle writes to table \(displayText(name).debugDescription), one of SQLite's or sqsync's own; refusing it"
                )
            }
            guard names.insert(name.lowercased()).inserted else { throw source.corrupt("table \(displayText(name)) listed twice") }
            var columns: [String] = []
            for _ in 0..<(try source.readCount(limit: 32_767)) { columns.append(try source.readString(limit: 4096)) }
            guard Set(columns.map { $0.lowercased() }).count == columns.count else {
                throw source.corrupt("a column of \(displayText(name)) listed twice")
            }
            var key: [Int] = []
            for _ in 0..<(try source.readCount(limit: columns.count)) {
                key.append(try source.readIndex(below: columns.count, "key column"))
            }
            guard !key.isEmpty else { throw source.corrupt("table \(displayText(name)) without a key") }
            var table = TableSchema(name: name, columns: columns, primaryKey: key)
            switch try source.readByte() {
            case 0: break
            case 1:
                guard capabilities.contains(BundleCodec.mergePolicies) else {
                    throw source.corrupt("merge policies without the merge-policies capability")
                }
                for index in columns.indices {
                    guard let policy = MergePolicy(code: try source.readByte()) else { throw source.corrupt("unknown merge policy") }
                    table.policies[index] = policy
                }
            default: throw source.corrupt("bad policy flag")
            }
            tables.append(table)
        }
        var chunks: [Chunk] = []
        for _ in 0..<(try source.readCount(limit: 1 << 20)) {
            let raw = try source.readCount()
            guard raw <= BundleLimits.maxChunkBytes else {
                // Only a row larger than this replica's cap makes a chunk this long: the sender's cap is
                // larger. The row itself is past what may be read; the segment's tables are named.
                let tableNames = tables.map { displayText($0.name) }
                let inTable =
                    tableNames.count == 1 ? " in table \(tableNames[0])" : " in one of the tables \(tableNames.joined(separator: ", "))"
                let from = originName.isEmpty ? origin : "\(displayText(originName)) (\(origin))"
                throw BundleError(
                    .overCap,
                    "\(source.path): a row of \(raw) bytes\(inTable) from replica \(from), larger than this replica's SQSYNC_MAX_VALUE_BYTES (\(BundleLimits.maxValueBytes)) allows; refusing the bundle (the sender's cap is larger: use one cap on every replica)"
                )
            }
            let compressed = try source.readCount(limit: BlockCompression.bound(BundleLimits.maxChunkBytes))
            let records = try source.readCount(limit: raw)
            guard raw > 0, compressed > 0, records > 0 else { throw source.corrupt("an empty chunk") }
            chunks.append(Chunk(rawLength: raw, compressedLength: compressed, records: records, digest: try source.readBytes(32)))
        }
        var adminStatements: [[UInt8]] = []
        if capabilities.contains(BundleCodec.adminStatements) {
            for _ in 0..<(try source.readCount(limit: SignedAdminStatement.maxCount)) { adminStatements.append(try source.readBytes(16)) }
        }
        var scope: [String]?
        if capabilities.contains(BundleCodec.scope) {
            var labels: [String] = []
            for _ in 0..<(try source.readCount(limit: 1 << 16)) { labels.append(try source.readString(limit: 4096)) }
            scope = labels
        }
        guard source.isAtEnd else { throw source.corrupt("bytes after a segment header") }
        var changes = ChangeSetHeader(
            origin: origin, originName: originName, base: base, last: last, createdHLC: created,
            originKnowledge: Knowledge(knowledge), learned: learned, schemaVersion: schemaVersion, tables: tables)
        changes.adminStatements = adminStatements
        changes.scope = scope
        changes.carriesReach = capabilities.contains(BundleCodec.reach)
        return SegmentHeader(changes: changes, chunks: chunks)
    }

    /// SQLite's tables and sqsync's own are never a bundle's to write.
    static func isInternal(_ table: String) -> Bool {
        let name = table.lowercased()
        return name.hasPrefix("sqlite_") || name.hasPrefix("_sqsync_")
    }

    /// The origin's signature covers the header's SHA-512.
    func sign(with key: SigningKey) throws -> (header: [UInt8], signature: [UInt8]) {
        let header = try encoded()
        return (header, try SignedMessage.sign(header, key: key))
    }
}
