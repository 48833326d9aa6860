import SQLiteDatabase

/// Finds an origin that numbered two different changes alike. One replica numbers each change
/// once, with a clock later than every earlier change's (``Replica/fold()``), so of two of its
/// stamps the higher number has the later clock, and one number has one clock. Two stamps
/// signed by the origin that disagree were made by two files under its identity (a backup
/// restored over it, a `cp` copy) or by a second holder of its key. A third replica sees this
/// where neither file does: it compares every stamp it merges with the origin's
/// highest-numbered stamp it merged before (kept in `_sqsync_sites`), and with the highest of
/// the set so far for its number only. (Entries an sqsync before the capture log left
/// unnumbered were numbered rows first, then cells, each by clock: within such a history a
/// cell can carry a higher number and an earlier clock than a row, so order is judged only
/// against what was merged before, where that history ends.)
public struct OriginNumbering {
    typealias Point = (seq: Int64, hlc: Int64)

    /// The highest-numbered stamp merged before this set.
    let before: Point?
    /// The highest-numbered stamp seen, this set included.
    private(set) var top: Point?
    /// The first stamp found at odds with another: its number, and the other's.
    private(set) var clash: (seq: Int64, other: Int64)?

    init(before: Point?) {
        self.before = before
        top = before
    }

    mutating func see(_ stamp: Stamp) {
        if clash == nil {
            if let before, Self.disagree(stamp, before) {
                clash = (stamp.seq, before.seq)
            } else if let top, stamp.seq == top.seq, stamp.hlc != top.hlc {
                clash = (stamp.seq, top.seq)
            }
        }
        if top == nil || stamp.seq > top!.seq { top = (stamp.seq, stamp.hlc) }
    }

    /// A change found at odds with the one held here under the same number (the same row's).
    mutating func noteClash(at seq: Int64) {
        if clash == nil { clash = (seq, seq) }
    }

    /// The lowest number among `stamps` (one origin's, from any of its files) that two files
    /// cannot share: one number with two clocks, or a number whose clock is later than a
    /// higher number's. Where two files part, every later change of each is numbered above
    /// that point with a clock later than everything before it, so the point lies below the
    /// number returned; nil: the stamps fit one history.
    public static func firstNumberInQuestion(_ stamps: [(seq: Int64, hlc: Int64)]) -> Int64? {
        let ordered = stamps.sorted { ($0.seq, $0.hlc) < ($1.seq, $1.hlc) }
        var first: Int64?
        // From the highest number down: the earliest clock of any higher number.
        var earliestAbove = Int64.max
        var index = ordered.count - 1
        while index >= 0 {
            let seq = ordered[index].seq
            var start = index
            while start > 0 && ordered[start - 1].seq == seq { start -= 1 }
            let clocks = ordered[start...index].map(\.hlc)
            if clocks.first != clocks.last || clocks.last! > earliestAbove { first = seq }
            earliestAbove = min(earliestAbove, clocks.first!)
            index = start - 1
        }
        return first
    }

    /// Equal clocks under two numbers are let be: entries numbered by an older sqsync's
    /// migration may share their clock.
    private static func disagree(_ stamp: Stamp, _ point: Point) -> Bool {
        (stamp.seq == point.seq && stamp.hlc != point.hlc) || (stamp.seq < point.seq && stamp.hlc > point.hlc)
            || (stamp.seq > point.seq && stamp.hlc < point.hlc)
    }
}

extension Replica {
    /// The origin's highest-numbered stamp merged here (``OriginNumbering``).
    func topStamp(of site: Int) throws -> OriginNumbering.Point? {
        guard let row = try database.row(NumberingSQL.top, .integer(Int64(site))),
            let seq = try row.optionalInt64("top_seq"), let hlc = try row.optionalInt64("top_hlc")
        else { return nil }
        return (seq, hlc)
    }

    /// Keeps what a merge found (``OriginNumbering``): the new top, and a clash, noted once
    /// per origin in the conflict log, where every sync finds it
    /// (``standingNumberedTwice()``) until the log is cleared or the origin retired.
    ///
    /// A replica that holds every row then announces again what the origin wrote here from
    /// the first number in question on (``announceWritesAgain(of:from:)``).
    func recordNumbering(_ numbering: OriginNumbering, site: Int, origin: String) throws {
        if let top = numbering.top, top.seq > numbering.before?.seq ?? 0 {
            try database.run(NumberingSQL.raiseTop, .integer(Int64(site)), .integer(top.seq), .integer(top.hlc))
        }
        guard let clash = numbering.clash else { return }
        try noteNumberedTwice(origin, at: min(clash.seq, clash.other))
        try announceWritesAgain(of: origin, from: min(clash.seq, clash.other))
    }

    /// Announces again, as this replica's own writes, what `origin` wrote here under its
    /// numbers from `seq` on, where it is found to have numbered two different changes alike;
    /// only at a replica that holds every row (``holdsEveryRow()``), and once from each lower
    /// number found, until the conflict log is cleared (what it announced carries its own
    /// stamp since, and is not announced again). Relays keep one segment per range, so the
    /// two versions of a range do not both travel under the origin's name: a replica that
    /// took one (a scoped reader relayed the other file's cut, the restored file itself once
    /// `reidentify` gave it a new identity) would never be sent the other's rows. Under this
    /// replica's name they reach everyone, and merge as any write does. The first number in
    /// question is where the two versions were first seen to differ, which may lie above
    /// where they part, so a relay that finds a lower one
    /// (``OriginNumbering/firstNumberInQuestion(_:)``) announces again from there.
    public func announceWritesAgain(of origin: String, from seq: Int64) throws {
        guard let announced = try database.row(NumberingSQL.announcedFrom, .text(origin)).map({ try $0.optionalInt64("won_hlc") })
        else { return }
        // Notes written before announcements were counted from a number say 1: from the first.
        if let announced, announced <= seq { return }
        try announceWritesAgain(of: origin, from: seq, through: .max)
        try database.run(NumberingSQL.markAnnounced, .text(origin), .integer(max(seq, 1)))
    }

