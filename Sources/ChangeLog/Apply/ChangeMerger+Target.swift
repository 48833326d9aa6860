import SQLiteDatabase

extension ChangeMerger {
    /// A table the change set touches, with its statements prepared once.
    final class Target {
        let info: TableInfo
        /// Change-set column index → local column.
        let columns: [ColumnInfo]
        let key: [ColumnInfo]
        /// Change-set indexes of the columns outside the key, in order: what an insert carries.
        let nonKeyColumns: [Int]
        /// Change-set indexes of columns a migration dropped here: their values are ignored.
        let dropped: Set<Int>
        /// The change set was made under statements that did not give the table the label it
        /// has here: an update of it that writes a column the label reads may have moved a row
        /// where no label was known, so it leaves the row's reach unknown, as a life without a
        /// reach does (docs/SCOPES.md, "Reach").
        var madeWithoutItsLabel = false
        /// The local column IDs the table's label reads, found once (``TableInfo/labelColumns``).
        lazy var labelColumnIDs = Set(info.labelColumns.map(\.cid))
        let insertEverything: Statement
        /// Writes the entry of a row just written, with its checksum.
        let upsertLiveRowEntry: Statement
        /// The same, with a checksum computed here.
        let upsertLiveRowEntryWithChecksum: Statement
        /// For each of the table's columns in order, the position of its value among those
        /// bound to ``insertEverything``; nil when that insert leaves a column to its default,
        /// or the table's definition may store other values than given.
        private let checksumOrder: [Int]?
        /// The affinity of each value bound to ``insertEverything``.
        private let insertAffinities: [ColumnInfo.Affinity]
        /// ``TableInfo/mayHaveCounters(in:)``, read once.
        let mayHaveCounters: Bool
        let deleteRow: Statement
        /// Records a written row's checksum (``RowChecksum``).
        let recordChecksum: Statement
        /// Records a merged row's column clocks and checksum.
        let writeCellsAndChecksum: Statement
        /// By change-set columns set, and whether the UPDATE hands over the row's checksum.
        private var updates: [UpdateShape: Statement] = [:]
        /// Records a merged row's column clocks and the checksum its UPDATE handed over.
        let writeCellsAndNotedChecksum: Statement
        /// False when a conflict clause in the table's definition (NOT NULL ON CONFLICT
        /// REPLACE, UNIQUE ON CONFLICT IGNORE) can store other values than a write gives, or none.
        let definitionStoresAsGiven: Bool
        /// The affinity of each change-set column, read once: ``ColumnInfo/affinity`` searches
        /// the declared type's text.
        private let affinities: [ColumnInfo.Affinity]
        /// Multi-row inserts of rows and of their entries, by row count (``ChangeMerger/FreshRows``).
        private var batchInserts: [Int: (rows: Statement, entries: Statement)] = [:]
        /// Rows a multi-row insert takes, within SQLite's limit of parameters a statement.
        let batchSize: Int
        private let database: Database
        var counts = ApplySummary.TableCounts()

        init(info: TableInfo, columns: [ColumnInfo], key: [ColumnInfo], dropped: Set<Int>, database: Database) throws {
            self.info = info
            self.columns = columns
            self.key = key
            self.dropped = dropped
            self.database = database
            nonKeyColumns = columns.indices.filter { !columns[$0].isPrimaryKey && !dropped.contains($0) }
            batchSize = max(1, min(ChangeMerger.FreshRows.batchSize, database.parameterLimit / (key.count + nonKeyColumns.count)))
            insertEverything = try database.statement(
                MergeSQL.insertRow(info.name, columns: key.map(\.name) + nonKeyColumns.map { columns[$0].name }))
            upsertLiveRowEntry = try database.statement(MergeSQL.upsertLiveRowEntry(info))
            upsertLiveRowEntryWithChecksum = try database.statement(MergeSQL.upsertLiveRowEntryWithChecksum(info))
            let inserted = key + nonKeyColumns.map { columns[$0] }
            insertAffinities = inserted.map(\.affinity)
            let positions = info.columns.map { column in inserted.firstIndex { $0.cid == column.cid } }
            // A conflict clause in the table's definition (NOT NULL ON CONFLICT REPLACE, UNIQUE
            // ON CONFLICT IGNORE) can store other values than the insert gave, or none.
            let definition = try database.optionalString(MergeSQL.tableDefinition, .text(info.name)) ?? "CONFLICT"
            affinities = columns.map(\.affinity)
            definitionStoresAsGiven = !definition.uppercased().contains("CONFLICT")
            checksumOrder = positions.contains(nil) || !definitionStoresAsGiven ? nil : positions.compactMap { $0 }
            mayHaveCounters = try info.mayHaveCounters(in: database)
            deleteRow = try database.statement(MergeSQL.deleteRow(info.name, key: info.primaryKey))
            recordChecksum = try database.statement(RowChecksum.update(info))
            writeCellsAndChecksum = try database.statement(MergeSQL.writeCellsAndChecksum(info))
            writeCellsAndNotedChecksum = try database.statement(MergeSQL.writeCellsAndNotedChecksum(info))
        }

