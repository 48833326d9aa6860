import ChangeLog

/// What `sqsync inspect` shows of each segment, checked against the keys the bundle itself
/// carries (no replica's pins at hand): a key-bound origin's identity by hashing its key,
/// then the moves that follow it.
public enum BundleInspection {
    public struct SegmentSummary {
        public var origin: String
        public var originName: String
        public var base: Int64
        public var last: Int64
        /// "good", or why the origin's signature was not accepted.
        public var signatureText: String
        /// Per table, inserts, updates and deletes; empty unless the signature is good.
        public var counts: [String: [String: Int]]
        /// The labels the segment was cut for (nil: every change of its range), and how many
        /// admin statements its origin named; known only when the signature is good.
        public var scope: [String]? = nil
        public var adminStatements = 0
    }

    /// The admin statements the envelope carries, one line each (escaped), each saying
    /// whether its signature holds; whether its signer is an admin key is the reader's trust.
    public static func adminStatements(of reader: BundleReader) -> [String] {
        reader.envelope.adminStatements.map { bytes in
            guard let statement = try? SignedAdminStatement(bytes: bytes, path: reader.path) else {
                return "a statement whose signature does not verify"
            }
            return displayText(statement.act.summary) + ", by key " + statement.issuer.fingerprint
        }
    }

    public static func segments(of reader: BundleReader) throws -> [SegmentSummary] {
        let envelope = reader.envelope
        var summaries: [SegmentSummary] = []
        do {
            try reader.readSegments(checkOrigin: { entry, signer in
                let origin = envelope.sites[entry.site]
                guard Self.keys(of: origin.id, in: envelope).contains(signer) else {
                    summaries.append(
                        SegmentSummary(
                            origin: origin.id, originName: origin.name, base: entry.base, last: entry.last,
                            signatureText: "not checked: signed by \(signer.fingerprint), not a key this bundle shows for that replica",
                            counts: [:]))
                    return false
                }
                return true
            }) { segment in
                var summary = SegmentSummary(
                    origin: segment.header.changes.origin, originName: segment.header.changes.originName,
                    base: segment.header.changes.base, last: segment.header.changes.last, signatureText: "good", counts: [:],
                    scope: segment.header.changes.scope, adminStatements: segment.header.changes.adminStatements.count)
                try segment.forEachChange { change in
                    let table = segment.header.changes.tables[change.table].name
                    let operation = change.isDelete ? "deletes" : (change.rowStamp != nil ? "inserts" : "updates")
                    summary.counts[table, default: [:]][operation, default: 0] += 1
                }
                summaries.append(summary)
            }
        } catch let error as BundleError {
            guard summaries.count < envelope.segments.count else { throw error }
            let entry = envelope.segments[summaries.count]
            let origin = envelope.sites[entry.site]
            summaries.append(
                SegmentSummary(
                    origin: origin.id, originName: origin.name, base: entry.base, last: entry.last,
                    signatureText: "bad: \(error.description)", counts: [:]))
        }
        return summaries
    }

    /// The keys the bundle shows for a replica: its identity's (checked by hashing where the
    /// ID is key-bound), then each valid move from a key already in the list.
    static func keys(of id: String, in envelope: BundleEnvelope) -> [SSHPublicKey] {
        guard let site = envelope.sites.firstIndex(where: { $0.id == id }),
            let root = envelope.identities.first(where: { $0.site == site }),
            !ReplicaIdentity.isKeyBound(id) || ReplicaIdentity.isBound(id, to: root.key, birth: root.birth)
        else { return [] }
        var keys = [root.key]
        var grew = true
        while grew {
            grew = false
            for move in envelope.moves where move.replica == id && move.isValid && keys.contains(move.from) && !keys.contains(move.to) {
                keys.append(move.to)
                grew = true
            }
        }
        return keys
    }
}
