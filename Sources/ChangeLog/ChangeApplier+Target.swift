extension ChangeApplier {
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
        let insertEverything: Statement
        /// Writes the entry of a row just written, with its checksum.
        let upsertLiveRowEntry: Statement
        let deleteRow: Statement
        /// Records a written row's checksum (``RowChecksum``).
        let recordChecksum: Statement
        /// Records a merged row's column clocks and checksum.
        let writeCellsAndChecksum: Statement
        private var updates: [[Int]: Statement] = [:]
        private let database: Database
        var counts = ApplySummary.TableCounts()

        init(info: TableInfo, columns: [ColumnInfo], key: [ColumnInfo], dropped: Set<Int>, database: Database) throws {
            self.info = info
            self.columns = columns
            self.key = key
            self.dropped = dropped
            self.database = database
            nonKeyColumns = columns.indices.filter { !columns[$0].isPrimaryKey && !dropped.contains($0) }
            insertEverything = try database.prepare(
                ApplySQL.insertRow(info.name, columns: key.map(\.name) + nonKeyColumns.map { columns[$0].name }))
            upsertLiveRowEntry = try database.prepare(ApplySQL.upsertLiveRowEntry(info))
            deleteRow = try database.prepare(ApplySQL.deleteRow(info.name, key: info.primaryKey))
            recordChecksum = try database.prepare(RowChecksum.update(info))
            writeCellsAndChecksum = try database.prepare(ApplySQL.writeCellsAndChecksum(info))
        }

        /// The UPDATE for one set of change-set columns, prepared on first use.
        func update(_ columnIndexes: [Int]) throws -> Statement {
            if let statement = updates[columnIndexes] { return statement }
            let statement = try database.prepare(
                ApplySQL.updateRow(info.name, columns: columnIndexes.map { columns[$0].name }, key: info.primaryKey))
            updates[columnIndexes] = statement
            return statement
        }
    }
}
