import SQLiteDatabase

/// The applier's answers to constraints and conflicts: settling UNIQUE clashes the same
/// way on every replica, and keeping every losing change in the conflict log.
extension ChangeMerger {
    // MARK: UNIQUE clashes

    /// Runs a write; when it breaks a UNIQUE constraint against another row, the row whose
    /// life began later loses on every replica alike: it is removed, kept whole in the
    /// conflict log and deleted for peers too. Returns false when the incoming row lost.
    func writeSettlingUniqueClashes(
        target: Target, keyValues: [SQLValue], writing: () -> [String: SQLValue], lifeStamp: LocalStamp, cl: Int64,
        _ write: () throws -> Void
    ) throws -> Bool {
        for _ in 0..<16 {
            do {
                try write()
                return true
            } catch let error as SQLiteError where error.isUniqueConstraint {
                guard let other = try clashingRow(target: target, keyValues: keyValues, writing: writing()) else { throw error }
                let otherKey = try metadataKey(other.key)
                let otherEntry = try rowEntry(tid: target.info.tid, key: otherKey)
                let otherStamp = otherEntry?.stamp ?? LocalStamp(hlc: Int64.max, site: 0, seq: 0)
                if isLater(lifeStamp, than: otherStamp) {
                    try removeLosingRow(
                        target: target, keyValues: keyValues, row: other.incoming, cl: cl, lost: lifeStamp, won: otherStamp)
                    return false
                }
                try removeLosingRow(
                    target: target, keyValues: other.key, row: other.row, cl: otherEntry?.cl ?? 1,
                    lost: otherStamp, won: lifeStamp)
            }
        }
        throw MergeHeld(
            HoldReason(
                .uniqueClashUnsettled(table: target.info.name),
                "\(replica.path): could not settle UNIQUE clashes in table \(target.info.name)"))
    }

    /// The other row that holds the unique values the failed write wanted, found by trying
    /// each UNIQUE index with the values the row would have had.
    func clashingRow(
        target: Target, keyValues: [SQLValue], writing: [String: SQLValue]
    )
        throws -> (key: [SQLValue], row: [String: SQLValue], incoming: [String: SQLValue])?
    {
        let names = target.info.columns.map(\.name)
        var wanted: [String: SQLValue] = [:]
        if let current = try currentValues(target: target, names: names, keyValues: keyValues) {
            for (index, name) in names.enumerated() { wanted[name] = current[index] }
        }
        for (index, column) in target.info.primaryKey.enumerated() { wanted[column.name] = keyValues[index] }
        wanted.merge(writing) { _, new in new }
        for index in try database.rows(MergeSQL.uniqueIndexes, .text(target.info.name)) {
            let columns = try index.string("columns").split(separator: "\u{1F}").map(String.init)
            let collations = try index.string("collations").split(separator: "\u{1F}").map(String.init)
            let values = columns.map { wanted[$0] ?? .null }
            if values.contains(.null) || collations.count != columns.count { continue }
            let condition = columns.indices.map {
                "\(quoteIdentifier(columns[$0])) = ?\($0 + 1) COLLATE \(quoteIdentifier(collations[$0]))"
            }.joined(separator: " AND ")
            let sql =
                "SELECT \(names.map(quoteIdentifier).joined(separator: ", ")) FROM \(quoteIdentifier(target.info.name)) WHERE \(condition)"
            for row in try database.rows(sql, values) {
                var byName: [String: SQLValue] = [:]
                for (position, name) in names.enumerated() { byName[name] = row.values[position] }
                let key = target.info.primaryKey.map { byName[$0.name] ?? .null }
                if key != keyValues { return (key, byName, wanted) }
            }
        }
        return nil
    }

    func removeLosingRow(
        target: Target, keyValues: [SQLValue], row: [String: SQLValue], cl: Int64,
        lost: LocalStamp, won: LocalStamp
    ) throws {
        try recordConflict(
            kind: "unique clash", table: target.info.name, keyValues: keyValues, column: nil,
            value: .null, row: row, lost: lost, won: won)
        try database.run(MergeSQL.deleteRow(target.info.name, key: target.info.primaryKey), keyValues)
        try database.run(MergeSQL.observeClock, .integer(highestClock))
        guard let tick = try database.row(MergeSQL.tick) else { throw RowDecodingError("the replica row is missing") }
        let stamp = LocalStamp(hlc: try tick.int64("hlc"), site: try tick.int("site"), seq: try tick.int64("seq"))
        let key = try metadataKey(keyValues)
        let deadLength = cl % 2 == 1 ? cl + 1 : cl
        try writeRowEntry(tid: target.info.tid, key: key, cl: deadLength, stamp: stamp)
        try deleteCounters(of: target, key: key)
        target.counts.conflicts += 1
    }

    // MARK: Conflict log

