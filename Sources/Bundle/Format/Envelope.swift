import ChangeLog
import FoundationEssentials
import Glibc

/// The part of a bundle its sender signs: what the sender says of itself and of the replicas
/// it knows, the keys and statements it passes on, and where each origin's segment lies in
/// the body, with the body's SHA-512 (docs/BUNDLE_FORMAT.md, "Envelope"). It sits at the end
/// of the file, before the signature, so a writer streams the body first; a reader checks the
/// signature over it before it reads anything else.
public struct BundleEnvelope: Sendable, Equatable {
    static let tag = Array("SQSYNC-ENVELOPE-3\n".utf8)

    /// A replica the sender knows. The first is the sender.
    public struct Site: Sendable, Equatable {
        public var id: String
        public var name: String
        /// What the sender held of it (for the sender: its own last sequence number).
        public var knowledge: Int64
        /// What the receiver was assumed to hold.
        public var base: Int64
        /// Its deletions the sender purged up to here.
        public var forgotten: Int64
    }

    /// Where one segment lies in the body, and whose changes it covers.
    public struct SegmentEntry: Sendable, Equatable {
        public var site: Int
        public var base: Int64
        public var last: Int64
        public var offset: Int
        public var length: Int
    }

    /// A key a replica's knowledge ID was made from (``ReplicaIdentity``), or for an ID
    /// made otherwise, the key the sender has bound to it.
    public struct Identity: Sendable, Equatable {
        public var site: Int
        public var key: SSHPublicKey
        /// The replica's birth (``ReplicaIdentity``); empty for an ID made from the key alone.
        public var birth: [UInt8] = []
    }

    public var bodyLength: Int
    public var bodyDigest: [UInt8]
    /// Unix time in milliseconds when the bundle was written.
    public var createdAt: Int64
    public var sites: [Site]
    /// The sender's own last sequence number and clock.
    public var senderSeq: Int64
    public var senderHLC: Int64
    public var schemaVersion: Int64?
    public var identities: [Identity] = []
    public var moves: [KeyMove] = []
    /// Other replicas' own acknowledgement statements, as they signed them.
    public var acknowledgements: [AcknowledgementStatement] = []
    public var segments: [SegmentEntry] = []
    /// Every admin statement the sender holds, as signed (format 4; docs/SCOPES.md).
    public var adminStatements: [[UInt8]] = []
    /// The format version of the file it was read from (not part of the envelope's bytes).
    public var formatVersion: UInt8 = BundleCodec.version

    public var sender: Site { sites[0] }

    /// What the sender says of itself: signed with its key, it speaks for the sender alone.
    public var senderReport: SenderReport {
        var knowledge: [String: Int64] = [:], forgotten: [String: Int64] = [:]
        for site in sites {
            knowledge[site.id] = site.knowledge
            forgotten[site.id] = site.forgotten
        }
        return SenderReport(
            knowledgeID: sender.id, name: sender.name, seq: senderSeq, hlc: senderHLC, knowledge: Knowledge(knowledge),
            forgotten: Knowledge(forgotten), schemaVersion: schemaVersion)
    }

    func encoded() throws -> [UInt8] {
        var bytes = Self.tag
        BundleCodec.appendVarint(bodyLength, to: &bytes)
        bytes += bodyDigest
        BundleCodec.appendVarint(createdAt, to: &bytes)
        BundleCodec.appendVarint(sites.count, to: &bytes)
        var index: [String: Int] = [:]
        for (position, site) in sites.enumerated() {
            index[site.id] = position
            try BundleCodec.appendID(site.id, to: &bytes)
            BundleCodec.appendString(site.name, to: &bytes)
            BundleCodec.appendVarint(site.knowledge, to: &bytes)
            BundleCodec.appendVarint(site.base, to: &bytes)
            BundleCodec.appendVarint(site.forgotten, to: &bytes)
        }
        BundleCodec.appendVarint(senderSeq, to: &bytes)
        BundleCodec.appendVarint(senderHLC, to: &bytes)
        if let schemaVersion {
            bytes.append(1)
            BundleCodec.appendZigzag(schemaVersion, to: &bytes)
        } else {
            bytes.append(0)
        }
        BundleCodec.appendVarint(identities.count, to: &bytes)
        for identity in identities {
            BundleCodec.appendVarint(identity.site, to: &bytes)
            bytes += identity.key.rawRepresentation
            BundleCodec.appendVarint(identity.birth.count, to: &bytes)
            bytes += identity.birth
        }
        BundleCodec.appendVarint(moves.count, to: &bytes)
        for move in moves {
            guard let site = index[move.replica] else { throw BundleError(.io, "a key move of a replica the bundle does not list") }
            BundleCodec.appendVarint(site, to: &bytes)
            bytes += move.from.rawRepresentation + move.to.rawRepresentation
            BundleCodec.appendVarint(move.afterSeq, to: &bytes)
            bytes += move.signature
        }
        // Each statement's knowledge as it differs from the sender's: replicas in step with
        // the sender cost a few bytes each.
        BundleCodec.appendVarint(acknowledgements.count, to: &bytes)
        for statement in acknowledgements {
            guard let site = index[statement.replica] else {
                throw BundleError(.io, "a statement of a replica the bundle does not list")
            }
            BundleCodec.appendVarint(site, to: &bytes)
            BundleCodec.appendVarint(statement.counter, to: &bytes)
            BundleCodec.appendVarint(statement.countersFolded, to: &bytes)
            var differences: [(Int, Int64)] = []
            for (position, listed) in sites.enumerated() where statement.knowledge[listed.id] != listed.knowledge {
                differences.append((position, statement.knowledge[listed.id]))
            }
            guard statement.knowledge.seqs.keys.allSatisfy({ index[$0] != nil }) else {
                throw BundleError(.io, "a statement naming a replica the bundle does not list")
            }
            BundleCodec.appendVarint(differences.count, to: &bytes)
            for (position, seq) in differences {
                BundleCodec.appendVarint(position, to: &bytes)
                BundleCodec.appendVarint(seq, to: &bytes)
            }
            bytes += statement.signature
        }
        BundleCodec.appendVarint(segments.count, to: &bytes)
        for segment in segments {
            BundleCodec.appendVarint(segment.site, to: &bytes)
            BundleCodec.appendVarint(segment.base, to: &bytes)
            BundleCodec.appendVarint(segment.last, to: &bytes)
            BundleCodec.appendVarint(segment.offset, to: &bytes)
            BundleCodec.appendVarint(segment.length, to: &bytes)
        }
        BundleCodec.appendVarint(adminStatements.count, to: &bytes)
        for statement in adminStatements {
            BundleCodec.appendVarint(statement.count, to: &bytes)
            bytes += statement
        }
        return bytes
    }

