import FoundationEssentials
import SQLiteDatabase

/// The labels a row of a labelled table has had, in any life, at any replica this one heard
/// from: the scopes whose readers may hold it, or may have held it. A deletion, or a life
/// that leaves a label, goes only to readers whose scope meets its reach, so a scoped replica
/// learns nothing of rows that never were in its labels (docs/SCOPES.md, "Reach").
///
/// Stored in `_sqsync_reach` for rows whose reach is known; an entry without one (written
/// before reach was recorded, or by a replica that did not record it) is unknown: its
/// deletions and departures go to every reader, as before.
public struct Reach: Sendable, Equatable {
    public private(set) var labels: Set<String>

    public init<S: Sequence<String>>(_ labels: S) { self.labels = Set(labels) }

    /// At most this many labels, each at most `maxLabelBytes`, on both sides: a reach past
    /// them is recorded as unknown (every reader), so a writer never writes one a reader
    /// refuses.
    public static let maxLabels = 64
    public static let maxLabelBytes = 256

    /// Whether a reader of `scope` (nil: every row) may hold the row: then it must see the
    /// row go.
    public func meets(_ scope: [String]?) -> Bool {
        guard let scope else { return true }
        return scope.contains { labels.contains($0) }
    }

    /// Whether it fits the limits above.
    public var fits: Bool { labels.count <= Self.maxLabels && labels.allSatisfy { $0.utf8.count <= Self.maxLabelBytes } }

    /// Sorted, as records and `_sqsync_reach` carry it.
    public var sorted: [String] { labels.sorted() }

    func union(_ other: Reach) -> Reach { Reach(labels.union(other.labels)) }
    func isWithin(_ other: Reach) -> Bool { labels.isSubset(of: other.labels) }

    /// As `_sqsync_reach` stores it: a JSON list, as SQLite's `json_array` writes one (its
    /// SQL reads it with `json_each`). Written by hand: a fold records the reach of every row
    /// it extends, and a JSON encoder per row was a large share of a fold of labelled rows.
    var stored: String { "[" + sorted.map(Self.jsonString).joined(separator: ",") + "]" }

    static func read(stored: String) -> Reach? {
        (try? JSONDecoder().decode([String].self, from: Data(stored.utf8))).map(Reach.init)
    }

    /// A JSON string: quotes, backslashes and control characters escaped, the rest as it is.
    private static func jsonString(_ text: String) -> String {
        var json = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": json += "\\\""
            case "\\": json += "\\\\"
            case _ where scalar.value < 0x20: json += "\\u00" + String(hexDigits[Int(scalar.value >> 4)]) + String(hexDigits[Int(scalar.value & 0xF)])
            default: json.unicodeScalars.append(scalar)
            }
        }
        return json + "\""
    }

    private static let hexDigits = Array("0123456789abcdef")
}

extension Optional where Wrapped == Reach {
    /// Union, where unknown absorbs anything.
    func joined(_ other: Reach?) -> Reach? {
        guard let self, let other else { return nil }
        let union = self.union(other)
        return union.fits ? union : nil
    }

    /// Whether every reader `self` reaches, `other` reaches too (unknown reaches every reader).
    func isWithin(_ other: Reach?) -> Bool {
        guard let other else { return true }
        guard let self else { return false }
        return self.isWithin(other)
    }

    func meets(_ scope: [String]?) -> Bool { self?.meets(scope) ?? true }
}

/// A row entry's table and metadata key.
struct ReachKey: Hashable {
    let tid: Int64
    let key: SQLValue
}

/// The reach table's statements, prepared once by whoever reads or writes many rows.
final class ReachStatements {
    private let lookup: Statement
    private let write: Statement
    private let forget: Statement
    private let database: Database
    /// Per labelled table, the query of one row's label (``ReachSQL/labelOfRow(_:expression:)``).
    private var labelQueries: [Int: Statement] = [:]
    /// The reaches read, by their stored text: rows share a few (most hold one label), and
    /// decoding each row's JSON was half of an export's time for a scoped reader.
    private var readReaches: [String: Reach?] = [:]

    init(_ database: Database) throws {
        self.database = database
        lookup = try database.statement(ReachSQL.lookup)
        write = try database.statement(ReachSQL.write)
        forget = try database.statement(ReachSQL.forget)
    }

    /// The reach of an entry that exists (nil: unknown).
    func reach(tid: Int, key: SQLValue) throws -> Reach? {
        try lookup.bind([.integer(Int64(tid)), key])
        guard let stored = try lookup.fetchOne({ row in row.value(at: 0).stringValue }) ?? nil else { return nil }
        if let known = readReaches[stored] { return known }
        let reach = Reach.read(stored: stored)
        if readReaches.count >= Self.readReachesKept { readReaches.removeAll(keepingCapacity: true) }
        readReaches[stored] = reach
        return reach
    }

    private static let readReachesKept = 256

