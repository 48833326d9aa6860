import FoundationEssentials
import Glibc
import SQLiteDatabase

/// Reads this replica's own changes after a sequence number out of its tables, row by row,
/// without holding them all: what it signs as their origin (docs/BUNDLE_FORMAT.md, "Segments").
///
/// Each record carries only this replica's own versions: the life of a row it inserted or
/// deleted in the range (an insert with every column: a column another replica wrote since is
/// sent with its current value under the insert's stamp, as this replica's word for its
/// insert), the columns and counter contributions it wrote in the range, and the row's causal
/// length. Another replica's versions travel in that replica's own signed changes, which
/// relays forward as they are.
///
/// Use ``snapshot(of:ownChangesAfter:_:)``: it folds pending local changes, then reads inside
/// one transaction so that the header and the rows describe the same moment.
public final class ChangeExporter {
    public private(set) var header: ChangeSetHeader
    /// Every replica this one knows, itself first, as of the same moment: what a bundle's
    /// envelope says of them.
    public let sites: [SiteSummary]
    private let replica: Replica
    private let tables: [TableInfo]
    /// The changes after this one of this replica's own are sent, through `last`.
    private let base: Int64
    private let last: Int64
    /// The labels the receiver holds; nil: every row. Out of it, only deletions travel, and
    /// a new life of a row that readers of its old label must see go (docs/SCOPES.md).
    private let scope: [String]?
    /// True when few changes are needed: rows are then found through `_sqsync_changes` and
    /// read by key, so the export costs what it sends, not the database size.
    private let byKey: Bool
    /// Above this many changed entries, one pass over each table costs less than lookups.
    static let keyPathLimit = 50_000
    /// With a cap on values: what this export leaves out, shared with its parts.
    private let withheld: WithheldCollector?
    /// Where the rows of labelled tables reach: it decides which departures and deletions a
    /// scoped reader gets, and travels with them (nil: no labelled table in the range).
    private let reaches: ReachStatements?

    /// Folds pending local changes, then calls `body` with an exporter inside one read
    /// transaction. Changes numbered above `base` are read; 0 reads every own change.
    ///
    /// The fold commits before the read snapshot starts, so the app may write in between;
    /// an exporter that meets such an unnumbered change stops, and the export starts over.
    /// After a few tries it holds the write lock for the whole export, so it always ends.
    ///
    /// With `valueCap`, a value larger than it is left out and recorded, the rest still goes
    /// (``WithheldCollector``); without, every value goes.
    public static func snapshot<T>(
        of replica: Replica, ownChangesAfter base: Int64, valueCap: Int? = nil, _ body: (ChangeExporter) throws -> T
    ) throws -> T {
        let lives = valueCap == nil ? [] : try replica.withheldLives()
        var withheld: WithheldCollector?
        func exporter() throws -> ChangeExporter {
            withheld = valueCap.map { WithheldCollector(cap: $0, lives: lives) }
            return try ChangeExporter(
                replica: replica, ownChangesAfter: base, keyPathLimit: Self.keyPathLimit, withheld: withheld)
        }
        for _ in 0..<4 {
            try replica.fold()
            do {
                let result = try replica.readSnapshot { try body(try exporter()) }
                try replica.recordWithheld(withheld?.entries ?? [])
                return result
            } catch is UnnumberedChange {
                continue
            }
        }
        return try replica.database.inTransaction(immediate: true) {
            try replica.fold()
            let result = try body(try exporter())
            try replica.recordWithheld(withheld?.entries ?? [])
            return result
        }
    }

    /// Another exporter over the same snapshot, for own changes after `base` through
    /// `through`, cut for `scope`: a bundle carries one segment per admin epoch and scope.
    public func part(after base: Int64, through: Int64, scope: [String]?) throws -> ChangeExporter {
        try ChangeExporter(
            replica: replica, ownChangesAfter: base, through: through, scope: scope, keyPathLimit: Self.keyPathLimit,
            withheld: withheld)
    }

    /// A change the triggers wrote after the fold: the snapshot must be taken again.
    struct UnnumberedChange: Error {}