    /// Announces again what `origin` wrote here under its numbers from `seq` through `last`,
    /// whatever was announced before: what a merge of another file's cut just wrote under the
    /// origin's name (``ChangeMerger/wholeLivesOnly``), which only a replica that never held the other
    /// file's numbers would otherwise take.
    public func announceWritesAgain(of origin: String, from seq: Int64, through last: Int64) throws {
        guard let site = try siteNumberIfKnown(origin), try holdsEveryRow() else { return }
        try database.inTransaction {
            for table in try trackedTables(skippingMissing: true) {
                try logWritesAgain(of: table, by: site, after: seq - 1, through: last)
            }
            try fold()
        }
    }

    /// The first of `stamps` (`origin`'s, from a segment this replica keeps but did not merge)
    /// at odds with the origin's highest-numbered stamp merged here: one number with two
    /// clocks, or a clock that went the other way from it. nil: none, or nothing merged yet.
    public func firstStampAtOdds(with origin: String, among stamps: [(seq: Int64, hlc: Int64)]) throws -> Int64? {
        guard let site = try siteNumberIfKnown(origin), let top = try topStamp(of: site) else { return nil }
        var numbering = OriginNumbering(before: top)
        for stamp in stamps.sorted(by: { $0.seq < $1.seq }) {
            numbering.see(Stamp(hlc: stamp.hlc, site: site, seq: stamp.seq))
            if let clash = numbering.clash { return min(clash.seq, clash.other) }
        }
        return nil
    }

    /// Origins found here to have numbered two changes alike, not retired, whose note stands.
    public func originsNumberedTwice() throws -> [String] {
        try database.rows(NumberingSQL.standingOrigins).map { try $0.string("lost_site") }
    }

    /// The same, each with the number at which it was found.
    public func originsNumberedTwiceFrom() throws -> [String: Int64] {
        Dictionary(
            try database.rows(NumberingSQL.standingOriginsFrom).map { (try $0.string("lost_site"), try $0.int64("found_at")) }
        ) { first, _ in first }
    }

    /// Notes, once per origin, that `origin` signed two different changes under its number
    /// `seq` or about it.
    public func noteNumberedTwice(_ origin: String, at seq: Int64) throws {
        let message =
            "replica \(try siteLabel(origin)) signed two different changes under the same numbers (at its change \(seq)): a backup restored over its file, a copy of it made with cp, or its key in other hands. Where it was restored or copied, run `sqsync reidentify` on that file; if its key may be stolen, `sqsync peers retire` it everywhere and give it a new key (`sqsync conflicts --clear` ends this message)"
        try database.run(NumberingSQL.recordClash, .text(origin), .integer(seq), .text(message))
    }

    /// Origins found to have numbered two changes alike (``OriginNumbering``), not retired
    /// here, and still in the conflict log: one sentence each, which every sync repeats.
    public func standingNumberedTwice() throws -> [String] {
        try database.rows(NumberingSQL.standing).map { try $0.string("lost_row") }
    }
}

enum NumberingSQL {
    static let kind = "numbered twice"

    static let top = #"SELECT "top_seq", "top_hlc" FROM "_sqsync_sites" WHERE "site" = ?"#

    static let raiseTop = """
        UPDATE "_sqsync_sites" SET "top_seq" = ?2, "top_hlc" = ?3 WHERE "site" = ?1 AND coalesce("top_seq", 0) < ?2
        """

    static let recordClash = """
        INSERT INTO "_sqsync_conflicts" ("kind", "table_name", "pk", "lost_row", "lost_site", "lost_hlc")
        SELECT '\(kind)', '', '', ?3, ?1, ?2
        WHERE NOT EXISTS (SELECT 1 FROM "_sqsync_conflicts" WHERE "kind" = '\(kind)' AND "lost_site" = ?1)
        """

    /// The note's "won_hlc" is the first number from which this replica announced the
    /// origin's writes again (NULL: not yet).
    static let markAnnounced = """
        UPDATE "_sqsync_conflicts" SET "won_hlc" = ?2 WHERE "kind" = '\(kind)' AND "lost_site" = ?1
        """

    static let announcedFrom = """
        SELECT "won_hlc" FROM "_sqsync_conflicts" WHERE "kind" = '\(kind)' AND "lost_site" = ? ORDER BY "id" LIMIT 1
        """

    static let standingOrigins = """
        SELECT DISTINCT c."lost_site" FROM "_sqsync_conflicts" c
        WHERE c."kind" = '\(kind)'
          AND NOT EXISTS (SELECT 1 FROM "_sqsync_sites" s WHERE s."knowledge_id" = c."lost_site" AND s."retired" != 0)
        """

    static let standingOriginsFrom = """
        SELECT c."lost_site", min(c."lost_hlc") AS "found_at" FROM "_sqsync_conflicts" c
        WHERE c."kind" = '\(kind)'
          AND NOT EXISTS (SELECT 1 FROM "_sqsync_sites" s WHERE s."knowledge_id" = c."lost_site" AND s."retired" != 0)
        GROUP BY c."lost_site"
        """

    static let standing = """
        SELECT c."lost_row" FROM "_sqsync_conflicts" c
        WHERE c."kind" = '\(kind)'
          AND NOT EXISTS (SELECT 1 FROM "_sqsync_sites" s WHERE s."knowledge_id" = c."lost_site" AND s."retired" != 0)
        ORDER BY c."id"
        """
}
