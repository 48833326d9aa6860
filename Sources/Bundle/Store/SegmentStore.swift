import ChangeLog
import Foundation
import SQLiteDatabase

/// Other replicas' signed segments this replica keeps, byte for byte, to relay them to a
/// peer that lacks them: only while some live peer has not acknowledged them (purge drops
/// them then), and only where a peer other than their origin and their sender may need
/// them: between two replicas nothing is kept.
struct SegmentStore {
    let replica: Replica
    private var database: Database { replica.database }

    init(_ replica: Replica) throws {
        try BundleTables.ready(replica)
        self.replica = replica
    }

    /// Drops the segments every live peer (but this replica) has acknowledged: `purge`.
    func dropAcknowledged() throws {
        try database.run(StoreSQL.dropAcknowledged, .integer(Int64(replica.site)))
    }

    struct Stored {
        var rowid: Int64
        var origin: String
        var base: Int64
        var last: Int64
        var createdHLC: Int64
        var records: Int
        var length: Int
        /// The labels it was cut for; nil: every row.
        var scope: [String]?
    }

    /// How the `scope` column names a segment's scope.
    static func scopeText(_ scope: [String]?) throws -> String {
        guard let scope else { return "*" }
        return String(decoding: try JSONEncoder().encode(scope.sorted()), as: UTF8.self)
    }

    static func scope(ofText text: String) throws -> [String]? {
        text == "*" ? nil : try JSONDecoder().decode([String].self, from: Data(text.utf8))
    }

    /// True when a live peer other than this replica, the origin and the sender has not
    /// acknowledged the origin's changes through `last`.
    func isNeeded(origin: String, last: Int64, sender: String) throws -> Bool {
        try database.int64(StoreSQL.isNeeded, .text(origin), .text(sender), .integer(last), .integer(Int64(replica.site))) == 1
    }

    /// Keeps a segment, streamed by `bytes` (called with a consumer), unless the same is kept.
    func keep(
        origin: String, base: Int64, last: Int64, createdHLC: Int64, records: Int, length: Int, scope: [String]? = nil,
        bytes: (([UInt8]) throws -> Void) throws -> Void
    ) throws {
        let site = try replica.siteNumber(for: origin, name: nil)
        try database.run(
            StoreSQL.insert, .integer(Int64(site)), .integer(base), .integer(last), .integer(createdHLC),
            .integer(Int64(records)), .text(try Self.scopeText(scope)), .integer(Int64(length)))
        guard database.changes == 1 else { return }
        let blob = try database.openBlob(table: "_sqsync_segments", column: "bytes", rowid: database.lastInsertRowID, writable: true)
        var offset = 0
        try bytes { part in
            try blob.write(part, at: offset)
            offset += part.count
        }
    }

    /// The segments of `origin` with changes after `base`, oldest first.
    func segments(of origin: String, after base: Int64) throws -> [Stored] {
        try database.rows(StoreSQL.segments, .text(origin), .integer(base)).map {
            Stored(
                rowid: try $0.int64("id"), origin: origin, base: try $0.int64("first"), last: try $0.int64("last"),
                createdHLC: try $0.int64("created_hlc"), records: try $0.int("records"), length: try $0.int("length"),
                scope: try Self.scope(ofText: try $0.string("scope")))
        }
    }

    /// Streams a kept segment's bytes.
    func read(_ stored: Stored, to consumer: ([UInt8]) throws -> Void) throws {
        let blob = try database.openBlob(table: "_sqsync_segments", column: "bytes", rowid: stored.rowid, writable: false)
        var offset = 0
        while offset < blob.count {
            let part = try blob.read(at: offset, count: min(1 << 18, blob.count - offset))
            try consumer(part)
            offset += part.count
        }
    }
}

enum StoreSQL {
    /// ?1 origin, ?2 sender, ?3 last, ?4 this replica's site.
    static let isNeeded = """
        SELECT EXISTS (
            SELECT 1 FROM "_sqsync_sites" p
            WHERE p."site" != ?4 AND p."retired" = 0 AND p."knowledge_id" NOT IN (?1, ?2)
              AND coalesce((SELECT a."seq" FROM "_sqsync_acks" a JOIN "_sqsync_sites" o ON o."site" = a."site"
                            WHERE a."peer" = p."site" AND o."knowledge_id" = ?1), 0) < ?3)
        """
    /// ?1 this replica's site.
    static let dropAcknowledged = """
        DELETE FROM "_sqsync_segments" AS g WHERE NOT EXISTS (
            SELECT 1 FROM "_sqsync_sites" p
            WHERE p."site" != ?1 AND p."retired" = 0
              AND coalesce((SELECT a."seq" FROM "_sqsync_acks" a WHERE a."peer" = p."site" AND a."site" = g."site"), 0) < g."last")
        """
    static let insert = """
        INSERT OR IGNORE INTO "_sqsync_segments" ("site", "first", "last", "created_hlc", "records", "scope", "bytes")
        VALUES (?, ?, ?, ?, ?, ?, zeroblob(?))
        """
    static let segments = """
        SELECT g."id", g."first", g."last", g."created_hlc", g."records", g."scope", length(g."bytes") AS "length"
        FROM "_sqsync_segments" g JOIN "_sqsync_sites" s ON s."site" = g."site"
        WHERE s."knowledge_id" = ? AND g."last" > ? ORDER BY g."first", g."last"
        """
}