    /// What this replica wrote that the sender never saw, about to be lost to its delete:
    /// the whole row when the sender never saw this life begin, else the changed columns.
    /// `cells`: the column clocks of the row's entry, packed, as read with it.
    func recordLocalLosses(target: Target, values: [SQLValue], kind: String, life: LocalStamp?, cells packed: SQLValue) throws {
        if let life, !knownToSender(life) {
            let names = target.info.columns.map(\.name)
            let current = try currentValues(target: target, names: names, keyValues: values) ?? []
            let row = Dictionary(zip(names, current)) { first, _ in first }
            try recordConflict(
                kind: "insert lost to delete", table: target.info.name, keyValues: values, column: nil, value: .null,
                row: row, lost: life, won: nil)
            target.counts.conflicts += 1
            return
        }
        guard let life else { return }
        // Mostly the sender holds every column clock of the row and nothing is lost: that is
        // told from the clocks as decoded, before building a map of them by column.
        guard try replica.cellClocks(packed, of: life.rowClock).contains(where: { !knownToSender($0.stamp) }) else { return }
        let cells = try localCells(packed, of: life.rowClock).filter { !knownToSender($0.value) }
        guard !cells.isEmpty else { return }
        let columns = target.info.columns.filter { cells[$0.cid] != nil }
        let current = try currentValues(target: target, names: columns.map(\.name), keyValues: values)
        for (index, column) in columns.enumerated() {
            try recordConflict(
                kind: kind, table: target.info.name, keyValues: values, column: column.name,
                value: current?[index] ?? .null, row: nil, lost: cells[column.cid]!, won: nil)
        }
        target.counts.conflicts += columns.count
    }

    /// The columns of one merged change that lost here (`losers`: the incoming values) or that
    /// overwrote a value of this replica's its writer never saw (`displaced`): each logged with
    /// the value that won beside the one that lost.
    func recordColumnConflicts(
        _ change: RowChange, target: Target, losers: [(column: ColumnInfo, value: SQLValue, stamp: LocalStamp, winner: LocalStamp)],
        displaced: [(column: ColumnInfo, stamp: LocalStamp, winner: LocalStamp, value: SQLValue)]
    ) throws {
        if !losers.isEmpty {
            let kept = try currentValues(target: target, names: losers.map(\.column.name), keyValues: change.key)
            for (index, loser) in losers.enumerated() {
                let won = kept?[index] ?? .null
                // A life record carries every column: one its writer took from another replica
                // since goes under the insert's stamp with the value it took. The very value that
                // wins here says nothing of what that writer lost; its own log tells.
                let lostValue: SQLValue? = loser.value == won && loser.stamp == change.rowStamp.map(local) ? nil : loser.value
                try recordConflict(
                    kind: "concurrent update", table: target.info.name, keyValues: change.key,
                    column: loser.column.name, value: lostValue, row: nil, lost: loser.stamp, won: loser.winner, wonValue: won)
            }
        }
        if !displaced.isEmpty {
            let current = try currentValues(target: target, names: displaced.map(\.column.name), keyValues: change.key)
            for (index, entry) in displaced.enumerated() {
                try recordConflict(
                    kind: "concurrent update", table: target.info.name, keyValues: change.key,
                    column: entry.column.name, value: current?[index] ?? .null, row: nil,
                    lost: entry.stamp, won: entry.winner, wonValue: entry.value)
            }
        }
        target.counts.conflicts += losers.count + displaced.count
    }

    /// Changes from a life of the row that already ended here.
    func recordStale(_ change: RowChange, target: Target, localIsDeleted: Bool) throws {
        let fresh = change.columns.filter { !knownHere(local($0.stamp)) }
        if let rowStamp = change.rowStamp.map(local), !change.isDelete, !knownHere(rowStamp) {
            var row: [String: SQLValue] = [:]
            for (index, column) in target.key.enumerated() { row[column.name] = change.key[index] }
            for column in change.columns { row[target.columns[column.column].name] = column.value }
            try recordConflict(
                kind: "insert lost to delete", table: target.info.name, keyValues: change.key, column: nil,
                value: .null, row: row, lost: rowStamp, won: nil)
            target.counts.conflicts += 1
            return
        }
        for column in fresh {
            try recordConflict(
                kind: localIsDeleted ? "update lost to delete" : "update lost to re-insert",
                table: target.info.name, keyValues: change.key, column: target.columns[column.column].name,
                value: column.value, row: nil, lost: local(column.stamp), won: nil)
        }
        target.counts.conflicts += fresh.count
    }

    /// Logs a change that lost: its value (`value`, or nil when the loser's own value is not
    /// known here) and writer, and the value that won (`wonValue`, for a column).
    func recordConflict(
        kind: String, table: String, keyValues: [SQLValue], column: String?, value: SQLValue?,
        row: [String: SQLValue]?, lost: LocalStamp, won: LocalStamp?, wonValue: SQLValue? = nil
    ) throws {
        try database.run(
            MergeSQL.recordConflict, .text(kind), .text(table), .text(keyValues.map(\.literal).joined(separator: ", ")),
            column.map(SQLValue.text) ?? .null, value ?? .null, row.map { .text(JSONText.object($0)) } ?? .null,
            .text(siteIDs[lost.site] ?? ""), .integer(lost.hlc),
            won.map { .text(siteIDs[$0.site] ?? "") } ?? .null, won.map { .integer($0.hlc) } ?? .null, wonValue ?? .null,
            .integer(value == nil ? 0 : 1))
    }
}
