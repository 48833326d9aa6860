import SQLiteDatabase

/// A replica at a glance: what `sqsync status` shows.
public struct ReplicaStatus: Sendable {
    public struct PeerLag: Sendable {
        public var peer: Peer
        /// Local changes this peer has not acknowledged yet.
        public var unacknowledged: Int
        /// Deletions this peer has not acknowledged, which `purge` must keep for it.
        public var tombstonesHeldBack: Int
    }

    public var knowledgeID: String
    public var name: String
    public var knowledge: Knowledge
    public var trackedTables: [(name: String, rows: Int)]
    public var localChanges: Int
    public var tombstones: Int
    public var peers: [PeerLag]
    public var conflicts: Int
    /// This replica's `PRAGMA user_version`.
    public var schemaVersion: Int64 = 0
}

extension Replica {
    /// `folding`: false when the caller folded already, or chose not to wait for a writer
    /// (``foldUnlessBusy()``).
    public func status(folding: Bool = true) throws -> ReplicaStatus {
        if folding { try fold() }
        return try readSnapshot {
            var tables: [(String, Int)] = []
            for name in try trackedTableNames() {
                tables.append((name, Int(try database.int64("SELECT count(*) FROM \(quoteIdentifier(name))"))))
            }
            let local = Int64(site)
            let count = { (sql: String, values: [SQLValue]) throws -> Int in
                Int(try self.database.int64(sql, values))
            }
            let recordedFrom =
                try database.int64(#"SELECT "changes_from" FROM "_sqsync_sites" WHERE "site" = ?"#, .integer(local))
            var lags: [ReplicaStatus.PeerLag] = []
            try loadPeerScopes()
            for peer in try peers() where !peer.retired {
                let acknowledged = peer.acknowledged[knowledgeID]
                // `_sqsync_changes` answers for peers that acknowledged what it forgot.
                let unacknowledged = try count(
                    acknowledged >= recordedFrom ? StatusSQL.recentLocalChangesAfter : StatusSQL.localChangesAfter,
                    [.integer(local), .integer(acknowledged)])
                let peerSite = try siteNumber(for: peer.knowledgeID, name: nil)
                let vouched = try database.int64(LifecycleSQL.isVouched, .integer(Int64(peerSite))) == 1
                let heldBack = vouched ? try count(StatusSQL.tombstonesNotAcknowledged, [.integer(Int64(peerSite))]) : 0
                lags.append(.init(peer: peer, unacknowledged: unacknowledged, tombstonesHeldBack: heldBack))
            }
            return ReplicaStatus(
                knowledgeID: knowledgeID, name: name, knowledge: try knowledge(), trackedTables: tables,
                localChanges: Int(try knowledge()[knowledgeID]),
                tombstones: try count(StatusSQL.tombstonesWaiting, []),
                peers: lags,
                conflicts: try count(#"SELECT count(*) FROM "_sqsync_conflicts""#, []), schemaVersion: try schemaVersion())
        }
    }
}

enum StatusSQL {
    static let localChangesAfter = """
        SELECT (SELECT count(*) FROM "_sqsync_rows" WHERE "site" = ?1 AND "seq" > ?2)
             + (SELECT coalesce(sum(sqsync_cells_count("cells", "hlc", "site", ?1, ?2)), 0) FROM "_sqsync_rows" WHERE "cells" IS NOT NULL)
        """

    /// The same count through `_sqsync_changes`: entries whose current stamp is a change
    /// it holds.
    static let recentLocalChangesAfter = """
        SELECT (SELECT count(*) FROM "_sqsync_changes" c JOIN "_sqsync_rows" r
                  ON r."tid" = c."tid" AND r."pk" = c."pk" AND r."site" = c."site" AND r."seq" = c."seq"
                WHERE c."site" = ?1 AND c."seq" > ?2)
             + (SELECT coalesce(sum(sqsync_cells_at(e."cells", e."hlc", e."site", c."site", c."seq")), 0)
                FROM "_sqsync_changes" c JOIN "_sqsync_rows" e ON e."tid" = c."tid" AND e."pk" = c."pk"
                WHERE c."site" = ?1 AND c."seq" > ?2 AND e."cells" IS NOT NULL)
        """

    static let tombstonesWaiting = "SELECT count(*) FROM \"_sqsync_rows\" r WHERE \(LifecycleSQL.waiting("r"))"

    static let tombstonesNotAcknowledged = """
        SELECT count(*) FROM "_sqsync_rows" r, (SELECT ?1 AS "site") p
        WHERE \(LifecycleSQL.waiting("r")) AND \(ReachSQL.mayHold(peer: "p", entry: "r"))
          AND r."seq" > coalesce((SELECT a."seq" FROM "_sqsync_acks" a WHERE a."peer" = ?1 AND a."site" = r."site"), 0)
        """
}
