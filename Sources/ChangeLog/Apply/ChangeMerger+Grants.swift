import SQLiteDatabase

/// The grants a change set's origin held where it made its changes (docs/SCOPES.md).
public struct Authorization: Sendable {
    /// The rules of the admin statements the origin made the changes under.
    public var rules: AdminRules
    /// The origin's knowledge ID.
    public var origin: String

    public init(rules: AdminRules, origin: String) {
        self.rules = rules
        self.origin = origin
    }
}

extension ChangeMerger {
    /// Whether the origin's grants allow the change, judged on the row's label here before
    /// it and after it: a move from one label to another needs the right on both. A denied
    /// change is not applied, and is logged as a conflict of kind "denied"; knowledge moves
    /// past it all the same, so every replica ends in the same state.
    func isAllowed(_ change: RowChange, in target: Target, by authorization: Authorization) throws -> Bool {
        let rules = authorization.rules
        let origin = authorization.origin
        let table = target.info
        guard rules.isRestricted(origin) else { return true }
        let current = try rowWithLabel(target: target, keyValues: change.key)
        let oldLabel = current?.label
        let verdict: (allowed: Bool, operation: String, label: String?)
        if change.isDelete {
            // Nothing held here to protect; a move out of a label looks like a delete to readers
            // of that label only, so the right to update covers it.
            guard current != nil else { return true }
            let allowed =
                rules.allows(origin, .delete, on: table.name, label: oldLabel)
                || rules.allows(origin, .update, on: table.name, label: oldLabel)
            verdict = (allowed, "delete", oldLabel)
        } else if change.rowStamp != nil {
            var values = change.key.count == table.primaryKey.count ? [String: SQLValue]() : [:]
            for (position, column) in table.primaryKey.enumerated() { values[column.name] = change.key[position] }
            for column in change.columns { values[target.columns[column.column].name] = column.value }
            let newLabel = try label(of: values, in: target)
            if current != nil {
                let allowed =
                    rules.allows(origin, .update, on: table.name, label: oldLabel)
                    && rules.allows(origin, .update, on: table.name, label: newLabel)
                verdict = (allowed, "update", oldLabel == newLabel ? newLabel : "\(oldLabel ?? "none") → \(newLabel ?? "none")")
            } else {
                verdict = (rules.allows(origin, .insert, on: table.name, label: newLabel), "insert", newLabel)
            }
        } else {
            guard let current else { return true }
            var values = current.values
            for column in change.columns { values[target.columns[column.column].name] = column.value }
            let newLabel = try label(of: values, in: target)
            let allowed =
                rules.allows(origin, .update, on: table.name, label: oldLabel)
                && rules.allows(origin, .update, on: table.name, label: newLabel)
            verdict = (allowed, "update", oldLabel == newLabel ? newLabel : "\(oldLabel ?? "none") → \(newLabel ?? "none")")
        }
        guard !verdict.allowed else { return true }
        guard let stamp = change.rowStamp ?? change.columns.first?.stamp ?? change.counters.first?.stamp else { return false }
        let labelText = table.label == nil ? "" : " with label \(verdict.label ?? "none")"
        try recordConflict(
            kind: "denied: \(verdict.operation) of \(table.name)\(labelText) not granted", table: table.name,
            keyValues: change.key, column: nil, value: .null,
            row: change.columns.isEmpty
                ? nil : Dictionary(change.columns.map { (target.columns[$0.column].name, $0.value) }) { _, last in last },
            lost: local(stamp), won: nil)
        target.counts.conflicts += 1
        return false
    }

    /// The row as held here, by column name, with its label; nil when it is not here.
    private func rowWithLabel(target: Target, keyValues: [SQLValue]) throws -> (values: [String: SQLValue], label: String?)? {
        let table = target.info
        let names = table.columns.map(\.name)
        let labelColumn = table.label.map { ScopeSQL.labelValue($0) } ?? "NULL"
        let condition = table.primaryKey.enumerated().map { "\(quoteIdentifier($0.element.name)) IS ?\($0.offset + 1)" }
            .joined(separator: " AND ")
        let sql =
            "SELECT \(names.map(quoteIdentifier).joined(separator: ", ")), \(labelColumn) FROM \(quoteIdentifier(table.name)) WHERE \(condition)"
        guard let row = try database.row(sql, keyValues) else { return nil }
        let values = row.values
        var byName: [String: SQLValue] = [:]
        for (index, name) in names.enumerated() { byName[name] = values[index] }
        return (byName, values[names.count].stringValue)
    }

    /// The label a row with these values has (nil: none).
    private func label(of values: [String: SQLValue], in target: Target) throws -> String? {
        guard let expression = target.info.label else { return nil }
        let columns = target.info.columns
        let select = columns.enumerated().map { "?\($0.offset + 1) AS \(quoteIdentifier($0.element.name))" }.joined(separator: ", ")
        let sql = "SELECT \(ScopeSQL.labelValue(expression)) FROM (SELECT \(select))"
        return try database.row(sql, columns.map { values[$0.name] ?? .null })?.values.first?.stringValue
    }

    /// Whether the row is in the user's table here.
    func holdsRow(target: Target, keyValues: [SQLValue]) throws -> Bool {
        try rowWithLabel(target: target, keyValues: keyValues) != nil
    }
}
