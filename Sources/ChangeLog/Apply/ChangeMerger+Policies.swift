import SQLiteDatabase

/// Merging columns whose policy is not last-writer-wins (docs/MERGE_RULES.md).
extension ChangeMerger {
    // MARK: Counters

    /// Adds what this replica lacks of each contribution to the row's counters, when the row
    /// lives here in the life the contributions belong to. Returns true when a value moved.
    func applyCounters(_ change: RowChange, to target: Target) throws -> Bool {
        let tid = target.info.tid
        let key = try metadataKey(change.key)
        guard let entry = try rowEntry(tid: tid, key: key), entry.cl == change.causalLength, entry.cl % 2 == 1 else {
            // A life that ended here, or one not begun yet: its counts go with it.
            return false
        }
        var moved = false
        for contribution in change.counters {
            let column = target.columns[contribution.column]
            guard column.policy == .counter else { continue }
            let stamp = local(contribution.stamp)
            highestClock = max(highestClock, stamp.hlc)
            let held = try counterEntry(tid: tid, key: key, cid: column.cid, site: stamp.site)
            if let held, stamp.seq <= held.seq || contribution.folded < held.folded { continue }
            // Known here with no entry left: folded into the value already (purge).
            if held == nil && knownHere(stamp) { continue }
            // The replica folded what is held here into the value since: add its new total whole.
            let alreadyCounted = held.map { $0.folded == contribution.folded ? $0.total : .integer(0) } ?? .integer(0)
            let delta = CounterArithmetic.subtract(contribution.total, alreadyCounted)
            try writeCounterEntry(tid: tid, key: key, cid: column.cid, contribution: contribution, stamp: stamp)
            if delta != .integer(0) {
                try database.run(
                    MergeSQL.addToColumn(target.info.name, column: column.name, key: target.info.primaryKey),
                    [delta] + change.key)
                moved = true
            }
        }
        if moved { try replica.recordChecksum(of: key, in: target.info, with: target.recordChecksum) }
        return moved
    }

    /// An incoming counter base that won: the value to write is that base plus the
    /// contributions this replica holds for the cell.
    func counterValue(_ change: ColumnChange, target: Target, key: SQLValue) throws -> ColumnChange {
        let statement = statements.sumOfCounter
        try statement.bind([.integer(Int64(target.info.tid)), key, .integer(Int64(target.columns[change.column].cid))])
        var result = change
        result.value = CounterArithmetic.add(change.value, try statement.fetchOne { $0.value(at: 0) } ?? .null)
        return result
    }

    private func counterEntry(tid: Int, key: SQLValue, cid: Int, site: Int) throws
        -> (total: SQLValue, folded: Int64, seq: Int64)?
    {
        let statement = statements.counterEntry
        try statement.bind([.integer(Int64(tid)), key, .integer(Int64(cid)), .integer(Int64(site))])
        return try statement.fetchOne { ($0.value(at: 0), $0.int64(at: 1), $0.int64(at: 3)) }
    }

    private func writeCounterEntry(tid: Int, key: SQLValue, cid: Int, contribution: CounterChange, stamp: LocalStamp)
        throws
    {
        try statements.writeCounterEntry.bind([
            .integer(Int64(tid)), key, .integer(Int64(cid)), .integer(Int64(stamp.site)), contribution.total,
            .integer(contribution.folded), .integer(stamp.hlc), .integer(stamp.seq),
        ])
        try statements.writeCounterEntry.run()
    }

    // MARK: max and min

    /// The row's current values of its max and min columns, by column id.
    func extremeValues(target: Target, keyValues: [SQLValue]) throws -> [Int: SQLValue] {
        let columns = target.info.columns.filter(\.policy.isExtremum)
        guard let values = try currentValues(target: target, names: columns.map(\.name), keyValues: keyValues) else {
            return [:]
        }
        return Dictionary(uniqueKeysWithValues: zip(columns.map(\.cid), values))
    }

    /// Above 0 when `incoming` should replace `current` under a max or min policy, below 0
    /// when it loses, 0 when they are the same value. NULL counts as no value: it never
    /// replaces one, and any value replaces it (as SQL's max() and min() ignore NULL).
    static func extremumOrder(_ incoming: SQLValue, over current: SQLValue, policy: MergePolicy) -> Int {
        switch (incoming, current) {
        case (.null, .null): return 0
        case (.null, _): return -1
        case (_, .null): return 1
        default:
            let order = sqliteOrder(incoming, current)
            return policy == .max ? order : -order
        }
    }
}
