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
struct OriginNumbering {
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
    /// A replica that holds every row then announces again, as its own writes, what the origin
    /// wrote here from the first number in question on, once per origin (until the conflict
    /// log is cleared): one pass over the row entries. Relays keep one segment per range, so
    /// the two versions of a range do not both travel under the origin's name: a replica that
    /// took one (the restored file itself, once `reidentify` gave it a new identity and it
    /// takes its old one's changes as any peer's) would never be sent the other's rows. Under
    /// this replica's name they reach everyone, and merge as any write does.
    func recordNumbering(_ numbering: OriginNumbering, site: Int, origin: String) throws {
        if let top = numbering.top, top.seq > numbering.before?.seq ?? 0 {
            try database.run(NumberingSQL.raiseTop, .integer(Int64(site)), .integer(top.seq), .integer(top.hlc))
        }
        guard let clash = numbering.clash else { return }
        try noteNumberedTwice(origin, at: min(clash.seq, clash.other))
        try database.run(NumberingSQL.markAnnounced, .text(origin))
        guard database.changes == 1 else { return }
        let rules = try adminRules()
        guard rules.scope(of: knowledgeID) == nil, !rules.isRestricted(knowledgeID) else { return }
        try database.inTransaction {
            for table in try trackedTables(skippingMissing: true) {
                try logWritesAgain(of: table, by: site, after: min(clash.seq, clash.other) - 1)
            }
            try fold()
        }
    }

    /// Notes, once per origin, that `origin` signed two different changes under its number
    /// `seq` or about it.
    func noteNumberedTwice(_ origin: String, at seq: Int64) throws {
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

    /// The note's "won_hlc" marks that this replica announced the origin's writes again.
    static let markAnnounced = """
        UPDATE "_sqsync_conflicts" SET "won_hlc" = 1 WHERE "kind" = '\(kind)' AND "lost_site" = ? AND "won_hlc" IS NULL
        """

    static let standing = """
        SELECT c."lost_row" FROM "_sqsync_conflicts" c
        WHERE c."kind" = '\(kind)'
          AND NOT EXISTS (SELECT 1 FROM "_sqsync_sites" s WHERE s."knowledge_id" = c."lost_site" AND s."retired" != 0)
        ORDER BY c."id"
        """
}
