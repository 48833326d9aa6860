import SQLiteDatabase

/// A value this replica has not sent because it is larger than a bundle may carry
/// (`SQSYNC_MAX_VALUE_BYTES`): named by table, key and column, so the user can find it.
public struct WithheldValue: Sendable, Equatable {
    public var table: String
    /// The row's key, as SQL literals joined by ", ".
    public var key: String
    public var column: String
    public var bytes: Int
}

/// What one export left out: receivers would refuse a whole bundle for one value over their
/// cap, so the writer sends the rest and leaves out only that value (docs/DESIGN.md, "Values
/// larger than a bundle may carry"):
///
/// - an update's value: that column of the record;
/// - a value in a row's life (an insert, a move to another label): the whole record, and every
///   later record of that row until it goes, since a receiver without the row's life would
///   wait for it.
///
/// The segment still covers the left-out change, so receivers' knowledge moves past it; the
/// replica records it (`_sqsync_withheld`) and logs it again as a new change once it fits
/// (``Replica/releaseWithheldValues(cap:)``).
final class WithheldCollector {
    struct Entry: Hashable {
        var tid: Int
        var pk: SQLValue
        /// 0: the row's whole life.
        var cid: Int
        var seq: Int64
    }

    let cap: Int
    private(set) var entries: Set<Entry> = []
    /// Rows whose life is left out, by table id and metadata key.
    private var lives: Set<[SQLValue]>

    init(cap: Int, lives: Set<[SQLValue]>) {
        self.cap = cap
        self.lives = lives
    }

    func holdsLife(tid: Int, pk: SQLValue) -> Bool { !lives.isEmpty && lives.contains([.integer(Int64(tid)), pk]) }

    func isOversized(_ value: SQLValue) -> Bool { Self.size(of: value) > cap }

    /// Drops the values over the cap from a record's columns; nil when the record must not go
    /// at all (it starts the row's life, which goes whole or not at all).
    func withhold(
        _ columns: [ColumnChange], of table: TableInfo, pk: SQLValue, lifeSeq: Int64?
    ) -> [ColumnChange]? {
        guard columns.contains(where: { isOversized($0.value) }) else { return columns }
        if let lifeSeq {
            lives.insert([.integer(Int64(table.tid)), pk])
            entries.insert(Entry(tid: table.tid, pk: pk, cid: 0, seq: lifeSeq))
            return nil
        }
        return columns.filter { change in
            guard isOversized(change.value) else { return true }
            entries.insert(Entry(tid: table.tid, pk: pk, cid: table.columns[change.column].cid, seq: change.stamp.seq))
            return false
        }
    }

    static func size(of value: SQLValue) -> Int {
        switch value {
        case .text(let text): return text.utf8.count
        case .blob(let bytes): return bytes.count
        default: return 0
        }
    }
}

extension Replica {
    /// Rows whose life an earlier export left out, as ``WithheldCollector`` keys them.
    func withheldLives() throws -> Set<[SQLValue]> {
        Set(try database.rows(WithheldSQL.lives).map { [try $0.value("tid"), try $0.value("pk")] })
    }

    func recordWithheld(_ entries: Set<WithheldCollector.Entry>) throws {
        guard !entries.isEmpty else { return }
        try database.inTransaction {
            for entry in entries {
                try database.run(
                    WithheldSQL.record, .integer(Int64(entry.tid)), entry.pk, .integer(Int64(entry.cid)), .integer(entry.seq))
            }
        }
    }

    /// Logs again, as new changes of this replica, the values earlier exports left out that
    /// fit under `cap` now (a smaller value, or a larger cap): a column's value as an update, a
    /// row's life as a new life (a delete and an insert, as a move to another label is), since
    /// receivers' knowledge has moved past the change that carried it. Forgets those a later
    /// change replaced (a new value, a delete, another replica's write). Returns those still
    /// left out. Call before an export; cheap when nothing is left out.
    @discardableResult
    public func releaseWithheldValues(cap: Int) throws -> [WithheldValue] {
        try reviewWithheldValues(cap: cap, release: true)
    }

    /// The values left out of bundles, by an earlier export, that are still too large for `cap`.
    public func withheldValues(cap: Int) throws -> [WithheldValue] {
        try reviewWithheldValues(cap: cap, release: false)
    }

