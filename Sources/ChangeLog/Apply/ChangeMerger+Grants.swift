import SQLiteDatabase

/// The grants a change set's origin held where it made its changes (docs/SCOPES.md).
public struct Authorization: Sendable {
    /// The rules of the admin statements the origin made the changes under.
    public var rules: AdminRules
    /// The origin's knowledge ID.
    public var origin: String
    /// Whether the receiving replica has a scope (holds only some rows).
    public var receiverHasScope: Bool
    /// Whether the changes leave out a label or scope statement their origin's own evidence
    /// shows it held (its key may be in other hands). Such an origin cuts its changes for no
    /// scope it claims not to know, so a replica holding every row announces what it takes of
    /// them as its own, cut for every scope (``ChangeMerger/takenBeyondItsWord``).
    public var beyondItsWord: Bool

    public init(rules: AdminRules, origin: String, receiverHasScope: Bool, beyondItsWord: Bool = false) {
        self.rules = rules
        self.origin = origin
        self.receiverHasScope = receiverHasScope
        self.beyondItsWord = beyondItsWord
    }
}

extension ChangeMerger {
    /// Notes the row a change wrote, when the change is new here and made beyond its origin's
    /// word (``takenBeyondItsWord``): a set merged again (kept, relayed back) announces nothing.
    func noteIfTakenBeyondItsWord(_ change: RowChange, in target: Target) {
        guard authorization?.beyondItsWord == true, !isOldNews(change),
            takenBeyondItsWordKeys.insert([.text(target.info.name)] + change.key).inserted
        else { return }
        takenBeyondItsWord.append((target.info.name, change.key))
    }

    /// The rows taken beyond their origin's word that are not among `rows` (a row gets one new
    /// life per merge).
    func takenBeyondItsWord(besides rows: [(table: String, key: [SQLValue])]) -> [(table: String, key: [SQLValue])] {
        let listed = Set(rows.map { [SQLValue.text($0.table)] + $0.key })
        return takenBeyondItsWord.filter { !listed.contains([.text($0.table)] + $0.key) }
    }

    /// Whether the origin's grants allow the change (docs/SCOPES.md), judged with the labels
    /// of the statements the origin named, by one rule every replica applies alike:
    ///
    /// - a new life over a row held here: update on that row's label and insert or update on
    ///   the new one, or delete on the row's label and insert on the new one (it replaces it);
    /// - another new life: insert on its label (the first life), or insert or update on it (a
    ///   later one: a move, or an insert after a delete); the label comes from the record;
    /// - an update: update on the row's label here before and after it (an update within
    ///   a life not held here waits for that life, or lost to a later one);
    /// - a delete: delete on the row's label here.
    ///
    /// An update or delete of a row not held here is taken: nothing here to protect. A denied
    /// change is not applied and is logged as a conflict of kind "denied" the first time it
    /// is met; knowledge moves past it all the same, so every replica ends in the same state.
    func isAllowed(_ change: RowChange, in target: Target, by authorization: Authorization) throws -> Bool {
        let rules = authorization.rules
        let origin = authorization.origin
        let table = target.info
        guard rules.isRestricted(origin) else { return true }
        do {
            return try judge(change, in: target, by: authorization)
        } catch let error as SQLiteError {
            // A label the origin's statements give that names a column this replica no longer
            // has (or not yet): as with a bundle of another schema, the bundle waits.
            throw MergeHeld(
                HoldReason(
                    .labelNotApplicable(table: table.name),
                    "\(replica.path): the changes of \(origin) are judged by a label of \(table.name) that does not apply here (\(error.message))"
                ))
        }
    }

