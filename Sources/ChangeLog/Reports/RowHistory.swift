import FoundationEssentials
import Glibc
import SQLiteDatabase

/// One row's story as this replica holds it: whether it lives and how many lives it had,
/// which replica wrote each column's value and when, and the conflicts recorded for it. An
/// operator's first question ("who changed this, and when?") answered without reading
/// sqsync's tables, whose layout is private (packed clocks, compact keys).
public struct RowHistory: Sendable {
    /// A change: the replica that made it, its sequence number there, and its clock.
    public struct Change: Sendable, Equatable {
        public var knowledgeID: String
        /// The name this replica knows it by ("" when none).
        public var name: String
        public var seq: Int64
        /// Milliseconds since 1970 (the hybrid logical clock, which is the writer's wall
        /// clock unless a peer's ran ahead).
        public var hlc: Int64
        /// True for this replica's own change.
        public var isLocal: Bool
    }

    public struct Column: Sendable {
        public var name: String
        public var value: SQLValue
        public var policy: MergePolicy
        /// The change that wrote the value.
        public var writtenBy: Change
    }

    /// A line of the conflict log about this row.
    public struct Conflict: Sendable {
        public var recordedAt: String
        public var kind: String
        /// Nil when the whole row lost.
        public var column: String?
        /// Nil when the loser's own value is not known here (its insert carried the value
        /// that won: its own log holds it).
        public var lostValue: SQLValue?
        public var lostRow: String?
        /// The knowledge ID that wrote what lost, and its name here ("" when none).
        public var lostBy: String
        public var lostByName: String
        public var lostHLC: Int64
        public var wonBy: String?
        public var wonHLC: Int64?
        /// The value that won, for a column (nil in logs from before sqsync kept it).
        public var wonValue: SQLValue?
    }

    public var table: String
    public var key: [(column: String, value: SQLValue)]
    /// Counts the row's lives: odd while it exists, even once deleted.
    public var causalLength: Int64
    public var isAlive: Bool { causalLength % 2 == 1 }
    /// The change that began the current life (an insert) or ended the last (a delete).
    public var life: Change
    /// Every column but the key's, in table order; empty for a deleted row.
    public var columns: [Column]
    public var conflicts: [Conflict]
}

extension Replica {
    /// The history of the row of `table` whose primary key is `keyTexts`, one text per key
    /// column in key order, read as the column's type reads it (`'7'` is 7 in an INTEGER
    /// column). Pending writes are folded first. Nil when this replica holds no trace of the
    /// row (never seen, or deleted and purged). `folding`: as for ``status(folding:)``.
    public func history(table name: String, key keyTexts: [String], folding: Bool = true) throws -> RowHistory? {
        if folding { try fold() }
        return try readSnapshot { try history(of: name, key: keyTexts) }
    }

