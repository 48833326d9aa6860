import SQLiteDatabase

/// Whether a label expression applies to this replica's table, asked before anything is
/// written: a label names columns, and a replica whose schema lacks one (before or after a
/// migration) cannot index or judge rows by it. Admission holds such a bundle at once, by a
/// query that is prepared and never run, instead of finding out half-way through a merge.
extension Replica {
    /// The first table in `tables` whose label in `rules` does not apply here, as the reason
    /// the changes of `origin` wait; nil when every one applies.
    public func labelHold(judging origin: String, by rules: AdminRules, tables: [String], path: String) throws -> HoldReason? {
        for table in tables.sorted() {
            guard let expression = rules.labels[table], let failure = try labelFailure(table: table, expression: expression)
            else { continue }
            return HoldReason(
                .labelNotApplicable(table: table),
                "\(path): the changes of \(origin) are judged by a label of \(table) that does not apply here (\(failure)); held until it does")
        }
        return nil
    }

    /// The label a tracked table would get once `statements` are added (``addAdminStatements(_:)``,
    /// replayed in (issued, id) order with those held) that does not apply here, as the reason
    /// the bundle carrying them waits; nil when each applies or none is new.
    public func labelHold(adding statements: [StoredAdminStatement], path: String) throws -> HoldReason? {
        guard !statements.isEmpty else { return nil }
        var byID: [[UInt8]: StoredAdminStatement] = [:]
        for statement in try adminStatements() { byID[statement.id] = statement }
        let heldCount = byID.count
        for statement in statements where byID[statement.id] == nil { byID[statement.id] = statement }
        guard byID.count > heldCount else { return nil }
        let replayed = byID.values.sorted {
            $0.issued != $1.issued ? $0.issued < $1.issued : $0.id.lexicographicallyPrecedes($1.id)
        }
        let rules = AdminRules(acts: replayed.map(\.act))
        for table in try trackedTables(skippingMissing: true) {
            guard let label = rules.labels[table.name], label != table.label,
                let failure = try labelFailure(table: table.name, expression: label)
            else { continue }
            return HoldReason(
                .labelNotApplicable(table: table.name),
                "\(path): the label of \(table.name), \(label), does not apply here (\(failure)); held until it does")
        }
        return nil
    }

    /// SQLite's own message when `expression` cannot be read over `table`'s columns; nil when
    /// it can, or when no such table exists here (its changes wait for other reasons).
    private func labelFailure(table: String, expression: String) throws -> String? {
        guard try database.int64(LabelCheckSQL.tableExists, .text(table)) == 1 else { return nil }
        do {
            // Not from the statement cache: one prepared before a migration would still say yes.
            _ = try database.uncachedStatement(LabelCheckSQL.readLabel(expression, of: table))
            return nil
        } catch let error as SQLiteError {
            return error.message
        }
    }
}

enum LabelCheckSQL {
    static let tableExists = #"SELECT EXISTS (SELECT 1 FROM "sqlite_schema" WHERE "type" = 'table' AND "name" = ?)"#

    /// Prepared only, never stepped: preparing resolves every column the label names.
    static func readLabel(_ expression: String, of table: String) -> String {
        "SELECT \(ScopeSQL.labelValue(expression)) FROM \(quoteIdentifier(table)) LIMIT 0"
    }
}