    /// Prefer ``snapshot(of:ownChangesAfter:_:)``; this reads only folded changes, and must
    /// run inside ``Replica/readSnapshot(_:)``.
    public convenience init(replica: Replica, ownChangesAfter base: Int64) throws {
        try self.init(replica: replica, ownChangesAfter: base, keyPathLimit: Self.keyPathLimit)
    }

    init(
        replica: Replica, ownChangesAfter requestedBase: Int64, through: Int64? = nil, scope: [String]? = nil,
        keyPathLimit: Int, withheld: WithheldCollector? = nil
    ) throws {
        self.scope = scope
        self.withheld = withheld
        self.replica = replica
        let database = replica.database
        // Writes made after the fold wait in the log: their values are in the tables already,
        // their stamps are not. Start over rather than send a new value with an old stamp.
        guard try database.int64(ExportSQL.logIsEmpty) == 1 else { throw UnnumberedChange() }
        sites = try database.records(SiteSummary.self, ExportSQL.sites)
        guard let me = sites.first, me.knowledgeID == replica.knowledgeID,
            let clock = try database.row(#"SELECT "seq", "hlc" FROM "_sqsync_replica""#)
        else { throw ChangeLogError(.notAReplica, "\(replica.path): sqsync metadata is damaged (no replica row)") }
        let last = min(try clock.int64("seq"), through ?? .max)
        self.last = last
        base = max(0, min(requestedBase, last))
        var baseBySite: [Int: Int64] = [:]
        for site in try database.rows(#"SELECT "site" FROM "_sqsync_sites""#) { baseBySite[try site.int("site")] = .max }
        baseBySite[replica.site] = base
        try Self.loadBase(baseBySite, into: database)
        let changesFrom = try database.int64(#"SELECT "changes_from" FROM "_sqsync_sites" WHERE "site" = ?"#, .integer(Int64(replica.site)))
        // `_sqsync_changes` holds every change after `changes_from`: it answers only when the
        // receiver holds at least that much.
        byKey =
            try last > base && base >= changesFrom
            && Self.collectChangedKeys([(replica.site, base)], limit: keyPathLimit, in: database)
        var touched: [TableInfo] = []
        if last > base {
            let changedTables = byKey ? Set(try database.rows(ExportSQL.changedTables).map { try $0.int64("tid") }) : []
            for table in try replica.trackedTables() {
                let changed =
                    byKey ? changedTables.contains(Int64(table.tid)) : try Self.hasChanges(table, base: baseBySite, in: database)
                if changed { touched.append(table) }
            }
        }
        self.tables = touched
        var learned: [String: LearningEvent] = [:]
        for row in try database.rows(ExportSQL.learned) {
            learned[try row.string("knowledge_id")] = LearningEvent(
                previous: try row.int64("previous"), reached: try row.int64("reached"), ownSeq: try row.int64("own_seq"))
        }
        var knowledge: [String: Int64] = [:]
        for site in sites { knowledge[site.knowledgeID] = site.known }
        header = ChangeSetHeader(
            origin: me.knowledgeID, originName: me.name, base: base, last: last, createdHLC: try clock.int64("hlc"),
            originKnowledge: Knowledge(knowledge), learned: learned, schemaVersion: try replica.schemaVersion(),
            tables: touched.map { table in
                TableSchema(
                    name: table.name, columns: table.columns.map(\.name),
                    primaryKey: table.primaryKey.map { key in table.columns.firstIndex { $0.cid == key.cid }! },
                    policies: table.columns.map(\.policy))
            })
        header.scope = scope
        header.carriesReach = touched.contains { $0.label != nil }
        reaches = header.carriesReach ? try ReachStatements(database) : nil
    }

    /// The reach of an entry of `table` (nil: unknown, or a table without a label).
    private func reach(of table: TableInfo, key: SQLValue) throws -> Reach? {
        guard table.label != nil, let reaches else { return nil }
        return try reaches.reach(tid: table.tid, key: key)
    }

    private static func loadBase(_ base: [Int: Int64], into database: Database) throws {
        try database.execute(ExportSQL.createBaseTable)
        try database.execute(#"DELETE FROM temp."_sqsync_base""#)
        for (site, seq) in base where seq > 0 {
            try database.run(
                #"INSERT INTO temp."_sqsync_base" ("site", "seq") VALUES (?, ?)"#, .integer(Int64(site)), .integer(seq))
        }
    }

    /// Fills `temp._sqsync_export_keys` with the rows that have a change the receiver
    /// lacks, from `_sqsync_changes`; false (and nothing kept) past `limit` changes.
    private static func collectChangedKeys(_ pending: [(site: Int, base: Int64)], limit: Int, in database: Database) throws
        -> Bool
    {
        var changes = 0
        for (site, base) in pending {
            changes += Int(
                try database.int64(ExportSQL.countChanged, .integer(Int64(site)), .integer(base), .integer(Int64(limit + 1))))
            if changes > limit { return false }
        }
        try database.execute(ExportSQL.createKeysTable)
        try database.execute(#"DELETE FROM temp."_sqsync_export_keys""#)
        for (site, base) in pending {
            try database.run(ExportSQL.collectChanged, .integer(Int64(site)), .integer(base))
        }
        return true
    }

    private static func hasChanges(_ table: TableInfo, base: [Int: Int64], in database: Database) throws -> Bool {
        let knowledge = base.map { "\($0.key):\($0.value)" }.joined(separator: ",")
        if try database.int64(ExportSQL.tableHasChanges, .integer(Int64(table.tid)), .text(knowledge)) == 1 {
            return true
        }
        guard table.columns.contains(where: { $0.policy == .counter }) else { return false }
        return try database.int64(CounterSQL.tableHasCounterChanges, .integer(Int64(table.tid))) == 1
    }

    /// A stamp of this replica's, as records carry it: site 0, the origin.
    private func ownStamp(hlc: Int64, seq: Int64) throws -> Stamp {
        guard seq > 0 else { throw UnnumberedChange() }
        return Stamp(hlc: hlc, site: 0, seq: seq)
    }

    /// One of this replica's own changes in the range.
    private func isNeeded(site: Int64, seq: Int64) -> Bool { site == Int64(replica.site) && seq > base && seq <= last }

    /// Calls `body` with each row that has a change the receiver lacks: live rows table by
    /// table, parents before children, then deletions, children before parents, so an
    /// importer that enforces foreign keys is never stuck.
    public func forEachChange(_ body: (RowChange) throws -> Void) throws {
        let database = replica.database
        for (tableIndex, table) in tables.enumerated() {
            let emitter = LiveRowEmitter(table: table, tableIndex: tableIndex)
            let cut = scope != nil && table.label != nil
            let width = table.columns.count
            if byKey {
                let keys = try database.statement(ExportSQL.changedLiveRows)
                try keys.bind([.integer(Int64(table.tid))])
                let lookup = try database.statement(ExportSQL.rowByKey(table, withLabel: cut))
                while try keys.step() {
                    guard let key = MetadataKey.values(keys.value(at: 4), columns: table.primaryKey.count) else {
                        throw undecodableKey(table)
                    }
                    try lookup.bind(key)
                    // A row the metadata holds alive but the table lacks (a write that bypassed
                    // the triggers, or a row that left this replica's scope) has nothing to send.
                    guard let values = try lookup.fetchOne({ row in (0..<(cut ? width + 1 : width)).map { row.value(at: $0) } })
                    else { continue }
                    let inScope = !cut || Scope(scope).contains(label: values[width].stringValue)
                    try emit(emitter, entry: keys, values: Array(values.prefix(width)), inScope: inScope, body)
                }
            } else if cut, let scope {
                // Only the rows of the receiver's labels are read, through the label's index;
                // of the others, only new lives of rows (which readers of their old label must see go).
                let scopeJSON = String(decoding: try JSONEncoder().encode(scope), as: UTF8.self)
                let live = try database.statement(ExportSQL.liveRowsWithLabel(table))
                try live.bind([.text(scopeJSON)])
                while try live.step() {
                    try emit(emitter, entry: live, values: (0..<width).map { live.value(at: 6 + $0) }, body)
                }
                let relives = try database.statement(ExportSQL.newLives)
                try relives.bind([.integer(Int64(table.tid)), .integer(Int64(replica.site)), .integer(base), .integer(last)])
                let lookup = try database.statement(ExportSQL.rowByKey(table, withLabel: true))
                while try relives.step() {
                    guard let key = MetadataKey.values(relives.value(at: 4), columns: table.primaryKey.count) else {
                        throw undecodableKey(table)
                    }
                    try lookup.bind(key)
                    guard let values = try lookup.fetchOne({ row in (0...width).map { row.value(at: $0) } }),
                        !Scope(scope).contains(label: values[width].stringValue)
                    else { continue }
                    try emit(emitter, entry: relives, values: Array(values.prefix(width)), inScope: false, body)
                }
            } else {
                let live = try database.statement(ExportSQL.liveRows(table))
                while try live.step() {
                    try emit(emitter, entry: live, values: (0..<table.columns.count).map { live.value(at: 6 + $0) }, body)
                }
            }
        }
        for (tableIndex, table) in tables.enumerated().reversed() {
            let keyCount = table.primaryKey.count
            let deleted = try database.statement(byKey ? ExportSQL.changedDeletedRows : ExportSQL.deletedRows)
            try deleted.bind([.integer(Int64(table.tid))])
            while try deleted.step() {
                guard isNeeded(site: deleted.int64(at: 3), seq: deleted.int64(at: 4)) else { continue }
                // A deletion goes to readers who may hold the row: its reach meets their scope.
                let reach = try reach(of: table, key: deleted.value(at: 0))
                if table.label != nil && !reach.meets(scope) { continue }
                guard let key = MetadataKey.values(deleted.value(at: 0), columns: keyCount) else {
                    throw undecodableKey(table)
                }
                var change = RowChange(
                    table: tableIndex, key: key, causalLength: deleted.int64(at: 1),
                    rowStamp: try ownStamp(hlc: deleted.int64(at: 2), seq: deleted.int64(at: 4)), columns: [])
                change.reach = reach
                try body(change)
            }
        }
    }

    /// A record's columns without the values over the cap; nil: the record does not go.
    private func withholdOversized(
        _ columns: [ColumnChange], emitter: LiveRowEmitter, entry: Statement, rowStamp: Stamp?
    ) -> [ColumnChange]? {
        guard let withheld else { return columns }
        return withheld.withhold(columns, of: emitter.table, pk: entry.value(at: 4), lifeSeq: rowStamp?.seq)
    }

    private func undecodableKey(_ table: TableInfo) -> ChangeLogError {
        ChangeLogError(
            .schemaMismatch,
            "\(replica.path): cannot read back a stored key of \(table.name); the export stops rather than leave a change out")
    }

    /// What one table's live rows share while they are turned into row changes.
    private struct LiveRowEmitter {
        let table: TableInfo
        let tableIndex: Int
        let columnIndex: [Int: Int]
        let keyPositions: [Int]
        let nonKey: [(offset: Int, element: ColumnInfo)]
        let hasCounters: Bool
        /// Positions of the columns the table's label reads, outside the key.
        let labelColumns: [Int]

        init(table: TableInfo, tableIndex: Int) {
            self.table = table
            self.tableIndex = tableIndex
            hasCounters = table.columns.contains { $0.policy == .counter }
            columnIndex = Dictionary(uniqueKeysWithValues: table.columns.enumerated().map { ($0.element.cid, $0.offset) })
            keyPositions = table.primaryKey.map { key in table.columns.firstIndex { $0.cid == key.cid }! }
            nonKey = table.columns.enumerated().filter { !$0.element.isPrimaryKey }.map { ($0.offset, $0.element) }
            let reads = Set(table.labelColumns.map(\.cid))
            labelColumns = nonKey.filter { reads.contains($0.element.cid) }.map(\.offset)
        }
    }

    /// One live row: `entry` holds its row entry (cl, hlc, site, seq, metadata key, column
    /// clocks) in its first six columns, `values` every column of the row in table order.
    private func emit(
        _ emitter: LiveRowEmitter, entry: Statement, values: [SQLValue], inScope: Bool = true, _ body: (RowChange) throws -> Void
    ) throws {
        // A row whose life is left out sends nothing until it goes: receivers lack the row.
        if let withheld, withheld.holdsLife(tid: emitter.table.tid, pk: entry.value(at: 4)) { return }
        let rowNeeded = isNeeded(site: entry.int64(at: 2), seq: entry.int64(at: 3))
        // The row's own stamp travels only with a life this replica began in the range.
        let rowStamp = rowNeeded ? try ownStamp(hlc: entry.int64(at: 1), seq: entry.int64(at: 3)) : nil
        var cellStamps: [Int: Stamp] = [:]
        let row = RowClock(hlc: entry.int64(at: 1), site: Int(entry.int64(at: 2)))
        for clock in try replica.cellClocks(entry.value(at: 5), of: row) {
            guard let column = emitter.columnIndex[clock.cid], isNeeded(site: Int64(clock.site), seq: clock.seq) else { continue }
            cellStamps[column] = try ownStamp(hlc: clock.hlc, seq: clock.seq)
        }
        guard inScope else {
            // Out of the receiver's scope: only the label's columns this replica wrote in the
            // range, so that a reader holding the row sees it leave (and one that does not
            // keeps only its entry), as every replica merges those columns; and only to a
            // reader whose scope the row's reach meets: no other may hold it.
            let reach = try reach(of: emitter.table, key: entry.value(at: 4))
            guard reach.meets(scope) else { return }
            let all = emitter.labelColumns.compactMap { offset -> ColumnChange? in
                guard let stamp = cellStamps[offset] ?? rowStamp else { return nil }
                return ColumnChange(column: offset, value: values[offset], stamp: stamp)
            }
            guard let columns = withholdOversized(all, emitter: emitter, entry: entry, rowStamp: rowStamp), !columns.isEmpty
            else { return }
            var change = RowChange(
                table: emitter.tableIndex, key: emitter.keyPositions.map { values[$0] }, causalLength: entry.int64(at: 0),
                rowStamp: rowStamp, columns: columns)
            change.reach = reach
            try body(change)
            return
        }
        var counters: [CounterChange] = []
        var values = values
        if emitter.hasCounters {
            let entries = try replica.database.statement(CounterSQL.countersOfRow)
            try entries.bind([.integer(Int64(emitter.table.tid)), entry.value(at: 4)])
            while try entries.step() {
                guard let column = emitter.columnIndex[Int(entries.int64(at: 0))] else { continue }
                let site = entries.int64(at: 1), seq = entries.int64(at: 5), total = entries.value(at: 2)
                // A counter column's value travels as its base: the value without the entries.
                values[column] = CounterArithmetic.subtract(values[column], total)
                // Site 0 holds the folded sum, which every replica counts already.
                if site != 0 && isNeeded(site: site, seq: seq) {
                    counters.append(
                        CounterChange(
                            column: column, total: total, folded: entries.int64(at: 3),
                            stamp: try ownStamp(hlc: entries.int64(at: 4), seq: seq)))
                }
            }
        }
        guard rowStamp != nil || !cellStamps.isEmpty || !counters.isEmpty else { return }
        let all = emitter.nonKey.compactMap { column -> ColumnChange? in
            // A life record carries every column; a column another replica wrote since goes
            // with its current value under the insert's stamp.
            guard let stamp = cellStamps[column.offset] ?? rowStamp else { return nil }
            return ColumnChange(column: column.offset, value: values[column.offset], stamp: stamp)
        }
        guard let columns = withholdOversized(all, emitter: emitter, entry: entry, rowStamp: rowStamp),
            rowStamp != nil || !columns.isEmpty || !counters.isEmpty
        else { return }
        var change = RowChange(
            table: emitter.tableIndex, key: emitter.keyPositions.map { values[$0] },
            causalLength: entry.int64(at: 0), rowStamp: rowStamp, columns: columns, counters: counters)
        if rowStamp != nil { change.reach = try reach(of: emitter.table, key: entry.value(at: 4)) }
        try body(change)
    }
}

/// A replica as this one knows it, for a bundle's envelope.
public struct SiteSummary: Sendable, Equatable, RowDecodable {
    public var knowledgeID: String
    public var name: String
    /// This replica's knowledge of it (its own sequence number, for this replica itself).
    public var known: Int64
    /// Its deletions purged here up to this sequence number.
    public var forgotten: Int64
    public var retired: Bool

    public init(row: Row) throws {
        knowledgeID = try row.string("knowledge_id")
        name = try row.optionalString("name") ?? ""
        known = try row.int64("known")
        forgotten = try row.int64("forgotten_seq")
        retired = try row.bool("retired")
    }
}

/// The queries the exporter runs.
enum ExportSQL {
    /// Every site, this replica first, with its knowledge and purged-deletion mark.
    static let sites = """
        SELECT s."knowledge_id", s."name",
               CASE WHEN s."site" = r."site" THEN r."seq" ELSE s."known_seq" END AS "known", s."forgotten_seq", s."retired"
        FROM "_sqsync_sites" s, "_sqsync_replica" r
        ORDER BY s."site" = r."site" DESC, s."site"
        """

    /// When this replica last learned of each replica's changes.
    static let learned = """
        SELECT s."knowledge_id", l."previous", l."reached", l."own_seq"
        FROM "_sqsync_learned" l JOIN "_sqsync_sites" s ON s."site" = l."site"
        """

    static let createBaseTable = """
        CREATE TEMP TABLE IF NOT EXISTS "_sqsync_base" ("site" INTEGER PRIMARY KEY, "seq" INTEGER NOT NULL)
        """

    static let tableHasChanges = """
        SELECT EXISTS (SELECT 1 FROM "_sqsync_rows" r LEFT JOIN temp."_sqsync_base" b ON b."site" = r."site"
                       WHERE r."tid" = ?1 AND r."seq" > coalesce(b."seq", 0))
            OR EXISTS (SELECT 1 FROM "_sqsync_rows" r
                       WHERE r."tid" = ?1 AND r."cells" IS NOT NULL AND r."cells" != x''
                         AND sqsync_cells_newer(r."cells", r."hlc", r."site", ?2))
        """

    /// No write waits in the log (an update that wrote the same values, mask 0, is none).
    static let logIsEmpty = """
        SELECT NOT EXISTS (SELECT 1 FROM "_sqsync_log" WHERE "op" < \(TriggerSQL.Operation.updateBase) OR "mask" != 0)
        """

    static let createKeysTable = """
        CREATE TEMP TABLE IF NOT EXISTS "_sqsync_export_keys" ("tid" INTEGER NOT NULL, "pk" NOT NULL,
            PRIMARY KEY ("tid", "pk")) WITHOUT ROWID
        """

    /// Changes of one site after a sequence number, counted up to a limit (?3).
    static let countChanged = """
        SELECT count(*) FROM (SELECT 1 FROM "_sqsync_changes" WHERE "site" = ?1 AND "seq" > ?2 LIMIT ?3)
        """

    static let collectChanged = """
        INSERT OR IGNORE INTO temp."_sqsync_export_keys" ("tid", "pk")
          SELECT "tid", "pk" FROM "_sqsync_changes" WHERE "site" = ?1 AND "seq" > ?2
        """

    /// One row by its key values; `IS`, so a NULL part of a composite key still matches, as
    /// the one-pass export's join on the metadata key does.
    static func rowByKey(_ table: TableInfo, withLabel: Bool = false) -> String {
        var columns = table.columns.map { quoteIdentifier($0.name) }.joined(separator: ", ")
        if withLabel, let label = table.label { columns += ", " + ScopeSQL.labelValue(label) }
        let condition = table.primaryKey.enumerated().map { "\(quoteIdentifier($0.element.name)) IS ?\($0.offset + 1)" }
            .joined(separator: " AND ")
        return "SELECT \(columns) FROM \(quoteIdentifier(table.name)) WHERE \(condition)"
    }

    static let changedTables = #"SELECT DISTINCT "tid" FROM temp."_sqsync_export_keys""#

    /// Changed rows that are alive: cl, hlc, site, seq, metadata key, column clocks (like
    /// ``liveRows(_:)``).
    static let changedLiveRows = """
        SELECT r."cl", r."hlc", r."site", r."seq", r."pk", r."cells"
        FROM temp."_sqsync_export_keys" AS k
        JOIN "_sqsync_rows" AS r ON r."tid" = k."tid" AND r."pk" = k."pk"
        WHERE k."tid" = ?1 AND r."cl" % 2 = 1
        """

    static let changedDeletedRows = """
        SELECT r."pk", r."cl", r."hlc", r."site", r."seq"
        FROM temp."_sqsync_export_keys" AS k
        JOIN "_sqsync_rows" AS r ON r."tid" = k."tid" AND r."pk" = k."pk"
        WHERE k."tid" = ?1 AND r."cl" % 2 = 0
        """

    static let deletedRows = """
        SELECT "pk", "cl", "hlc", "site", "seq" FROM "_sqsync_rows" WHERE "tid" = ? AND "cl" % 2 = 0
        """

    /// Live rows whose label is in the scope ?1 (a JSON list), found through the label's index,
    /// with their entry, as ``liveRows(_:)`` gives them.
    static func liveRowsWithLabel(_ table: TableInfo) -> String {
        let alias = quoteIdentifier("_sqsync_t")
        let columns = table.columns.map { "\(alias).\(quoteIdentifier($0.name))" }.joined(separator: ", ")
        let key = MetadataKey.sql(TriggerSQL(table: table).keyExpression(alias))
        return """
            SELECT r."cl", r."hlc", r."site", r."seq", r."pk", r."cells", \(columns)
            FROM (SELECT * FROM \(quoteIdentifier(table.name))
                  WHERE \(ScopeSQL.labelValue(table.label ?? "NULL")) IN (SELECT "value" FROM json_each(?1))) AS \(alias)
            JOIN "_sqsync_rows" AS r ON r."tid" = \(table.tid) AND r."pk" = \(key) AND r."cl" % 2 = 1
            """
    }

    /// Live rows in a second life or later that this replica (?2) began after ?3 through ?4,
    /// with their entry (cl, hlc, site, seq, metadata key, column clocks).
    static let newLives = """
        SELECT "cl", "hlc", "site", "seq", "pk", "cells" FROM "_sqsync_rows" INDEXED BY "_sqsync_relives"
        WHERE "tid" = ?1 AND "cl" >= 3 AND "site" = ?2 AND "seq" > ?3 AND "seq" <= ?4 AND "cl" % 2 = 1
        """

    /// Live rows with their row entry: cl, hlc, site, seq, metadata key, column clocks, then
    /// every column. With a one-column key the entries lead, in key order, and each finds its
    /// row through the table's key index (CROSS JOIN keeps that order): a receiver then
    /// inserts at the right edge of its B-trees, and the comparison takes the key column's
    /// affinity, as a plain column comparison would.
    static func liveRows(_ table: TableInfo) -> String {
        let alias = quoteIdentifier("_sqsync_t")
        let columns = table.columns.map { "\(alias).\(quoteIdentifier($0.name))" }.joined(separator: ", ")
        let entry = #"r."cl", r."hlc", r."site", r."seq", r."pk", r."cells""#
        if table.primaryKey.count == 1 {
            return """
                SELECT \(entry), \(columns)
                FROM "_sqsync_rows" AS r CROSS JOIN \(quoteIdentifier(table.name)) AS \(alias)
                  ON \(alias).\(quoteIdentifier(table.primaryKey[0].name)) = sqsync_stored_key(r."pk")
                WHERE r."tid" = \(table.tid) AND r."cl" % 2 = 1
                """
        }
        let key = MetadataKey.sql(TriggerSQL(table: table).keyExpression(alias))
        return """
            SELECT \(entry), \(columns)
            FROM \(quoteIdentifier(table.name)) AS \(alias)
            JOIN "_sqsync_rows" AS r ON r."tid" = \(table.tid) AND r."pk" = \(key) AND r."cl" % 2 = 1
            """
    }
}

extension Replica {
    /// Runs `body` in one read transaction: a consistent snapshot while apps keep writing.
    public func readSnapshot<T>(_ body: () throws -> T) throws -> T {
        try database.inTransaction(immediate: false, body)
    }
}