    private func reviewWithheldValues(cap: Int, release: Bool) throws -> [WithheldValue] {
        guard try database.int64(WithheldSQL.any) == 1 else { return [] }
        var relogged = false
        let still: [WithheldValue] = try database.inTransaction(immediate: release) {
            let tables = Dictionary(try trackedTables().map { ($0.tid, $0) }, uniquingKeysWith: { first, _ in first })
            var still: [WithheldValue] = []
            for entry in try database.rows(WithheldSQL.all) {
                let tid = try entry.int("tid"), cid = try entry.int("cid"), pk = try entry.value("pk")
                let forget = { try self.database.run(WithheldSQL.forget, .integer(Int64(tid)), pk, .integer(Int64(cid))) }
                guard let table = tables[tid], let key = MetadataKey.values(pk, columns: table.primaryKey.count),
                    try isStillOwn(entry: try entry.int64("seq"), cid: cid, tid: tid, pk: pk),
                    let values = try database.row(ExportSQL.rowByKey(table), key).map({ row in
                        try table.columns.map { try row.value($0.name) }
                    })
                else {
                    if release { try forget() }
                    continue
                }
                let over = table.columns.indices.filter { index in
                    (cid == 0 || table.columns[index].cid == cid) && WithheldCollector.size(of: values[index]) > cap
                }
                if let index = over.first {
                    still.append(
                        WithheldValue(
                            table: table.name, key: key.map(\.literal).joined(separator: ", "), column: table.columns[index].name,
                            bytes: WithheldCollector.size(of: values[index])))
                } else if release {
                    for relog in cid == 0 ? WithheldSQL.logNewLife(table) : [WithheldSQL.logColumn(table, cid: cid)] {
                        try database.run(relog, key)
                    }
                    try forget()
                    relogged = true
                }
            }
            return still
        }
        if relogged { try fold() }
        return still
    }

    /// Whether the left-out change is still this replica's word on the row (its life) or on
    /// the column: a later change, here or by another replica, replaced it otherwise.
    private func isStillOwn(entry seq: Int64, cid: Int, tid: Int, pk: SQLValue) throws -> Bool {
        guard let row = try database.row(WithheldSQL.rowEntry, .integer(Int64(tid)), pk), try row.int64("cl") % 2 == 1
        else { return false }
        let rowClock = RowClock(hlc: try row.int64("hlc"), site: try row.int("site"))
        if cid == 0 { return try rowClock.site == site && row.int64("seq") == seq }
        guard let clock = try cellClocks(try row.value("cells"), of: rowClock).first(where: { $0.cid == cid }) else { return false }
        return clock.site == site && clock.seq == seq
    }
}

enum WithheldSQL {
    static let any = #"SELECT EXISTS (SELECT 1 FROM "_sqsync_withheld")"#

    static let all = #"SELECT "tid", "pk", "cid", "seq" FROM "_sqsync_withheld" ORDER BY "tid", "pk", "cid""#

    static let lives = #"SELECT "tid", "pk" FROM "_sqsync_withheld" WHERE "cid" = 0"#

    static let record = """
        INSERT OR REPLACE INTO "_sqsync_withheld" ("tid", "pk", "cid", "seq") VALUES (?, ?, ?, ?)
        """

    static let forget = #"DELETE FROM "_sqsync_withheld" WHERE "tid" = ? AND "pk" = ? AND "cid" = ?"#

    static let rowEntry = #"SELECT "cl", "hlc", "site", "cells", "seq" FROM "_sqsync_rows" WHERE "tid" = ? AND "pk" = ?"#

    /// A log row for the row whose key values are bound (?1…), read from the table itself so
    /// that the key is logged exactly as the triggers log it.
    private static func logRow(_ table: TableInfo, operation: Int, mask: Int = 0) -> String {
        let alias = quoteIdentifier("_sqsync_t")
        let condition = table.primaryKey.enumerated()
            .map { "\(alias).\(quoteIdentifier($0.element.name)) IS ?\($0.offset + 1)" }.joined(separator: " AND ")
        return """
            INSERT INTO "_sqsync_log" ("tid", "op", "pk", "mask", "stamp")
              SELECT \(table.tid), \(operation), \(TriggerSQL(table: table).keyExpression(alias)), \(mask), \(MetadataSQL.logStamp)
              FROM \(quoteIdentifier(table.name)) AS \(alias) WHERE \(condition)
            """
    }

    /// A delete and an insert, in that order: a new life, as a move to another label logs it.
    static func logNewLife(_ table: TableInfo) -> [String] {
        [logRow(table, operation: TriggerSQL.Operation.delete), logRow(table, operation: TriggerSQL.Operation.insert)]
    }

    static func logColumn(_ table: TableInfo, cid: Int) -> String {
        logRow(
            table, operation: TriggerSQL.Operation.updateBase + TriggerSQL.Operation.word(of: cid),
            mask: 1 << TriggerSQL.Operation.bit(of: cid))
    }
}
