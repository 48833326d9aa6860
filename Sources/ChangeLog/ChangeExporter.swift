/// Reads the changes a peer lacks out of a replica, row by row, without holding them all.
///
/// Use ``snapshot(of:since:_:)``: it numbers pending local changes, then reads inside one
/// transaction so that the header's knowledge and the rows describe the same moment.
public final class ChangeExporter {
    public let header: ChangeSetHeader
    private let replica: Replica
    private let tables: [TableInfo]
    private let siteIndex: [Int: Int]
    private let baseBySite: [Int: Int64]

    /// Numbers pending local changes, then calls `body` with an exporter inside one read
    /// transaction. `base` is what the receiver already holds; empty exports every change.
    ///
    /// Numbering commits before the read snapshot starts, so the app may write in between;
    /// an exporter that meets such an unnumbered change stops, and the export starts over.
    /// After a few tries it holds the write lock for the whole export, so it always ends.
    public static func snapshot<T>(of replica: Replica, since base: Knowledge, _ body: (ChangeExporter) throws -> T) throws -> T {
        for _ in 0..<4 {
            try replica.numberPendingChanges()
            do {
                return try replica.readSnapshot { try body(try ChangeExporter(replica: replica, since: base)) }
            } catch is UnnumberedChange {
                continue
            }
        }
        return try replica.database.inTransaction(immediate: true) {
            try replica.numberPendingChanges()
            return try body(try ChangeExporter(replica: replica, since: base))
        }
    }

    /// A change the triggers wrote after numbering: the snapshot must be taken again.
    struct UnnumberedChange: Error {}

