import SQLiteDatabase

/// The writes of a peer's row values, and the reads of the values they replace.
extension ChangeMerger {
    /// Inserts the row; true when the change carried every column, in order, and went
    /// through ``Target/insertEverything``.
    func runInsert(target: Target, change: RowChange) throws -> Bool {
        if target.carriesEveryColumn(change) {
            try target.bindEveryColumn(of: change, to: target.insertEverything, from: 1)
            try target.insertEverything.run()
            return database.changes == 1
        }
        let names = target.key.map(\.name) + change.columns.map { target.columns[$0.column].name }
        try database.run(MergeSQL.insertRow(target.info.name, columns: names), change.key + change.columns.map(\.value))
        return false
    }

    /// Updates the row; returns the checksum of the values it leaves where its UPDATE could
    /// hand it over (``MergeSQL/updateRowNotingChecksum(_:columns:)``): no trigger of the
    /// app's and no foreign key action runs, and SQLite stores every new value as given. That
    /// spares the entry's write a second read of the row (docs/PERFORMANCE.md, "Import").
    func runUpdate(target: Target, columns: [ColumnChange], keyValues: [SQLValue]) throws -> Int64? {
        guard !columns.isEmpty else { return nil }
        let notesChecksum = triggersOff && !foreignKeysOn && target.storesAsGiven(columns)
        let statement = try target.update(columns.map(\.column), notingChecksum: notesChecksum)
        for (offset, column) in columns.enumerated() {
            try statement.bind(column.value, at: offset + 1)
        }
        try statement.bind(keyValues, from: columns.count + 1)
        let note = replica.checksumNote
        note.calls = 0
        try statement.run()
        guard notesChecksum, note.calls == 1, database.changes == 1 else { return nil }
        return note.value
    }

    func currentValues(target: Target, names: [String], keyValues: [SQLValue]) throws -> [SQLValue]? {
        try database.row(MergeSQL.selectRow(target.info.name, columns: names, key: target.info.primaryKey), keyValues)?.values
    }
}
