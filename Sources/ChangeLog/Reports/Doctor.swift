import SQLiteDatabase

extension Replica {
    private static func uncapturedWarning(table: String, columns: [String], path: String) -> String {
        "table \(table) has columns the triggers do not capture (\(columns.joined(separator: ", "))); their values do not sync until `sqsync refresh \(path)`"
    }

    /// Tracked tables with columns their triggers do not capture, and those columns.
    func uncapturedColumns() throws -> [(table: String, columns: [String])] {
        try trackedTableNames().compactMap { name in
            guard let declared = try DeclaredTable.read(name, in: database),
                let tid = try database.optionalInt64(#"SELECT "tid" FROM "_sqsync_tables" WHERE "name" = ?"#, .text(name))
            else { return nil }
            let ids = try columnIDs(tid: Int(tid))
            let uncovered = declared.columns.map(\.name).filter { ids[$0] == nil }
            return uncovered.isEmpty ? nil : (declared.name, uncovered)
        }
    }

    /// Problems that make capture or merge unsafe, each one line; empty when healthy.
    public func doctor(folding: Bool = true) throws -> [String] {
        if folding { try fold() }
        var problems: [String] = []
        let scoped = try ownScope() != nil
        // Writes logged and not folded yet (an app held the write lock) have no entries yet.
        let unfolded = try database.optionalInt64(FoldSQL.lastLogRow) != nil
        for name in try trackedTableNames() {
            guard let declared = try DeclaredTable.read(name, in: database) else {
                problems.append("tracked table \(name) no longer exists; run `sqsync untrack \(path) \(name)`")
                continue
            }
            let tid = Int(
                try database.int64(#"SELECT "tid" FROM "_sqsync_tables" WHERE "name" = ?"#, .text(name)))
            let ids = try columnIDs(tid: tid)
            let uncovered = declared.columns.map(\.name).filter { ids[$0] == nil }
            if !uncovered.isEmpty { problems.append(Self.uncapturedWarning(table: declared.name, columns: uncovered, path: path)) }
            guard let table = try trackedTable(tid: tid, name: name) else { continue }
            let expected = TriggerSQL(table: table).all
            for trigger in expected {
                let installed = try database.optionalString(
                    "SELECT sql FROM sqlite_schema WHERE type = 'trigger' AND name = ?", .text(trigger.name))
                if installed == nil {
                    problems.append("table \(name) is missing trigger \(trigger.name); run `sqsync refresh \(path)`")
                } else if installed != trigger.sql {
                    problems.append("trigger \(trigger.name) does not match table \(name)'s schema; run `sqsync refresh \(path)`")
                }
            }
            let liveEntries =
                try database.int64(
                    #"SELECT count(*) FROM "_sqsync_rows" WHERE "tid" = ? AND "cl" % 2 = 1"#, .integer(Int64(tid)))
            let rows = try database.int64("SELECT count(*) FROM \(quoteIdentifier(name))")
            // A scoped replica keeps the entries of rows that left its scope (docs/SCOPES.md).
            if liveEntries != rows && !(table.label != nil && scoped) && !unfolded {
                problems.append(
                    "table \(name) has \(rows) rows but sqsync records \(liveEntries) live rows; a write bypassed the triggers (for example INSERT OR REPLACE removing another row through a UNIQUE column)"
                )
            }
        }
        for orphan in try orphans().prefix(20) {
            problems.append(
                "\(orphan.table) row \(orphan.key.map { "(\($0))" } ?? "?") refers to a missing row of \(orphan.parent)\(orphan.reference.map { " (\($0))" } ?? "") (a parent deleted concurrently)"
            )
        }
        return problems
    }
}