    /// Decodes an envelope whose signature has been checked.
    static func decode(_ bytes: [UInt8], path: String, version: UInt8 = BundleCodec.version) throws -> BundleEnvelope {
        guard Array(bytes.prefix(tag.count)) == tag else {
            throw BundleError(.corrupt, "\(path): damaged bundle (the signed envelope lacks its tag)")
        }
        let source = ArraySource(Array(bytes.dropFirst(tag.count)), path: path)
        let bodyLength = try source.readCount(limit: Int.max >> 1)
        let bodyDigest = try source.readBytes(64)
        let createdAt = try source.readInt64()
        let siteCount = try source.readCount(limit: BundleLimits.maxSites)
        guard siteCount >= 1 else { throw source.corrupt("no sender") }
        var sites: [Site] = []
        sites.reserveCapacity(siteCount)
        for _ in 0..<siteCount {
            sites.append(
                Site(
                    id: try source.readID(), name: try source.readString(limit: 1024), knowledge: try source.readInt64(),
                    base: try source.readInt64(), forgotten: try source.readInt64()))
        }
        guard Set(sites.map(\.id)).count == sites.count else { throw source.corrupt("a replica listed twice") }
        var envelope = BundleEnvelope(
            bodyLength: bodyLength, bodyDigest: bodyDigest, createdAt: createdAt, sites: sites,
            senderSeq: try source.readInt64(), senderHLC: try source.readInt64(),
            schemaVersion: try source.readByte() == 1 ? try source.readZigzag() : nil)
        for _ in 0..<(try source.readCount(limit: siteCount)) {
            let site = try source.readIndex(below: siteCount, "replica")
            let key = try SSHPublicKey(rawRepresentation: try source.readBytes(32))
            // Version 5 gives each identity its birth (at most 32 bytes); earlier ones had none.
            let birth = version >= 5 ? try source.readBytes(try source.readCount(limit: 32)) : []
            envelope.identities.append(Identity(site: site, key: key, birth: birth))
        }
        for _ in 0..<(try source.readCount(limit: 64 * siteCount)) {
            let site = try source.readIndex(below: siteCount, "replica")
            envelope.moves.append(
                KeyMove(
                    replica: sites[site].id, from: try SSHPublicKey(rawRepresentation: try source.readBytes(32)),
                    to: try SSHPublicKey(rawRepresentation: try source.readBytes(32)), afterSeq: try source.readInt64(),
                    signature: try source.readBytes(64)))
        }
        let statementCount = try source.readCount(limit: siteCount)
        guard statementCount * siteCount <= BundleLimits.maxStatementEntries else {
            throw source.corrupt("\(statementCount) acknowledgement statements of \(siteCount) replicas each, more than a reader holds")
        }
        for _ in 0..<statementCount {
            let site = try source.readIndex(below: siteCount, "replica")
            let counter = try source.readInt64(), folded = try source.readInt64()
            var seqs: [String: Int64] = [:]
            for listed in sites { seqs[listed.id] = listed.knowledge }
            for _ in 0..<(try source.readCount(limit: siteCount)) {
                seqs[sites[try source.readIndex(below: siteCount, "replica")].id] = try source.readInt64()
            }
            envelope.acknowledgements.append(
                AcknowledgementStatement(
                    replica: sites[site].id, counter: counter, countersFolded: folded, knowledge: Knowledge(seqs),
                    signature: try source.readBytes(64)))
        }
        for _ in 0..<(try source.readCount(limit: 1 << 20)) {
            envelope.segments.append(
                SegmentEntry(
                    site: try source.readIndex(below: siteCount, "replica"), base: try source.readInt64(),
                    last: try source.readInt64(), offset: try source.readCount(limit: bodyLength),
                    length: try source.readCount(limit: bodyLength)))
        }
        envelope.formatVersion = version
        if version >= 4 {
            for _ in 0..<(try source.readCount(limit: SignedAdminStatement.maxCount)) {
                envelope.adminStatements.append(try source.readBytes(try source.readCount(limit: SignedAdminStatement.maxBytes)))
            }
        }
        guard source.isAtEnd else { throw source.corrupt("bytes after the envelope") }
        var end = BundleCodec.magic.count + 1
        for segment in envelope.segments {
            guard segment.offset == end, segment.length > 0, segment.base <= segment.last else {
                throw source.corrupt("segments that do not follow one another")
            }
            end += segment.length
        }
        guard end == bodyLength else { throw source.corrupt("segments that do not fill the body") }
        return envelope
    }
}
