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
            try database.run(LifecycleSQL.dropRelayedSegments, .integer(Int64(site)))
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

    /// The conflict log, oldest first.
    public func conflicts() throws -> [[String: SQLValue]] {
        let statement = try database.statement(LifecycleSQL.conflicts)
        var result: [[String: SQLValue]] = []
        while try statement.step() {
            var row: [String: SQLValue] = [:]
            for index in 0..<statement.columnCount { row[statement.columnName(index)] = statement.value(at: index) }
            result.append(row)
        }
        return result
    }

    /// A conflict's key as values (the log keeps it as SQL literals), nil when unreadable.
    public static func conflictKey(_ text: String) -> [SQLValue]? { KeyCodec.decodeLiterals(text) }

    /// Knowledge ID → name, for every replica heard of that has one (this one included).
    public func replicaNames() throws -> [String: String] {
        var names: [String: String] = [knowledgeID: name]
        for row in try database.rows(#"SELECT "knowledge_id", "name" FROM "_sqsync_sites" WHERE coalesce("name", '') != ''"#) {
            names[try row.string("knowledge_id")] = try row.string("name")
        }
        return names
    }

    public func clearConflicts() throws -> Int {
        try database.execute(#"DELETE FROM "_sqsync_conflicts""#)
        return database.changes
    }

    /// Child rows whose parent is missing (a parent deleted while a child was added elsewhere).
    /// `rowid` is nil for a WITHOUT ROWID table.
    public func orphans() throws -> [(table: String, rowid: Int64?, parent: String)] {
        try database.rows(#"SELECT "table", "rowid", "parent" FROM pragma_foreign_key_check"#).map {
            (try $0.string("table"), try $0.optionalInt64("rowid"), try $0.string("parent"))
        }
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

    /// Relayed change sets every live peer (but this replica, ?1) has acknowledged.
    static let dropRelayedSegments = """
        DELETE FROM "_sqsync_segments" AS g WHERE NOT EXISTS (
            SELECT 1 FROM "_sqsync_sites" p
            WHERE p."site" != ?1 AND p."retired" = 0
              AND coalesce((SELECT a."seq" FROM "_sqsync_acks" a WHERE a."peer" = p."site" AND a."site" = g."site"), 0) < g."last")
        """

    static let purgeTombstones = """
        DELETE FROM "_sqsync_rows" AS r WHERE \(purgeable)
        """

    /// Column clocks of dead rows carry nothing: the fold and imports drop them with the
    /// delete; this clears any left by a write that bypassed both.
    static let dropCellsOfDeadRows = """
        UPDATE "_sqsync_rows" SET "cells" = NULL WHERE "cl" % 2 = 0 AND "cells" IS NOT NULL
        """

    static let conflicts = """
        SELECT "id", "recorded_at", "kind", "table_name", "pk", "column_name", "lost_value", "lost_row",
               "lost_site", "lost_hlc", "won_site", "won_hlc"
        FROM "_sqsync_conflicts" ORDER BY "id"
        """
}

extension Replica {
    /// Notes in the conflict log that a held bundle was dropped, so the user can see why
    /// its changes never arrived.
    public func recordDroppedBundle(path: String, reason: String) throws {
        try database.run(
            #"INSERT INTO "_sqsync_conflicts" ("kind", "table_name", "pk", "lost_row", "lost_site", "lost_hlc") VALUES ('held bundle dropped', '', '', ?, '', 0)"#,
            .text(path + ": " + reason))
    }
}
