import ChangeLog
import FoundationEssentials
import Glibc
import SQLiteDatabase

/// Other replicas' signed segments this replica keeps, byte for byte, to serve whoever lacks
/// them, met yet or not (docs/BUNDLE_FORMAT.md, "What a relay keeps"): every segment it
/// merged, or held for a scope within its own. Of one origin's segments for one scope it keeps
/// the fewest whose ranges still cover what the others covered (the newest of equal ranges),
/// so a checkpoint of the origin's (a segment from its first change) replaces all it covers,
/// and what is kept stays bounded by the origin's data, not its history
/// (``ChangeLog/Checkpoints``). A purge drops nothing here: a replica that joins later needs it.
struct SegmentStore {
    let replica: Replica
    private var database: Database { replica.database }

    init(_ replica: Replica) throws {
        try BundleTables.ready(replica)
        self.replica = replica
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

    /// How the `scope` column names a segment's scope: its one text form.
    static func scopeText(_ scope: [String]?) -> String { Scope(scope).text }

    static func scope(ofText text: String) throws -> [String]? { try Scope(text: text).sorted }

    /// What ``keep(origin:base:last:createdHLC:records:length:scope:bytes:)`` did.
    enum Kept {
        /// One of the same range and scope as new was kept already.
        case already
        case kept
        /// It took the place of an older one of the same range and scope: the origin cut that
        /// range again, or another file under its identity cut it otherwise.
        case replacingSameRange
    }

    /// The admin statements a segment names, in the form the `words` column keeps them.
    static func wordsText(_ statements: [[UInt8]]) -> String { statements.map { hexString($0) }.sorted().joined(separator: ",") }

    /// Keeps a segment, streamed by `bytes` (called with a consumer), unless one of the same
    /// range and scope is kept that is as new; then drops what it makes redundant.
    ///
    /// `statements`: the admin statements its header names (nil: not known). One origin's
    /// segments covering a number in common name the same ones (each lies in one epoch of its
    /// origin, cuts included), so when a kept one names others, two files signed them under
    /// its identity, one of them perhaps with its numbers set back: `namedOtherwise` is called
    /// with the first number they share, once, when this segment is newly kept (segments kept
    /// before this was recorded say nothing).
    @discardableResult
    func keep(
        origin: String, base: Int64, last: Int64, createdHLC: Int64, records: Int, length: Int, scope: [String]? = nil,
        statements: [[UInt8]]? = nil, namedOtherwise: ((Int64) throws -> Void)? = nil,
        bytes: (([UInt8]) throws -> Void) throws -> Void
    ) throws -> Kept {
        let site = try replica.siteNumber(for: origin, name: nil)
        let scopeText = Self.scopeText(scope)
        let words = statements.map(Self.wordsText)
        let firstNamedOtherwise = try words.flatMap {
            try database.optionalInt64(StoreSQL.namedOtherwise, .integer(Int64(site)), .integer(base), .integer(last), .text($0))
        }
        let replacing = try database.int64(
            StoreSQL.olderOfTheSameRange, .integer(Int64(site)), .integer(base), .integer(last), .text(scopeText), .integer(createdHLC)
        ) == 1
        try database.run(
            StoreSQL.replaceOlder, .integer(Int64(site)), .integer(base), .integer(last), .text(scopeText), .integer(createdHLC))
        try database.run(
            StoreSQL.insert, .integer(Int64(site)), .integer(base), .integer(last), .integer(createdHLC),
            .integer(Int64(records)), .text(scopeText), .integer(Int64(length)), words.map(SQLValue.text) ?? .null)
        guard database.changes == 1 else { return .already }
        do {
            // Closed before anything else runs on the connection (a savepoint waits for it).
            let blob = try database.openBlob(table: "_sqsync_segments", column: "bytes", rowid: database.lastInsertRowID, writable: true)
            var offset = 0
            try bytes { part in
                try blob.write(part, at: offset)
                offset += part.count
            }
        }
        try dropRedundant(site: site, scopeText: scopeText)
        if let firstNamedOtherwise, let namedOtherwise { try namedOtherwise(firstNamedOtherwise) }
        return replacing ? .replacingSameRange : .kept
    }

    /// Drops every segment of one origin and scope that the fewest covering the same ranges
    /// leave out (``cover(of:after:)`` from nothing).
    private func dropRedundant(site: Int, scopeText: String) throws {
        let group = try database.rows(StoreSQL.group, .integer(Int64(site)), .text(scopeText)).map {
            Stored(
                rowid: try $0.int64("id"), origin: "", base: try $0.int64("first"), last: try $0.int64("last"),
                createdHLC: try $0.int64("created_hlc"), records: 0, length: 0, scope: nil)
        }
        var kept = Self.cover(of: group, after: -1)
        // Past a gap a replica keeps a few segments (it counts them once the gap is filled),
        // not any number a stolen key could sign far ahead: the lowest first.
        if let pastGap = kept.indices.dropFirst().first(where: { kept[$0].base > kept[$0 - 1].last }) {
            kept = Array(kept.prefix(pastGap + Self.keptBeyondAGap))
        }
        let keptIDs = Set(kept.map(\.rowid))
        for stored in group where !keptIDs.contains(stored.rowid) {
            try database.run(StoreSQL.drop, .integer(stored.rowid))
        }
    }

    /// Drops one kept segment (one that no longer checks).
    func drop(_ stored: Stored) throws { try database.run(StoreSQL.drop, .integer(stored.rowid)) }

    /// How many segments of one origin and scope a replica keeps past the first gap.
    static let keptBeyondAGap = 16

    /// The key that signed a kept segment (it stands after the segment's header), if readable.
    func signer(of stored: Stored) throws -> SSHPublicKey? {
        let blob = try database.openBlob(table: "_sqsync_segments", column: "bytes", rowid: stored.rowid, writable: false)
        let head = try blob.read(at: 0, count: min(10, blob.count))
        var headerLength = 0, shift = 0, index = 0
        while index < head.count {
            headerLength |= Int(head[index] & 0x7f) << shift
            shift += 7
            index += 1
            if head[index - 1] & 0x80 == 0 { break }
        }
        let offset = index + headerLength
        guard offset + 32 <= blob.count else { return nil }
        return try? SSHPublicKey(rawRepresentation: try blob.read(at: offset, count: 32))
    }

    /// The fewest of `segments` (one origin's, one scope's) that carry everything after
    /// `base` any of them carries: from `base` on, the one that reaches furthest among those
    /// that continue what is covered; past a gap, the longest that starts there. Oldest first.
    static func cover(of segments: [Stored], after base: Int64) -> [Stored] {
        let ordered = segments.filter { $0.last > base }.sorted {
            ($0.base, -$0.last, -$0.createdHLC) < ($1.base, -$1.last, -$1.createdHLC)
        }
        var chosen: [Stored] = []
        var reach = base
        var index = 0
        while index < ordered.count {
            if ordered[index].last <= reach {
                index += 1
            } else if ordered[index].base > reach {
                chosen.append(ordered[index])
                reach = ordered[index].last
                index += 1
            } else {
                var best = ordered[index]
                while index < ordered.count && ordered[index].base <= reach {
                    // Of those that reach as far, the shortest (it carries least), then the newest.
                    let candidate = ordered[index]
                    if (candidate.last, candidate.base, candidate.createdHLC) > (best.last, best.base, best.createdHLC) {
                        best = candidate
                    }
                    index += 1
                }
                chosen.append(best)
                reach = best.last
            }
        }
        return chosen
    }

    /// How far `segments` (one origin's) cut for `scope` reach from its first change without a
    /// gap: what this replica can serve of that origin.
    static func reach(of segments: [Stored], scope: [String]?) throws -> Int64 {
        let wanted = Scope(scope)
        var reach: Int64 = 0
        for segment in cover(of: segments.filter { Scope($0.scope) == wanted }, after: 0) {
            guard segment.base <= reach else { break }
            reach = max(reach, segment.last)
        }
        return reach
    }

    /// Every kept segment, by origin, oldest range first: one read of the table (not of the bytes).
    func byOrigin() throws -> [String: [Stored]] {
        Dictionary(grouping: try database.rows(StoreSQL.all).map { try Self.stored($0, origin: try $0.string("knowledge_id")) }) {
            $0.origin
        }
    }

    /// Every kept segment of `origin`, oldest range first.
    func segments(of origin: String) throws -> [Stored] {
        try database.rows(StoreSQL.segments, .text(origin)).map { try Self.stored($0, origin: origin) }
    }

    private static func stored(_ row: Row, origin: String) throws -> Stored {
        Stored(
            rowid: try row.int64("id"), origin: origin, base: try row.int64("first"), last: try row.int64("last"),
            createdHLC: try row.int64("created_hlc"), records: try row.int("records"), length: try row.int("length"),
            scope: try scope(ofText: try row.string("scope")))
    }

    /// The origins with a kept segment that begins past what this replica holds of them, and
    /// where the first such begins: the ranges this replica lacks though it holds later ones.
    /// One query, not a row per kept segment: every sync reports them.
    func gaps() throws -> [(origin: String, holds: Int64, nextKept: Int64)] {
        try database.rows(StoreSQL.gaps).map { (try $0.string("origin"), try $0.int64("holds"), try $0.int64("next_kept")) }
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

    /// Bytes kept, for `make bench`.
    func keptBytes() throws -> Int64 { try database.int64(StoreSQL.keptBytes) }
}

enum StoreSQL {
    static let olderOfTheSameRange = """
        SELECT EXISTS (SELECT 1 FROM "_sqsync_segments"
            WHERE "site" = ?1 AND "first" = ?2 AND "last" = ?3 AND "scope" = ?4 AND "created_hlc" < ?5)
        """
    /// A kept segment of the same range and scope that is older than ?5 goes.
    static let replaceOlder = """
        DELETE FROM "_sqsync_segments" WHERE "site" = ?1 AND "first" = ?2 AND "last" = ?3 AND "scope" = ?4 AND "created_hlc" < ?5
        """
    static let insert = """
        INSERT OR IGNORE INTO "_sqsync_segments" ("site", "first", "last", "created_hlc", "records", "scope", "bytes", "words")
        VALUES (?, ?, ?, ?, ?, ?, zeroblob(?), ?)
        """
    /// The first number (after ?2, through ?3) a kept segment of site ?1 covers that names
    /// other statements than ?4.
    static let namedOtherwise = """
        SELECT min(max("first", ?2) + 1) FROM "_sqsync_segments"
        WHERE "site" = ?1 AND "words" IS NOT NULL AND "words" != ?4 AND "first" < ?3 AND "last" > ?2
        """
    static let drop = #"DELETE FROM "_sqsync_segments" WHERE "id" = ?"#
    static let keptBytes = #"SELECT coalesce(sum(length("bytes")), 0) FROM "_sqsync_segments""#
    static let group = """
        SELECT "id", "first", "last", "created_hlc" FROM "_sqsync_segments" WHERE "site" = ? AND "scope" = ?
        """
    static let segments = """
        SELECT g."id", g."first", g."last", g."created_hlc", g."records", g."scope", length(g."bytes") AS "length"
        FROM "_sqsync_segments" g JOIN "_sqsync_sites" s ON s."site" = g."site"
        WHERE s."knowledge_id" = ? ORDER BY g."first", g."last"
        """
    static let gaps = """
        SELECT s."knowledge_id" AS "origin", h."holds", min(g."first") AS "next_kept"
        FROM "_sqsync_segments" g JOIN "_sqsync_sites" s ON s."site" = g."site"
        JOIN (SELECT s2."site", CASE WHEN s2."site" = r."site" THEN r."seq" ELSE s2."known_seq" END AS "holds"
              FROM "_sqsync_sites" s2, "_sqsync_replica" r) h ON h."site" = g."site"
        WHERE g."first" > h."holds"
        GROUP BY g."site" ORDER BY s."knowledge_id"
        """
    static let all = """
        SELECT s."knowledge_id", g."id", g."first", g."last", g."created_hlc", g."records", g."scope",
               length(g."bytes") AS "length"
        FROM "_sqsync_segments" g JOIN "_sqsync_sites" s ON s."site" = g."site" ORDER BY g."first", g."last"
        """
}