    private func judge(_ change: RowChange, in target: Target, by authorization: Authorization) throws -> Bool {
        let rules = authorization.rules
        let origin = authorization.origin
        let table = target.info
        let expression = rules.labels[table.name]
        let stamps = [change.rowStamp].compactMap { $0 } + change.columns.map(\.stamp) + change.counters.map(\.stamp)
        guard let latest = stamps.max(by: { $0.seq < $1.seq }) else { return true }
        let verdict: (allowed: Bool, operation: String, label: String?)
        if change.isDelete {
            guard let current = try rowWithLabel(target: target, keyValues: change.key, expression: expression) else {
                return try takesWithoutRow(change, in: target, stamp: latest, scoped: authorization.receiverHasScope)
            }
            verdict = (rules.allows(origin, .delete, on: table.name, label: current.label), "delete", current.label)
        } else if change.rowStamp != nil {
            let values = lifeValues(change, in: target)
            let label = try self.label(of: values, in: target, expression: expression)
            if let replaced = try replacedRow(change, in: target, expression: expression) {
                // A life over a row held here (or, with a scope, one that left it) replaces it:
                // an update of that row into its new label, or a delete of it and an insert.
                let allowed =
                    (rules.allows(origin, .update, on: table.name, label: replaced.label)
                        && (rules.allows(origin, .update, on: table.name, label: label)
                            || rules.allows(origin, .insert, on: table.name, label: label)))
                    || (rules.allows(origin, .delete, on: table.name, label: replaced.label)
                        && rules.allows(origin, .insert, on: table.name, label: label))
                verdict = (allowed, Self.replacingLife, replaced.label == label ? label : "\(replaced.label ?? "unknown") → \(label ?? "none")")
            } else if change.causalLength <= 1 {
                verdict = (rules.allows(origin, .insert, on: table.name, label: label), "insert", label)
            } else {
                let allowed =
                    rules.allows(origin, .insert, on: table.name, label: label)
                    || rules.allows(origin, .update, on: table.name, label: label)
                verdict = (allowed, "new life", label)
            }
        } else {
            // An update within a life other than the one held here is judged where that life
            // is: a later one has not arrived (the set comes again once it has, and is judged
            // then), an earlier one lost already.
            if let entry = try rowEntry(tid: table.tid, key: try metadataKey(change.key)), entry.cl != change.causalLength {
                return true
            }
            guard let current = try rowWithLabel(target: target, keyValues: change.key, expression: expression) else {
                return try takesWithoutRow(change, in: target, stamp: latest, scoped: authorization.receiverHasScope)
            }
            var values = current.values
            for column in change.columns { values[target.columns[column.column].name] = column.value }
            let newLabel = try label(of: values, in: target, expression: expression)
            let allowed =
                rules.allows(origin, .update, on: table.name, label: current.label)
                && rules.allows(origin, .update, on: table.name, label: newLabel)
            verdict = (
                allowed, "update",
                current.label == newLabel ? newLabel : "\(current.label ?? "none") → \(newLabel ?? "none")"
            )
        }
        guard !verdict.allowed else { return true }
        // A set merged again (a relay, a replay) meets its denied changes again: logged once.
        // Unless the set is a second file's under the origin's identity: it shows the clash
        // (``OriginNumbering``), or it is another file's cut (``anotherFileFrom``). Then a
        // change under a number held here, from where the files may part, is that file's, met
        // for the first time, unless this replica holds this very change (a thief that set the
        // file's numbers back writes under numbers honest replicas hold). It is logged and
        // undone as any denied change, so the new life reaches the replicas that took it
        // before they held the origin's own change under that number. One taken here is left:
        // a new life of it would carry the denied values.
        if knownHere(local(latest)) {
            let parting = [numbering.clash.map { min($0.seq, $0.other) }, anotherFileFrom].compactMap { $0 }.min()
            guard let parting, latest.seq >= parting, try !holdsThisChange(change, in: target) else { return false }
        }
        // A denied change the row here is past already (a later life, this replica's undo of
        // it when its set is merged again) would lose anyway: nothing to log or undo.
        let key = try metadataKey(change.key)
        let entry = try rowEntry(tid: table.tid, key: key)
        if let entry, entry.cl > change.causalLength {
            // But a life its writer made without knowing the later one (a key a scoped replica
            // never held, taken by an insert of its own) stays there unless the later life
            // reached it. When it brings labels the row's reach here lacks, no life of the row
            // was meant for its readers: a new life of this replica's, whose reach then holds
            // them (``widenReach(byDenied:)``), tells them. Met again, it brings nothing new.
            if change.rowStamp != nil, !change.reach.isWithin(try reaches.reach(tid: table.tid, key: key)),
                try holdsRow(target: target, keyValues: change.key)
            {
                undoneByNewLife.append((table.name, change.key, entry.cl))
            }
            return false
        }
        // A denied change stays at its writer, and at any replica that took it (one with a
        // scope that never held the key, or one without the evidence that binds its writer):
        // a replica that holds the row undoes it there with a new life of its own, above the
        // causal length the denied update, delete or life gave it, which wins whatever the
        // clocks say. A denied new row held nowhere here gets a deletion above it, whose
        // reach is the life's label: it goes to the readers that may hold the row, and tells
        // its key to no one else.
        if try holdsRow(target: target, keyValues: change.key) {
            undoneByNewLife.append((table.name, change.key, change.causalLength))
        } else if change.rowStamp != nil, !change.isDelete,
            let denied = try deniedNewRow(change, in: target, writersExpression: expression)
        {
            deniedNewRows.append(denied)
        }
        let stamp = latest
        let labelText = expression == nil ? "" : " with label \(verdict.label ?? "none")"
        try recordConflict(
            kind: "denied: \(verdict.operation) of \(table.name)\(labelText) not granted", table: table.name,
            keyValues: change.key, column: nil, value: .null,
            row: change.columns.isEmpty
                ? nil : Dictionary(change.columns.map { (target.columns[$0.column].name, $0.value) }) { _, last in last },
            lost: local(stamp), won: nil)
        target.counts.conflicts += 1
        return false
    }

    private static let replacingLife = "new life over a row"

