import Foundation

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
}

extension Replica {
    /// What this replica holds: its own sequence number and, for every other site, the
    /// highest sequence number of that site's changes it has applied. Local changes count
    /// once numbered (``numberPendingChanges()``).
    public func knowledge() throws -> Knowledge {
        var seqs: [String: Int64] = [:]
        for row in try database.rows(
            #"SELECT s."knowledge_id", CASE WHEN s."site" = r."site" THEN r."seq" ELSE s."known_seq" END FROM "_sqsync_sites" s, "_sqsync_replica" r"#
        ) {
            seqs[row[0].stringValue ?? ""] = row[1].int64Value ?? 0
        }
        return Knowledge(seqs)
    }

    /// Local site number → knowledge ID, for every site this replica knows.
    func siteIDs() throws -> [Int: String] {
        var ids: [Int: String] = [:]
        for row in try database.rows(#"SELECT "site", "knowledge_id" FROM "_sqsync_sites""#) {
            ids[Int(row[0].int64Value ?? 0)] = row[1].stringValue ?? ""
        }
        return ids
    }

    /// The local number of a site, registering it when first heard of.
    func siteNumber(for knowledgeID: String, name: String?) throws -> Int {
        if let site = try database.scalar(#"SELECT "site" FROM "_sqsync_sites" WHERE "knowledge_id" = ?"#, .text(knowledgeID))?
            .int64Value
        {
            if let name, !name.isEmpty {
                try database.run(
                    #"UPDATE "_sqsync_sites" SET "name" = ? WHERE "site" = ? AND coalesce("name", '') = ''"#, .text(name),
                    .integer(site))
            }
            return Int(site)
        }
        try database.run(
            #"INSERT INTO "_sqsync_sites" ("knowledge_id", "name") VALUES (?, ?)"#,
            .text(knowledgeID), name.map(SQLValue.text) ?? .null)
        return Int(try database.scalar("SELECT last_insert_rowid()")?.int64Value ?? 0)
    }

    /// Every other replica heard of, with what it acknowledged.
    public func peers() throws -> [Peer] {
        var acknowledged: [String: [String: Int64]] = [:]
        for row in try database.rows(
            #"SELECT p."knowledge_id", s."knowledge_id", a."seq" FROM "_sqsync_acks" a JOIN "_sqsync_sites" p ON p."site" = a."peer" JOIN "_sqsync_sites" s ON s."site" = a."site""#
        ) {
            acknowledged[row[0].stringValue ?? "", default: [:]][row[1].stringValue ?? ""] = row[2].int64Value ?? 0
        }
        return try database.rows(
            #"SELECT "knowledge_id", coalesce("name", ''), "last_heard", "retired", "schema_version", "signing_key" FROM "_sqsync_sites" WHERE "site" != ? ORDER BY "name", "knowledge_id""#,
            .integer(Int64(site))
        ).map { row in
            let id = row[0].stringValue ?? ""
            return Peer(
                knowledgeID: id, name: row[1].stringValue ?? "", acknowledged: Knowledge(acknowledged[id] ?? [:]),
                lastHeard: row[2].stringValue, retired: row[3].int64Value == 1, schemaVersion: row[4].int64Value,
                signingKey: row[5].stringValue)
        }
    }

    /// Finds a peer by knowledge ID (or a unique prefix of one) or by name.
    public func peer(named nameOrID: String) throws -> Peer {
        let all = try peers()
        let matches = all.filter { $0.knowledgeID == nameOrID.lowercased() || $0.name == nameOrID }
        let candidates = matches.isEmpty ? all.filter { $0.knowledgeID.hasPrefix(nameOrID.lowercased()) } : matches
        guard candidates.count == 1, let peer = candidates.first else {
            throw ChangeLogError(
                .usage,
                candidates.isEmpty
                    ? "\(path): no peer named \(nameOrID) (see `sqsync peers \(path)`)"
                    : "\(path): \(nameOrID) names several peers; give the knowledge ID")
        }
        return peer
    }

    /// Records that `peer` holds at least `knowledge` (acknowledgements only grow).
    func recordAcknowledgement(peer: Int, _ knowledge: [Int: Int64]) throws {
        for (site, seq) in knowledge where seq > 0 {
            try database.run(
                #"INSERT INTO "_sqsync_acks" ("peer", "site", "seq") VALUES (?, ?, ?) ON CONFLICT DO UPDATE SET "seq" = max("seq", excluded."seq")"#,
                .integer(Int64(peer)), .integer(Int64(site)), .integer(seq))
        }
    }
}

extension Replica {
    /// Mailbox bundle names already imported, with the knowledge each carried.
    public func seenBundles() throws -> [String: Knowledge] {
        var seen: [String: Knowledge] = [:]
        for row in try database.rows(#"SELECT "name", "knowledge" FROM "_sqsync_seen_bundles""#) {
            seen[row[0].stringValue ?? ""] = (try? Knowledge(parsing: row[1].stringValue ?? "")) ?? Knowledge()
        }
        return seen
    }

    public func markSeen(bundle name: String, knowledge: Knowledge) throws {
        try database.run(
            #"INSERT OR REPLACE INTO "_sqsync_seen_bundles" ("name", "knowledge") VALUES (?, ?)"#,
            .text(name), .text(knowledge.description))
    }

    /// Forgets names no longer in any mailbox listing, so the list stays small.
    public func forgetSeen(keeping names: Set<String>) throws {
        for name in try seenBundles().keys where !names.contains(name) {
            try database.run(#"DELETE FROM "_sqsync_seen_bundles" WHERE "name" = ?"#, .text(name))
        }
    }
}