    /// The label of the row of `table` whose key values are `keyValues`, as a reach: empty
    /// when the row is not in the table (deleted, or a ghost) or its label is NULL.
    func label(ofRow keyValues: [SQLValue], in table: TableInfo) throws -> Reach {
        guard let expression = table.label else { return Reach([]) }
        let query: Statement
        if let prepared = labelQueries[table.tid] {
            query = prepared
        } else {
            query = try database.statement(ReachSQL.labelOfRow(table, expression: expression))
            labelQueries[table.tid] = query
        }
        try query.bind(keyValues)
        return try query.fetchOne({ $0.value(at: 0) })?.stringValue.map { Reach([$0]) } ?? Reach([])
    }

    func record(_ reach: Reach?, tid: Int, key: SQLValue) throws {
        if let reach, reach.fits {
            try write.bind([.integer(Int64(tid)), key, .text(reach.stored)])
            try write.run()
        } else {
            try forget.bind([.integer(Int64(tid)), key])
            try forget.run()
        }
    }
}

enum ReachSQL {
    static let lookup = #"SELECT "labels" FROM "_sqsync_reach" WHERE "tid" = ?1 AND "pk" = ?2"#
    static let write = """
        INSERT INTO "_sqsync_reach" ("tid", "pk", "labels") VALUES (?1, ?2, ?3)
        ON CONFLICT ("tid", "pk") DO UPDATE SET "labels" = excluded."labels"
        """
    static let forget = #"DELETE FROM "_sqsync_reach" WHERE "tid" = ?1 AND "pk" = ?2"#
    static let forgetTable = #"DELETE FROM "_sqsync_reach" WHERE "tid" = ?1"#

    /// Each row held of table ?1 (a live entry), its label as its reach ([] for a NULL label,
    /// which no scope holds); a label past the byte limit leaves the reach unknown.
    static func startFromLabels(_ table: TableInfo, expression: String) -> String {
        let key = MetadataKey.sql(TriggerSQL(table: table).keyExpression("t"))
        let label = ScopeSQL.labelValue(expression)
        return """
            INSERT OR REPLACE INTO "_sqsync_reach" ("tid", "pk", "labels")
            SELECT ?1, \(key), CASE WHEN \(label) IS NULL THEN '[]' ELSE json_array(\(label)) END
            FROM \(quoteIdentifier(table.name)) AS t
            WHERE (\(label) IS NULL OR length(CAST(\(label) AS BLOB)) <= \(Reach.maxLabelBytes))
              AND EXISTS (SELECT 1 FROM "_sqsync_rows" r WHERE r."tid" = ?1 AND r."pk" = \(key) AND r."cl" % 2 = 1)
            """
    }

    /// Each known reach of table ?1 whose row is held joins the row's label.
    static func joinLabels(_ table: TableInfo, expression: String) -> String {
        let key = MetadataKey.sql(TriggerSQL(table: table).keyExpression("t"))
        let label = ScopeSQL.labelValue(expression)
        return """
            UPDATE "_sqsync_reach" AS x
            SET "labels" = (SELECT json_group_array(v."value") FROM (
                SELECT "value" FROM json_each(x."labels") UNION SELECT held."label" ORDER BY 1) AS v)
            FROM (SELECT \(key) AS "pk", \(label) AS "label" FROM \(quoteIdentifier(table.name)) AS t
                  WHERE \(label) IS NOT NULL) AS held
            WHERE x."tid" = ?1 AND x."pk" = held."pk"
            """
    }

    /// Reaches of table ?1 past ?2 labels or with a label past ?3 bytes: unknown.
    static let forgetPastLimits = """
        DELETE FROM "_sqsync_reach" WHERE "tid" = ?1
          AND (json_array_length("labels") > ?2
               OR EXISTS (SELECT 1 FROM json_each("labels") j WHERE length(CAST(j."value" AS BLOB)) > ?3))
        """

    /// This replica's own changes after ?2 to rows of table ?3, with their entry's length:
    /// the rows whose reach a fold extends.
    static let ownChanges = """
        SELECT DISTINCT c."pk", r."cl" FROM "_sqsync_changes" c
        JOIN "_sqsync_rows" r ON r."tid" = c."tid" AND r."pk" = c."pk"
        WHERE c."site" = ?1 AND c."seq" > ?2 AND c."tid" = ?3
        """

    /// Peers' scopes, for the purge and status: one row per (site, label) of a scoped peer,
    /// and each scoped peer (whose scope may be empty).
    static let createPeerScopes = """
        CREATE TEMP TABLE IF NOT EXISTS "_sqsync_peer_scopes" ("site" INTEGER NOT NULL, "label" TEXT NOT NULL,
            PRIMARY KEY ("site", "label")) WITHOUT ROWID;
        CREATE TEMP TABLE IF NOT EXISTS "_sqsync_scoped_peers" ("site" INTEGER PRIMARY KEY);
        DELETE FROM temp."_sqsync_peer_scopes";
        DELETE FROM temp."_sqsync_scoped_peers";
        """
    static let addPeerScope = #"INSERT OR IGNORE INTO temp."_sqsync_peer_scopes" ("site", "label") VALUES (?, ?)"#
    static let markScoped = #"INSERT OR IGNORE INTO temp."_sqsync_scoped_peers" ("site") VALUES (?)"#

