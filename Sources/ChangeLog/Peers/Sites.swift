import FoundationEssentials
import Glibc
import SQLiteDatabase

/// A replica this one has heard of, directly or through relays.
public struct Peer: Sendable, Equatable {
    public var knowledgeID: String
    public var name: String
    /// What the peer last said it holds; empty when it never said.
    public var acknowledged: Knowledge
    /// When a bundle it sent was last imported here (ISO 8601), if ever.
    public var lastHeard: String?
    public var retired: Bool
    /// The `PRAGMA user_version` its last bundle reported, if any.
    public var schemaVersion: Int64? = nil
    /// The key it signs with (OpenSSH public key line), once pinned (docs/KEYS.md).
    public var signingKey: String?
    /// Another replica its key speaks for, first heard from here after this one was last, and
    /// heard from again since: this one has been silent since, and was likely made again
    /// after a lost disk. `peers retire` releases it; nil while it is heard from as before.
    public var succeededBy: String? = nil
}

extension Replica {
    /// What this replica holds: its own sequence number and, for every other site, the
    /// highest sequence number of that site's changes it has applied. Local changes count
    /// once folded (``fold()``).
    public func knowledge() throws -> Knowledge {
        let stamp = try database.contentStamp()
        if let read = knowledgeRead, read.stamp == stamp { return read.knowledge }
        // Stepped by column index, no row built: an import reads it once per segment.
        var seqs: [String: Int64] = [:]
        let statement = try database.statement(SitesSQL.knowledge)
        while try statement.step() {
            if case .text(let id) = statement.value(at: 0) { seqs[id] = statement.int64(at: 1) }
        }
        let knowledge = Knowledge(seqs)
        knowledgeRead = (stamp, knowledge)
        return knowledge
    }

    /// What this replica holds of one site's changes (its own sequence number for itself): one
    /// entry of ``knowledge()``, read alone.
    func knownSeq(of knowledgeID: String) throws -> Int64 {
        try database.optionalInt64(SitesSQL.knownSeq, .text(knowledgeID)) ?? 0
    }

    /// Local site number → knowledge ID, for every site this replica knows.
    public func siteIDs() throws -> [Int: String] { try sitesRead().ids }

    /// Knowledge ID → local site number, for every site this replica knows.
    func siteNumbers() throws -> [String: Int] { try sitesRead().numbers }

    /// The sites as last read, read again only when they may have changed. A site is only
    /// ever added, never removed nor given another knowledge ID, so the sites read before are
    /// all still there while nothing was rolled back since; the same count and the same
    /// largest number then mean that none was added either. An import's merge asks for them
    /// once per segment, and its own writes change the database in between.
    private func sitesRead() throws -> SitesRead {
        let stamp = try database.contentStamp()
        if let read = sitesReadBefore, read.stamp == stamp { return read }
        let count = try database.int64(SitesSQL.siteCount), largest = try database.int64(SitesSQL.largestSite)
        if var read = sitesReadBefore, read.stamp.rollbacks == stamp.rollbacks, read.count == count, read.largest == largest {
            read.stamp = stamp
            sitesReadBefore = read
            return read
        }
        var read = SitesRead(stamp: stamp, count: count, largest: largest)
        let statement = try database.statement(SitesSQL.siteIDs)
        while try statement.step() {
            if case .text(let id) = statement.value(at: 1) {
                let site = Int(statement.int64(at: 0))
                read.ids[site] = id
                read.numbers[id] = site
            }
        }
        sitesReadBefore = read
        return read
    }

    /// The local number of a site, registering it when first heard of.
    public func siteNumber(for knowledgeID: String, name: String?) throws -> Int {
        if let site = try database.optionalInt64(#"SELECT "site" FROM "_sqsync_sites" WHERE "knowledge_id" = ?"#, .text(knowledgeID)) {
            if let name, !name.isEmpty {
                try database.run(
                    #"UPDATE "_sqsync_sites" SET "name" = ? WHERE "site" = ? AND coalesce("name", '') = ''"#, .text(name),
                    .integer(site))
            }
            return Int(site)
        }
        try database.run(
            SitesSQL.addSite,
            .text(knowledgeID), name.map(SQLValue.text) ?? .null)
        return Int(database.lastInsertRowID)
    }

