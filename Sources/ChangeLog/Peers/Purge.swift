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
    /// Retires the deletions every live peer has acknowledged: they no longer wait for anyone
    /// (`status` stops counting them, nothing is held back for them). Each keeps its row's
    /// causal length and the stamp of its delete, about 30 bytes, for good: a row inserted
    /// again under that key starts a life above it, a deletion that comes again (a relay keeps
    /// its origin's segments for replicas met later) changes nothing, and a replica that joins
    /// later, holding a row under that key, gets the deletion with its origin's next checkpoint
    /// (docs/MERGE_RULES.md, "Purge"). Folds counter entries every peer holds, so they stay one
    /// per replica per cell.
    public func purge(dryRun: Bool) throws -> PurgeResult {
        try database.inTransaction(commit: !dryRun) {
            try fold()
            try loadPeerScopes()
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
    /// A deletion is purgeable once no live peer (other than this replica) that may hold its
    /// row lacks it (``ReachSQL/mayHold(peer:entry:)``, after ``Replica/loadPeerScopes()``). A purged
    /// one keeps its entry, its "cells" an empty blob (no column clocks, as NULL says for a
    /// deletion waiting).
    private static let purgeable = """
        \(waiting("r")) AND NOT EXISTS (
            SELECT 1 FROM "_sqsync_sites" p
            WHERE p."site" != ?1 AND p."retired" = 0 AND \(vouched("p")) AND \(ReachSQL.mayHold(peer: "p", entry: "r"))
              AND coalesce((SELECT a."seq" FROM "_sqsync_acks" a WHERE a."peer" = p."site" AND a."site" = r."site"), 0) < r."seq")
        """

    /// Whether the site `alias` ever spoke for itself here (it sent a bundle, its own signed
    /// changes were merged, or it signed an acknowledgement; a clone made here counts, as its
    /// source records one for it): a replica only listed in another's envelope, never seen
    /// signing anything, holds back no purge. A trusted key could otherwise list replicas that
    /// never answer (docs/SCOPES.md, "Purge").
    static func vouched(_ alias: String) -> String {
        """
        (\(alias)."last_heard" IS NOT NULL OR \(alias)."known_seq" > 0
         OR EXISTS (SELECT 1 FROM "_sqsync_acks" v WHERE v."peer" = \(alias)."site"))
        """
    }

    static let isVouched = "SELECT \(vouched("p")) FROM \"_sqsync_sites\" p WHERE p.\"site\" = ?"

    static let purgeTombstones = """
        UPDATE "_sqsync_rows" AS r SET "cells" = x'' WHERE \(purgeable)
        """

    /// Deletions still waiting for a peer (a purged one's "cells" is an empty blob), of the
    /// entries `_sqsync_rows` named `alias`.
    static func waiting(_ alias: String) -> String { "\(alias).\"cl\" % 2 = 0 AND \(alias).\"cells\" IS NULL" }

    /// Column clocks of dead rows carry nothing: the fold and imports drop them with the
    /// delete; this clears any left by a write that bypassed both.
    static let dropCellsOfDeadRows = """
        UPDATE "_sqsync_rows" SET "cells" = NULL WHERE "cl" % 2 = 0 AND "cells" IS NOT NULL AND "cells" != x''
        """
}