    private func history(of name: String, key keyTexts: [String]) throws -> RowHistory? {
        guard let tid = try database.optionalInt64(#"SELECT "tid" FROM "_sqsync_tables" WHERE "name" = ?"#, .text(name)),
            let table = try trackedTable(tid: Int(tid), name: name)
        else {
            throw ChangeLogError(.noSuchTable, "\(path): table \(displayText(name)) is not tracked (see `sqsync status \(path)`)")
        }
        let keyColumns = table.primaryKey
        guard keyTexts.count == keyColumns.count else {
            throw ChangeLogError(
                .usage,
                "\(path): \(name)'s primary key has \(keyColumns.count) column(s) (\(keyColumns.map(\.name).joined(separator: ", "))), and \(keyTexts.count) value(s) were given"
            )
        }
        let key = try keyValues(of: table, texts: keyTexts)
        guard let entry = try database.row(MergeSQL.rowEntry, .integer(Int64(table.tid)), try metadataKey(key)) else { return nil }
        let writers = try HistoryWriters(replica: self)
        let row = RowClock(hlc: try entry.int64("hlc"), site: try entry.int("site"))
        let life = writers.change(site: row.site, seq: try entry.int64("seq"), hlc: row.hlc)
        let causalLength = try entry.int64("cl")
        var columns: [RowHistory.Column] = []
        if causalLength % 2 == 1 {
            let cells = Dictionary(
                try cellClocks(try entry.value("cells"), of: row).map { ($0.cid, $0) }, uniquingKeysWith: { first, _ in first })
            let nonKey = table.columns.filter { !$0.isPrimaryKey }
            let condition = keyColumns.enumerated().map { "\(quoteIdentifier($0.element.name)) IS ?\($0.offset + 1)" }
                .joined(separator: " AND ")
            let values =
                nonKey.isEmpty
                ? []
                : try database.row(
                    "SELECT \(nonKey.map { quoteIdentifier($0.name) }.joined(separator: ", ")) FROM \(quoteIdentifier(table.name)) WHERE \(condition)",
                    key)?.values ?? []
            for (index, column) in nonKey.enumerated() {
                let writtenBy = cells[column.cid].map { writers.change(site: $0.site, seq: $0.seq, hlc: $0.hlc) } ?? life
                columns.append(
                    RowHistory.Column(
                        name: column.name, value: index < values.count ? values[index] : .null, policy: column.policy,
                        writtenBy: writtenBy))
            }
        }
        let conflicts = try database.rows(
            HistorySQL.conflicts, .text(table.name), .text(key.map(\.literal).joined(separator: ", "))
        ).map { conflict in
            RowHistory.Conflict(
                recordedAt: try conflict.string("recorded_at"), kind: try conflict.string("kind"),
                column: try conflict.optionalString("column_name"),
                lostValue: try conflict.int64("lost_value_known") == 1 ? try conflict.value("lost_value") : nil,
                lostRow: try conflict.optionalString("lost_row"), lostBy: try conflict.string("lost_site"),
                lostByName: writers.name(of: try conflict.string("lost_site")), lostHLC: try conflict.int64("lost_hlc"), wonBy: try conflict.optionalString("won_site"),
                wonHLC: try conflict.optionalInt64("won_hlc"),
                wonValue: try conflict.value("won_value") == .null ? nil : try conflict.value("won_value"))
        }
        return RowHistory(
            table: table.name, key: zip(keyColumns.map(\.name), key).map { ($0, $1) }, causalLength: causalLength, life: life,
            columns: columns, conflicts: conflicts)
    }

    /// The key as stored: the row's own values when the table holds it (the comparison takes
    /// each column's affinity), else each text converted as the column's affinity would.
    private func keyValues(of table: TableInfo, texts: [String]) throws -> [SQLValue] {
        let keyColumns = table.primaryKey
        let condition = keyColumns.enumerated().map { "\(quoteIdentifier($0.element.name)) = ?\($0.offset + 1)" }
            .joined(separator: " AND ")
        let names = keyColumns.map { quoteIdentifier($0.name) }.joined(separator: ", ")
        if let row = try database.row(
            "SELECT \(names) FROM \(quoteIdentifier(table.name)) WHERE \(condition)", texts.map(SQLValue.text))
        {
            return row.values
        }
        return zip(keyColumns, texts).map { column, text in
            switch column.affinity {
            case .integer, .numeric:
                if let integer = Int64(text) { return .integer(integer) }
                // As SQLite stores it: a real that is a whole number within range as an integer.
                if let real = Double(text) {
                    if real == real.rounded(), abs(real) < 9.2e18 { return .integer(Int64(real)) }
                    return .real(real)
                }
                return .text(text)
            case .real: return Double(text).map(SQLValue.real) ?? .text(text)
            case .text, .blob: return .text(text)
            }
        }
    }
}

/// Site numbers as the history names them.
private struct HistoryWriters {
    let local: Int
    let sites: [Int: (id: String, name: String)]

    init(replica: Replica) throws {
        local = replica.site
        var sites: [Int: (id: String, name: String)] = [:]
        for row in try replica.database.rows(#"SELECT "site", "knowledge_id", coalesce("name", '') AS "name" FROM "_sqsync_sites""#) {
            sites[try row.int("site")] = (try row.string("knowledge_id"), try row.string("name"))
        }
        sites[local] = (replica.knowledgeID, replica.name)
        self.sites = sites
    }

    func name(of knowledgeID: String) -> String {
        sites.values.first { $0.id == knowledgeID }?.name ?? ""
    }

    func change(site: Int, seq: Int64, hlc: Int64) -> RowHistory.Change {
        let known = sites[site]
        return RowHistory.Change(
            knowledgeID: known?.id ?? "", name: known?.name ?? "", seq: seq, hlc: hlc, isLocal: site == local)
    }
}

enum HistorySQL {
    static let conflicts = """
        SELECT "recorded_at", "kind", "column_name", "lost_value", "lost_value_known", "lost_row", "lost_site", "lost_hlc",
               "won_site", "won_hlc", "won_value"
        FROM "_sqsync_conflicts" WHERE "table_name" = ? AND "pk" = ? ORDER BY "id"
        """
}
