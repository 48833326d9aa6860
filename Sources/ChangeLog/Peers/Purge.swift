import SQLiteDatabase

/// What `purge` dropped, or would drop.
public struct PurgeResult: Sendable {
    public var tombstones: Int
    /// Counter entries folded into their values (docs/MERGE_RULES.md).
    public var counterEntries: Int = 0
    /// Live peers that have not acknowledged every remaining deletion.
    public var heldBackBy: [Peer]
}

extension Replica {
    /// Drops deletions every live peer has acknowledged and remembers, per site, up to where
    /// it forgot them: a replica that knows less than that is refused later (it could still
    /// hold rows deleted here) instead of being merged into wrong data. Folds counter entries
    /// the same way, so they stay one per replica per cell and go once acknowledged.
    public func purge(dryRun: Bool) throws -> PurgeResult {
        try database.inTransaction(commit: !dryRun) {
            try fold()
            try database.run(LifecycleSQL.rememberForgotten, .integer(Int64(site)))
            try database.run(LifecycleSQL.purgeTombstones, .integer(Int64(site)))
            let purged = database.changes
            try database.execute(LifecycleSQL.dropCellsOfDeadRows)
            let folded = try foldCounters()
            let holders = try status().peers.filter { $0.tombstonesHeldBack > 0 }.map(\.peer)
            return PurgeResult(tombstones: purged, counterEntries: folded, heldBackBy: holders)
        }
    }

    /// Forgets a peer for good: it no longer holds back purges, and its bundles are refused.
    public func retire(peer nameOrID: String) throws -> Peer {
        let peer = try peer(named: nameOrID)
        try database.inTransaction {
            let number = try siteNumber(for: peer.knowledgeID, name: nil)
            // Its changes up to what this replica holds of it stay good; later ones are refused,
            // whoever relays them.
            try database.run(
                #"UPDATE "_sqsync_sites" SET "retired" = 1, "retired_seq" = "known_seq" WHERE "site" = ?"#,
                .integer(Int64(number)))
            try database.run(#"DELETE FROM "_sqsync_acks" WHERE "peer" = ?"#, .integer(Int64(number)))
        }
        return peer
    }
}

enum LifecycleSQL {
    /// A deletion is purgeable once no live peer (other than this replica) lacks it.
    private static let purgeable = """
        r."cl" % 2 = 0 AND NOT EXISTS (
            SELECT 1 FROM "_sqsync_sites" p
            WHERE p."site" != ?1 AND p."retired" = 0
              AND coalesce((SELECT a."seq" FROM "_sqsync_acks" a WHERE a."peer" = p."site" AND a."site" = r."site"), 0) < r."seq")
        """

    /// Per site, the latest deletion purged. One pass over the tombstones, which lie in key
    /// order (`_sqsync_tombstones`), not one per site.
    static let rememberForgotten = """
        UPDATE "_sqsync_sites" SET "forgotten_seq" = max("forgotten_seq", "latest"."seq")
        FROM (SELECT r."site", max(r."seq") AS "seq" FROM "_sqsync_rows" r WHERE \(purgeable) GROUP BY r."site") AS "latest"
        WHERE "latest"."site" = "_sqsync_sites"."site"
        """

    static let purgeTombstones = """
        DELETE FROM "_sqsync_rows" AS r WHERE \(purgeable)
        """

    /// Column clocks of dead rows carry nothing: the fold and imports drop them with the
    /// delete; this clears any left by a write that bypassed both.
    static let dropCellsOfDeadRows = """
        UPDATE "_sqsync_rows" SET "cells" = NULL WHERE "cl" % 2 = 0 AND "cells" IS NOT NULL
        """
}