    /// Prefer ``snapshot(of:since:_:)``; this reads only changes already numbered, and must
    /// run inside ``Replica/readSnapshot(_:)``.
    public init(replica: Replica, since base: Knowledge) throws {
        self.replica = replica
        let database = replica.database
        var sites: [(site: Int, id: String, name: String, known: Int64, forgotten: Int64)] = []
        for row in try database.rows(ExportSQL.sites) {
            sites.append(
                (
                    Int(row[0].int64Value ?? 0), row[1].stringValue ?? "", row[2].stringValue ?? "",
                    row[3].int64Value ?? 0, row[4].int64Value ?? 0
                ))
        }
        let clock = try database.rows(#"SELECT "seq", "hlc" FROM "_sqsync_replica""#)[0]
        var siteIndex: [Int: Int] = [:]
        var baseBySite: [Int: Int64] = [:]
        for (index, site) in sites.enumerated() {
            siteIndex[site.site] = index
            baseBySite[site.site] = min(base[site.id], site.known)
        }
        self.siteIndex = siteIndex
        self.baseBySite = baseBySite

        var acknowledgements: [Int: [Int64]] = [:]
        for row in try database.rows(#"SELECT "peer", "site", "seq" FROM "_sqsync_acks""#) {
            guard let peer = siteIndex[Int(row[0].int64Value ?? -1)], let site = siteIndex[Int(row[1].int64Value ?? -1)] else {
                continue
            }
            acknowledgements[peer, default: Array(repeating: 0, count: sites.count)][site] = row[2].int64Value ?? 0
        }

        try Self.loadBase(baseBySite, into: database)
        var touched: [TableInfo] = []
        for table in try replica.trackedTables() where try Self.hasChanges(table, in: database) {
            touched.append(table)
        }
        self.tables = touched
        header = ChangeSetHeader(
            sites: sites.map(\.id), siteNames: sites.map(\.name), knowledge: sites.map(\.known),
            base: sites.map { baseBySite[$0.site] ?? 0 }, forgotten: sites.map(\.forgotten), senderSeq: clock[0].int64Value ?? 0,
            senderHLC: clock[1].int64Value ?? 0,
            acknowledgements: acknowledgements.sorted { $0.key < $1.key }.map { Acknowledgement(peer: $0.key, seqs: $0.value) },
            tables: touched.map { table in
                TableSchema(
                    name: table.name, columns: table.columns.map(\.name),
                    primaryKey: table.primaryKey.map { key in table.columns.firstIndex { $0.cid == key.cid }! })
            })
    }

    private static func loadBase(_ base: [Int: Int64], into database: Database) throws {
        try database.execute(ExportSQL.createBaseTable)
        try database.execute(#"DELETE FROM temp."_sqsync_base""#)
        for (site, seq) in base where seq > 0 {
            try database.run(
                #"INSERT INTO temp."_sqsync_base" ("site", "seq") VALUES (?, ?)"#, .integer(Int64(site)), .integer(seq))
        }
    }

    private static func hasChanges(_ table: TableInfo, in database: Database) throws -> Bool {
        try database.scalar(ExportSQL.tableHasChanges, .integer(Int64(table.tid)))?.int64Value == 1
    }

    private func stamp(hlc: Int64, site: Int64, seq: Int64) throws -> Stamp {
        guard seq > 0 else { throw UnnumberedChange() }
        return Stamp(hlc: hlc, site: siteIndex[Int(site)] ?? 0, seq: seq)
    }

    private func isNeeded(site: Int64, seq: Int64) -> Bool { seq > (baseBySite[Int(site)] ?? 0) }

    /// Calls `body` with each row that has a change the receiver lacks: live rows table by
    /// table, parents before children, then deletions, children before parents, so an
    /// importer that enforces foreign keys is never stuck.
    public func forEachChange(_ body: (RowChange) throws -> Void) throws {
        let database = replica.database
        for (tableIndex, table) in tables.enumerated() {
            let cellsOfRow = try database.cached(ApplySQL.cellsOfRow)
            let columnIndex = Dictionary(uniqueKeysWithValues: table.columns.enumerated().map { ($0.element.cid, $0.offset) })
            let keyPositions = table.primaryKey.map { key in table.columns.firstIndex { $0.cid == key.cid }! }
            let nonKey = table.columns.enumerated().filter { !$0.element.isPrimaryKey }
            let live = try database.prepare(ExportSQL.liveRows(table))
            while try live.step() {
                let rowStamp = try stamp(hlc: live.int64(at: 1), site: live.int64(at: 2), seq: live.int64(at: 3))
                let rowNeeded = isNeeded(site: live.int64(at: 2), seq: live.int64(at: 3))
                var cellStamps: [Int: Stamp] = [:]
                var cellNeeded: Set<Int> = []
                try cellsOfRow.bind([.integer(Int64(table.tid)), live.value(at: 4)])
                while try cellsOfRow.step() {
                    guard let column = columnIndex[Int(cellsOfRow.int64(at: 0))] else { continue }
                    let site = cellsOfRow.int64(at: 2), seq = cellsOfRow.int64(at: 3)
                    cellStamps[column] = try stamp(hlc: cellsOfRow.int64(at: 1), site: site, seq: seq)
                    if isNeeded(site: site, seq: seq) { cellNeeded.insert(column) }
                }
                guard rowNeeded || !cellNeeded.isEmpty else { continue }
                let columns = nonKey.compactMap { column -> ColumnChange? in
                    guard rowNeeded || cellNeeded.contains(column.offset) else { return nil }
                    return ColumnChange(
                        column: column.offset, value: live.value(at: 5 + column.offset),
                        stamp: cellStamps[column.offset] ?? rowStamp)
                }
                try body(
                    RowChange(
                        table: tableIndex, key: keyPositions.map { live.value(at: 5 + $0) },
                        causalLength: live.int64(at: 0), rowStamp: rowNeeded ? rowStamp : nil, columns: columns))
            }
        }
        for (tableIndex, table) in tables.enumerated().reversed() {
            let keyCount = table.primaryKey.count
            let deleted = try database.cached(ExportSQL.deletedRows)
            try deleted.bind([.integer(Int64(table.tid))])
            while try deleted.step() {
                guard isNeeded(site: deleted.int64(at: 3), seq: deleted.int64(at: 4)) else { continue }
                guard let key = KeyCodec.decode(deleted.value(at: 0), columns: keyCount) else {
                    throw ChangeLogError(
                        .schemaMismatch, "\(replica.path): cannot read back the key of a deleted row of \(table.name); the export stops rather than leave the deletion out")
                }
                try body(
                    RowChange(
                        table: tableIndex, key: key, causalLength: deleted.int64(at: 1),
                        rowStamp: try stamp(hlc: deleted.int64(at: 2), site: deleted.int64(at: 3), seq: deleted.int64(at: 4)),
                        columns: []))
            }
        }
    }
}

/// The queries the exporter runs.
enum ExportSQL {
    /// Every site, this replica first, with its knowledge and purged-deletion mark.
    static let sites = """
        SELECT s."site", s."knowledge_id", coalesce(s."name", ''),
               CASE WHEN s."site" = r."site" THEN r."seq" ELSE s."known_seq" END, s."forgotten_seq"
        FROM "_sqsync_sites" s, "_sqsync_replica" r
        ORDER BY s."site" = r."site" DESC, s."site"
        """

    static let createBaseTable = """
        CREATE TEMP TABLE IF NOT EXISTS "_sqsync_base" ("site" INTEGER PRIMARY KEY, "seq" INTEGER NOT NULL)
        """

    static let tableHasChanges = """
        SELECT EXISTS (SELECT 1 FROM "_sqsync_rows" r LEFT JOIN temp."_sqsync_base" b ON b."site" = r."site"
                       WHERE r."tid" = ?1 AND r."seq" > coalesce(b."seq", 0))
            OR EXISTS (SELECT 1 FROM "_sqsync_cells" c LEFT JOIN temp."_sqsync_base" b ON b."site" = c."site"
                       WHERE c."tid" = ?1 AND c."seq" > coalesce(b."seq", 0))
        """

    static let deletedRows = """
        SELECT "pk", "cl", "hlc", "site", "seq" FROM "_sqsync_rows" WHERE "tid" = ? AND "cl" % 2 = 0
        """

    /// Live rows with their row entry: cl, hlc, site, seq, stored key, then every column.
    static func liveRows(_ table: TableInfo) -> String {
        let alias = quoteIdentifier("_sqsync_t")
        let key = TriggerSQL(table: table).keyExpression(alias)
        let columns = table.columns.map { "\(alias).\(quoteIdentifier($0.name))" }.joined(separator: ", ")
        return """
            SELECT r."cl", r."hlc", r."site", r."seq", r."pk", \(columns)
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
