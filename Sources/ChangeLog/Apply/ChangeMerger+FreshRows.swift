import SQLiteDatabase

/// Rows new here, inserted a batch at a time: on a first sync, or whenever a bundle brings
/// rows this replica never saw, most of an import is such rows, and one statement for many
/// rows (and one for their entries) spares SQLite most of its per-statement work.
extension ChangeMerger {
    /// Rows waiting for their multi-row insert, all of one table.
    struct FreshRows {
        static let batchSize = 50

        struct Row {
            let change: RowChange
            let key: SQLValue
            let stamp: LocalStamp
            let cells: [CellClock]
            let checksum: Int64
        }

        var target: Target?
        var rows: [Row] = []
    }

    /// Takes the change into the batch when it starts a life of a row this replica has no
    /// entry for, carries every column, and is stored as given (so its checksum is known
    /// without reading it back), with no trigger of the app's to run. False otherwise: the
    /// caller applies it row by row.
    func bufferFreshRow(_ change: RowChange, target: Target, key: SQLValue) throws -> Bool {
        guard triggersOff, !change.isDelete, change.counters.isEmpty, let stamp = change.rowStamp.map(local),
            !knownHere(stamp), target.carriesEveryColumn(change), let checksum = target.checksum(ofInserted: change)
        else { return false }
        if freshRows.target !== target { try flushFreshRows() }
        let cells = columnClocks(of: change, in: target, differingFrom: stamp)
        freshRows.target = target
        freshRows.rows.append(.init(change: change, key: key, stamp: stamp, cells: cells, checksum: checksum))
        entryCeiling.raise(to: key, tid: target.info.tid)
        if freshRows.rows.count >= target.batchSize { try flushFreshRows() }
        return true
    }

    /// Inserts the waiting rows and their entries. A batch that breaks a constraint (a row
    /// written here while untracked, a UNIQUE clash) leaves nothing behind, SQLite undoing the
    /// whole statement, and its rows are applied one by one, where those cases are settled.
    func flushFreshRows() throws {
        guard let target = freshRows.target, !freshRows.rows.isEmpty else { return }
        let batch = freshRows.rows
        freshRows = FreshRows()
        let statements = try target.batchInsert(count: batch.count)
        do {
            var parameter = 1
            for row in batch {
                parameter = try target.bindEveryColumn(of: row.change, to: statements.rows, from: parameter)
            }
            try statements.rows.run()
        } catch let error as SQLiteError where error.isConstraint {
            for row in batch {
                try startLife(
                    row.change, target: target, key: row.key, stamp: row.stamp, known: false, liveHere: false,
                    localStamp: nil, localCells: .null)
            }
            return
        }
        let entries = statements.entries
        for (index, row) in batch.enumerated() {
            let first = index * MergeSQL.rowEntryParameters + 1
            try entries.bind(row.key, at: first)
            try entries.bind(.integer(row.change.causalLength), at: first + 1)
            try entries.bind(.integer(row.stamp.hlc), at: first + 2)
            try entries.bind(.integer(Int64(row.stamp.site)), at: first + 3)
            try entries.bind(.integer(row.stamp.seq), at: first + 4)
            try entries.bind(CellClocks.stored(row.cells, relativeTo: row.stamp.rowClock), at: first + 5)
            try entries.bind(.integer(row.checksum), at: first + 6)
        }
        try entries.run()
        target.counts.inserted += batch.count
    }
}