    /// The local number of a site, if this replica has heard of it.
    func siteNumberIfKnown(_ knowledgeID: String) throws -> Int? {
        try database.optionalInt64(#"SELECT "site" FROM "_sqsync_sites" WHERE "knowledge_id" = ?"#, .text(knowledgeID)).map { Int($0) }
    }

    /// The name this replica knows a replica by (empty when unknown).
    public func siteName(of knowledgeID: String) throws -> String {
        try database.optionalString(#"SELECT "name" FROM "_sqsync_sites" WHERE "knowledge_id" = ?"#, .text(knowledgeID)) ?? ""
    }

    /// Every other replica heard of, with what it acknowledged.
    public func peers() throws -> [Peer] {
        var acknowledged: [String: [String: Int64]] = [:]
        for row in try database.rows(SitesSQL.acknowledgements) {
            acknowledged[try row.string("peer"), default: [:]][try row.string("site")] = try row.int64("seq")
        }
        var successors: [String: String] = [:]
        for row in try database.rows(SitesSQL.successors) {
            if let successor = try row.optionalString("successor") { successors[try row.string("peer")] = successor }
        }
        return try database.rows(SitesSQL.peers, .integer(Int64(site))).map { row in
            let id = try row.string("knowledge_id")
            return Peer(
                knowledgeID: id, name: try row.optionalString("name") ?? "", acknowledged: Knowledge(acknowledged[id] ?? [:]),
                lastHeard: try row.optionalString("last_heard"), retired: try row.bool("retired"),
                schemaVersion: try row.optionalInt64("schema_version"), signingKey: try row.optionalString("signing_key"),
                succeededBy: successors[id])
        }
    }

    /// Finds a peer by knowledge ID (or a unique prefix of one) or by name.
    public func peer(named nameOrID: String) throws -> Peer {
        let all = try peers()
        let matches = all.filter { $0.knowledgeID == nameOrID.lowercased() || $0.name == nameOrID }
        let candidates = matches.isEmpty ? all.filter { $0.knowledgeID.hasPrefix(nameOrID.lowercased()) } : matches
        guard candidates.count == 1, let peer = candidates.first else {
            let names = all.map { $0.name.isEmpty ? $0.knowledgeID : displayText($0.name) }.sorted()
            throw ChangeLogError(
                .noSuchPeer,
                candidates.isEmpty
                    ? "\(path): no peer named \(displayText(nameOrID))"
                        + (names.isEmpty ? " (it knows no peer yet)" : " (its peers: \(names.joined(separator: ", ")))")
                    : "\(path): \(displayText(nameOrID)) names several peers; give the knowledge ID of one: "
                        + candidates.map { "\($0.knowledgeID) (last heard \($0.lastHeard ?? "never")\($0.retired ? ", retired" : ""))" }
                        .joined(separator: ", "))
        }
        return peer
    }

    /// For each origin, the least that any live one of `peers` (not retired, heard from:
    /// ``LifecycleSQL/vouched(_:)``) last said it holds of it, 0 for nothing said; an origin
    /// is absent when no such peer but itself is among them. Cuts of each origin's changes for
    /// a scope start there when its peers lag, so that relays carry them on (docs/SCOPES.md,
    /// "Knowledge and relaying under a scope").
    public func leastAcknowledged(by peers: [String]) throws -> [String: Int64] {
        let stamp = try database.contentStamp()
        if let read = leastAcknowledgedRead, read.stamp == stamp, let least = read.byPeers[peers] { return least }
        let list = String(decoding: try JSONEncoder().encode(peers), as: UTF8.self)
        var least: [String: Int64] = [:]
        for row in try database.rows(SitesSQL.leastAcknowledged, .text(list)) {
            least[try row.string("origin")] = try row.int64("seq")
        }
        var byPeers = leastAcknowledgedRead?.stamp == stamp ? leastAcknowledgedRead?.byPeers ?? [:] : [:]
        byPeers[peers] = least
        leastAcknowledgedRead = (stamp, byPeers)
        return least
    }

    /// Knowledge IDs of retired peers, without reading every acknowledgement.
    public func retiredPeerIDs() throws -> Set<String> {
        Set(try database.rows(#"SELECT "knowledge_id" FROM "_sqsync_sites" WHERE "retired" = 1"#).map { try $0.string("knowledge_id") })
    }

    /// Retired peers with the last change of theirs taken before retirement: later ones are
    /// refused whoever relays them, earlier ones are held already.
    public func retiredPeers() throws -> [String: Int64] {
        var retired: [String: Int64] = [:]
        for row in try database.rows(#"SELECT "knowledge_id", "retired_seq" FROM "_sqsync_sites" WHERE "retired" = 1"#) {
            retired[try row.string("knowledge_id")] = try row.optionalInt64("retired_seq") ?? 0
        }
        return retired
    }

    /// Records that `peer` holds at least `knowledge` (acknowledgements only grow), each
    /// origin's part cut down to what this replica holds of it: a peer's word is believed
    /// only as far as this replica can check it, so a claim of changes not yet seen here
    /// (a stolen key's lie, or news from elsewhere) never stops this replica relaying them
    /// once they arrive, nor lets it purge tombstones early.
    func recordAcknowledgement(peer: Int, _ knowledge: [Int: Int64]) throws {
        for (site, seq) in knowledge where seq > 0 {
            try database.run(SitesSQL.recordAcknowledgement, .integer(Int64(peer)), .integer(Int64(site)), .integer(seq))
        }
    }

    /// Records what another replica said it holds (its signed word: a statement a bundle
    /// carried, or an acknowledgement file left in a mailbox), as if it had come with one of
    /// its bundles: `status`, `export --for` and `purge` then see it, and a replica only
    /// heard of that way becomes a known peer (by name and knowledge ID). Acknowledgements
    /// only grow; this replica's own is ignored.
    ///
    /// `above`: record again only what goes beyond it (what this replica held when it last
    /// recorded the same acknowledgement, which was cut to that): a mailbox's readers each
    /// list every replica, and a sync records them again after every import.
    public func recordAcknowledgement(of knowledgeID: String, name: String, knowledge: Knowledge, above: Knowledge? = nil) throws {
        guard knowledgeID != self.knowledgeID else { return }
        try database.inTransaction {
            let peer = try siteNumber(for: knowledgeID, name: name.isEmpty ? nil : name)
            var seqs: [Int: Int64] = [:]
            for (id, seq) in knowledge.seqs where seq > (above?[id] ?? 0) {
                if let site = try siteNumberIfKnown(id) { seqs[site] = seq }
            }
            try recordAcknowledgement(peer: peer, seqs)
            try recordAdminEvidence(of: knowledgeID, knowledge: knowledge, ownSeq: knowledge[knowledgeID])
        }
    }
}

/// The SQL of sites and acknowledgements, in one place.
enum SitesSQL {
    static let knowledge = """
        SELECT s."knowledge_id", CASE WHEN s."site" = r."site" THEN r."seq" ELSE s."known_seq" END AS "seq"
        FROM "_sqsync_sites" s, "_sqsync_replica" r
        """

    static let knownSeq = """
        SELECT CASE WHEN s."site" = r."site" THEN r."seq" ELSE s."known_seq" END
        FROM "_sqsync_sites" s, "_sqsync_replica" r WHERE s."knowledge_id" = ?
        """

    static let acknowledgements = """
        SELECT p."knowledge_id" AS "peer", s."knowledge_id" AS "site", a."seq"
        FROM "_sqsync_acks" a JOIN "_sqsync_sites" p ON p."site" = a."peer" JOIN "_sqsync_sites" s ON s."site" = a."site"
        """

    /// For each origin, the least acknowledgement of it among the live peers whose knowledge
    /// IDs the JSON array ?1 lists, the origin itself left out.
    static let leastAcknowledged = """
        SELECT o."knowledge_id" AS "origin", min(coalesce(a."seq", 0)) AS "seq"
        FROM json_each(?1) j
        JOIN "_sqsync_sites" p ON p."knowledge_id" = j."value" AND p."retired" = 0 AND \(LifecycleSQL.vouched("p"))
        JOIN "_sqsync_sites" o ON o."site" != p."site"
        LEFT JOIN "_sqsync_acks" a ON a."peer" = p."site" AND a."site" = o."site"
        GROUP BY o."site"
        """

    static let addSite = #"INSERT INTO "_sqsync_sites" ("knowledge_id", "name") VALUES (?, ?)"#
    static let siteIDs = #"SELECT "site", "knowledge_id" FROM "_sqsync_sites""#
    static let siteCount = #"SELECT count(*) FROM "_sqsync_sites""#
    static let largestSite = #"SELECT ifnull(max("site"), 0) FROM "_sqsync_sites""#

    /// For each peer heard from, another its key speaks for, first heard from after it was
    /// last, and heard from again since (a sibling database heard in the same sync is not).
    static let successors = """
        SELECT p."knowledge_id" AS "peer", (
            SELECT q."knowledge_id" FROM "_sqsync_sites" q
            WHERE q."signing_key" = p."signing_key" AND q."site" != p."site" AND q."retired" = 0
                AND q."first_heard" > p."last_heard" AND q."last_heard" > q."first_heard"
            ORDER BY q."first_heard" LIMIT 1) AS "successor"
        FROM "_sqsync_sites" p WHERE p."retired" = 0 AND p."last_heard" IS NOT NULL
        """

    static let peers = """
        SELECT "knowledge_id", "name", "last_heard", "retired", "schema_version", "signing_key"
        FROM "_sqsync_sites" WHERE "site" != ? ORDER BY "name", "knowledge_id"
        """

    static let recordAcknowledgement = """
        INSERT INTO "_sqsync_acks" ("peer", "site", "seq")
        SELECT ?1, s."site", min(?3, CASE WHEN s."site" = r."site" THEN r."seq" ELSE s."known_seq" END)
        FROM "_sqsync_sites" s, "_sqsync_replica" r WHERE s."site" = ?2
        ON CONFLICT DO UPDATE SET "seq" = max("seq", excluded."seq")
        """
}