    /// Whether the row here carries `change`'s own stamp: its life's, or a column's.
    private func holdsThisChange(_ change: RowChange, in target: Target) throws -> Bool {
        guard let entry = try rowEntry(tid: target.info.tid, key: try metadataKey(change.key)) else { return false }
        if let rowStamp = change.rowStamp { return entry.stamp == local(rowStamp) }
        let clocks = try replica.cellClocks(entry.cells, of: entry.stamp.rowClock)
        return change.columns.contains { column in
            let stamp = local(column.stamp)
            return entry.stamp == stamp || clocks.contains { $0.stamp == stamp }
        }
    }

    /// The row a new life would replace: the one held here, with its label. (A key a replica
    /// with a scope holds only as a ghost is judged as a new row there: the ghost's label is
    /// not known, and may have changed since; replicas that hold the row deny a life over it
    /// and give the row a new life, which reaches this replica too.)
    private func replacedRow(_ change: RowChange, in target: Target, expression: String?) throws -> ReplacedRow? {
        try rowWithLabel(target: target, keyValues: change.key, expression: expression).map { ReplacedRow(label: $0.label) }
    }

    /// An update or delete by a restricted origin of a row not in the table here. A replica
    /// with a scope takes it (only the row's entry changes). One without a scope holds every
    /// row it knows of: if it knows of none under that key, the life has not arrived yet, and
    /// judging now would differ from judging with the row, so the change waits for it, as a
    /// change to a life not seen begin does (the set comes again).
    private func takesWithoutRow(_ change: RowChange, in target: Target, stamp: Stamp, scoped: Bool) throws -> Bool {
        if knownHere(local(stamp)) || scoped { return true }
        guard try rowEntry(tid: target.info.tid, key: try metadataKey(change.key)) == nil else { return true }
        sawUnseenLife = true
        target.counts.unchanged += 1
        return false
    }

    /// The row as held here, by column name, with its label under `expression` (the table's
    /// own when not given); nil when it is not here.
    func rowWithLabel(target: Target, keyValues: [SQLValue], expression: String?? = nil) throws
        -> (values: [String: SQLValue], label: String?)?
    {
        let table = target.info
        let names = table.columns.map(\.name)
        let labelColumn = (expression ?? table.label).map { ScopeSQL.labelValue($0) } ?? "NULL"
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

    /// The label a row with these values has under `expression` (nil: none).
    private func label(of values: [String: SQLValue], in target: Target, expression: String?) throws -> String? {
        guard let expression else { return nil }
        let columns = target.info.columns
        let select = columns.enumerated().map { "?\($0.offset + 1) AS \(quoteIdentifier($0.element.name))" }.joined(separator: ", ")
        let sql = "SELECT \(ScopeSQL.labelValue(expression)) FROM (SELECT \(select))"
        return try database.row(sql, columns.map { values[$0.name] ?? .null })?.values.first?.stringValue
    }

    /// A denied life of a row not held here, as ``Replica/endDeniedNewRows(_:)`` ends it, with
    /// the reach of the replicas that may hold it: its label, under this replica's expression
    /// and under its writer's (a replica that took it holds it by its values; the record's own
    /// reach is the writer's word, which could name more scopes). nil when that cannot be told
    /// (a label past the limits), so a deletion would go to every reader.
    private func deniedNewRow(_ change: RowChange, in target: Target, writersExpression: String?) throws -> DeniedNewRow? {
        guard let expression = target.info.label else {
            return DeniedNewRow(table: target.info.name, key: change.key, above: change.causalLength, reach: nil)
        }
        let values = lifeValues(change, in: target)
        let labels = try Set([expression, writersExpression ?? expression].map { try self.label(of: values, in: target, expression: $0) })
        let reach = Reach(labels.compactMap { $0 })
        guard reach.fits else { return nil }
        return DeniedNewRow(table: target.info.name, key: change.key, above: change.causalLength, reach: reach)
    }

    /// A life's row by column name: its key and the columns it carries.
    private func lifeValues(_ change: RowChange, in target: Target) -> [String: SQLValue] {
        var values: [String: SQLValue] = [:]
        for (position, column) in target.info.primaryKey.enumerated() { values[column.name] = change.key[position] }
        for column in change.columns { values[target.columns[column.column].name] = column.value }
        return values
    }

    /// Whether the row is in the user's table here.
    func holdsRow(target: Target, keyValues: [SQLValue]) throws -> Bool {
        try rowWithLabel(target: target, keyValues: keyValues) != nil
    }
}

/// A new row a denied life made, held nowhere here: the causal length the life gave it, and
/// the readers that may hold it where it was taken (nil: an unlabelled table, every reader).
struct DeniedNewRow {
    var table: String
    var key: [SQLValue]
    var above: Int64
    var reach: Reach?
}

/// A row a new life replaces, by its label (nil: none, or not known here).
private struct ReplacedRow {
    var label: String?
}