        /// True when the change carries every column outside the key, in order: what
        /// ``insertEverything`` takes.
        func carriesEveryColumn(_ change: RowChange) -> Bool {
            guard change.columns.count == nonKeyColumns.count else { return false }
            for (column, expected) in zip(change.columns, nonKeyColumns) where column.column != expected { return false }
            return true
        }

        /// Binds the key and columns of a change that ``carriesEveryColumn(_:)``, in
        /// ``insertEverything``'s order, from parameter `first`; returns the next parameter.
        @discardableResult
        func bindEveryColumn(of change: RowChange, to statement: Statement, from first: Int) throws -> Int {
            var parameter = first
            for value in change.key {
                try statement.bind(value, at: parameter)
                parameter += 1
            }
            for column in change.columns {
                try statement.bind(column.value, at: parameter)
                parameter += 1
            }
            return parameter
        }

        /// The checksum of a row ``insertEverything`` just inserted from `change`, when
        /// SQLite stored every value as given (``RowChecksum/storedAsGiven(_:in:)``); nil
        /// otherwise.
        func checksum(ofInserted change: RowChange) -> Int64? {
            guard let checksumOrder else { return nil }
            let keyCount = change.key.count
            func value(_ position: Int) -> SQLValue {
                position < keyCount ? change.key[position] : change.columns[position - keyCount].value
            }
            for (position, affinity) in insertAffinities.enumerated()
            where !RowChecksum.storedAsGiven(value(position), in: affinity) {
                return nil
            }
            var hash = RowChecksum.Accumulator()
            for position in checksumOrder { hash.add(value(position)) }
            return hash.value
        }

        /// The insert of `count` rows of every column (in ``insertEverything``'s order) and
        /// the upsert of their entries, prepared on first use.
        func batchInsert(count: Int) throws -> (rows: Statement, entries: Statement) {
            if let statements = batchInserts[count] { return statements }
            let names = key.map(\.name) + nonKeyColumns.map { columns[$0].name }
            let statements = (
                rows: try database.statement(MergeSQL.insertRows(info.name, columns: names, count: count)),
                entries: try database.statement(MergeSQL.upsertLiveRowEntries(info, count: count))
            )
            batchInserts[count] = statements
            return statements
        }

        /// True when SQLite stores these new values as given (``RowChecksum/storedAsGiven(_:in:)``),
        /// so the checksum of the updated row can be had from its UPDATE.
        func storesAsGiven(_ changes: [ColumnChange]) -> Bool {
            definitionStoresAsGiven
                && changes.allSatisfy { RowChecksum.storedAsGiven($0.value, in: affinities[$0.column]) }
        }

        struct UpdateShape: Hashable {
            let columns: [Int]
            let notingChecksum: Bool
        }

        /// The UPDATE for one set of change-set columns, prepared on first use; with
        /// `notingChecksum`, one that hands over the updated row's checksum
        /// (``MergeSQL/updateRowNotingChecksum(_:columns:)``).
        func update(_ columnIndexes: [Int], notingChecksum: Bool) throws -> Statement {
            let shape = UpdateShape(columns: columnIndexes, notingChecksum: notingChecksum)
            if let statement = updates[shape] { return statement }
            let names = columnIndexes.map { columns[$0].name }
            let statement = try database.statement(
                notingChecksum
                    ? MergeSQL.updateRowNotingChecksum(info, columns: names)
                    : MergeSQL.updateRow(info.name, columns: names, key: info.primaryKey))
            updates[shape] = statement
            return statement
        }
    }
}