    /// SQL true when the peer `peer` (a `_sqsync_sites` alias) may hold the row of the entry
    /// `entry` (a `_sqsync_rows` alias): it has no scope, the row's reach is unknown, or
    /// they meet.
    static func mayHold(peer: String, entry: String) -> String {
        """
        (NOT EXISTS (SELECT 1 FROM temp."_sqsync_scoped_peers" s WHERE s."site" = \(peer)."site")
         OR NOT EXISTS (SELECT 1 FROM "_sqsync_reach" x WHERE x."tid" = \(entry)."tid" AND x."pk" = \(entry)."pk")
         OR EXISTS (SELECT 1 FROM "_sqsync_reach" x, json_each(x."labels") j, temp."_sqsync_peer_scopes" s
                    WHERE x."tid" = \(entry)."tid" AND x."pk" = \(entry)."pk" AND s."site" = \(peer)."site"
                      AND s."label" = j."value"))
        """
    }
}

extension Replica {
    /// Extends the reach of the rows this replica's own changes after `seq` touched, in the
    /// labelled tables `tables`, by their labels now: a fold's last step, before any export
    /// can send them. A key `bornHere` (its first life began in this fold) starts a known
    /// reach, empty if it is gone already; a row whose reach is unknown stays so.
    func extendOwnReach(after seq: Int64, tables: [TableInfo], bornHere: Set<ReachKey>) throws {
        guard !tables.isEmpty else { return }
        let reaches = try ReachStatements(database)
        for table in tables where table.label != nil {
            let rows = try database.statement(ReachSQL.ownChanges)
            try rows.bind([.integer(Int64(site)), .integer(seq), .integer(Int64(table.tid))])
            while try rows.step() {
                let key = rows.value(at: 0)
                let before: Reach
                if let known = try reaches.reach(tid: table.tid, key: key) {
                    before = known
                } else if bornHere.contains(ReachKey(tid: Int64(table.tid), key: key)) {
                    before = Reach([])
                } else {
                    continue
                }
                var label = Reach([])
                if rows.int64(at: 1) % 2 == 1, let values = MetadataKey.values(key, columns: table.primaryKey.count) {
                    label = try reaches.label(ofRow: values, in: table)
                }
                try reaches.record(Optional(before).joined(label), tid: table.tid, key: key)
            }
        }
    }

    /// Gives the rows this replica holds of `table` a reach when its label statement changes
    /// here (issued, or first learned): each row's label under the new expression joins the
    /// reach it had, and a table labelled for the first time starts every row's reach at its
    /// label. So a deletion of a row that was written before the label goes only to readers
    /// whose scope may hold it, and a purge waits only for them (docs/SCOPES.md, "Reach": why
    /// this stays sound when another replica held another version of the row). A reach
    /// unknown under the old expression stays unknown; a removed label forgets them all.
    func reachRowsHeld(in table: TableInfo, labelledBefore oldLabel: String?) throws {
        let tid = SQLValue.integer(Int64(table.tid))
        guard let label = table.label else {
            try database.run(ReachSQL.forgetTable, tid)
            return
        }
        if oldLabel == nil {
            try database.run(ReachSQL.forgetTable, tid)
            try database.run(ReachSQL.startFromLabels(table, expression: label), tid)
        } else {
            try database.run(ReachSQL.joinLabels(table, expression: label), tid)
            try database.run(ReachSQL.forgetPastLimits, tid, .integer(Int64(Reach.maxLabels)), .integer(Int64(Reach.maxLabelBytes)))
        }
    }

    /// Fills `temp._sqsync_peer_scopes` with every scoped peer's labels, for the purge's
    /// and status's ``ReachSQL/mayHold(peer:entry:)``.
    func loadPeerScopes() throws {
        try database.execute(ReachSQL.createPeerScopes)
        let rules = try adminRules()
        for (site, id) in try siteIDs() {
            guard let scope = rules.scope(of: id) else { continue }
            try database.run(ReachSQL.markScoped, .integer(Int64(site)))
            for label in scope { try database.run(ReachSQL.addPeerScope, .integer(Int64(site)), .text(label)) }
        }
    }
}

extension ReachSQL {
    /// One row's label by its key values (`IS`, as ``ExportSQL/rowByKey(_:withLabel:)``).
    static func labelOfRow(_ table: TableInfo, expression: String) -> String {
        let condition = table.primaryKey.enumerated().map { "\(quoteIdentifier($0.element.name)) IS ?\($0.offset + 1)" }
            .joined(separator: " AND ")
        return "SELECT \(ScopeSQL.labelValue(expression)) FROM \(quoteIdentifier(table.name)) WHERE \(condition)"
    }
}
