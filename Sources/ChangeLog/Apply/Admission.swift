import SQLiteDatabase

/// Whether one origin's change set may be merged into a replica at all, decided before
/// anything is written, as git's `bundle verify` comes before `unbundle`. It refuses a set of
/// this replica's own identity, one of a retired origin beyond what it held when the origin
/// was retired, and one that needs a table, column, key or merge policy this replica does not
/// have (``ChangeLogError/Kind/schemaMismatch``: held until a migration). What it admits, it
/// has matched to the tracked tables for the merge. What a bundle's sender says of itself is
/// admitted once per bundle, by ``Replica/admitSender(_:)``.
struct Admission {
    /// One table of the change set, matched to the tracked table here.
    struct TableMatch {
        let info: TableInfo
        /// The change set's columns, in its order; a dropped column stands as a placeholder.
        let columns: [ColumnInfo]
        let key: [ColumnInfo]
        /// Indexes of columns this replica's migration dropped: their changes are ignored.
        let dropped: Set<Int>
    }

    let tables: [TableMatch]
    /// The origin's local site number.
    let originSite: Int
    /// This replica's knowledge before the merge, by knowledge ID and by local site.
    let knowledgeBefore: Knowledge
    let knownBefore: [Int: Int64]
    /// What the origin held when it wrote the set, by local site.
    let originKnows: [Int: Int64]

    init(header: ChangeSetHeader, replica: Replica) throws {
        let path = replica.path
        if header.origin == replica.knowledgeID {
            throw ChangeLogError(
                .identityClash,
                "\(path): a change set of this replica's own knowledge ID \(replica.knowledgeID) cannot be merged into it")
        }
        try replica.fold()
        originSite = try replica.siteNumber(for: header.origin, name: header.originName)
        if let retiredAt = try replica.database.optionalInt64(MergeSQL.retiredAt, .integer(Int64(originSite))),
            header.last > retiredAt
        {
            throw ChangeLogError(
                .retiredPeer,
                "\(path): the changes of \(displayText(header.originLabel)) after \(retiredAt) come after it was retired here; refusing them, whoever relays them"
            )
        }
        let knowledge = try replica.knowledge()
        knowledgeBefore = knowledge
        let (tables, policyMismatch) = try Self.matchTables(header, replica: replica)
        self.tables = tables
        // Merging a column differently would diverge; a set with nothing new (one held from
        // before both replicas set the policy) changes nothing and may go.
        if let policyMismatch, header.last > knowledge[header.origin] { throw policyMismatch }
        var knownBefore: [Int: Int64] = [:]
        for (site, id) in try replica.siteIDs() { knownBefore[site] = knowledge[id] }
        self.knownBefore = knownBefore
        var originKnows: [Int: Int64] = [:]
        // Replicas heard of only here have no stamp in the set (every stamp is the origin's).
        for (id, seq) in header.originKnowledge.seqs {
            if let site = try replica.siteNumberIfKnown(id) { originKnows[site] = seq }
        }
        originKnows[originSite] = max(originKnows[originSite] ?? 0, header.last)
        self.originKnows = originKnows
    }

    /// Matches every table of the change set to a tracked table, column by column; a policy
    /// mismatch is returned rather than thrown, since it matters only for a change set with
    /// something new.
    private static func matchTables(_ header: ChangeSetHeader, replica: Replica) throws -> ([TableMatch], ChangeLogError?) {
        let path = replica.path
        var matches: [TableMatch] = []
        var policyMismatch: ChangeLogError?
        let tracked = Dictionary(uniqueKeysWithValues: try replica.trackedTables().map { ($0.name, $0) })
        for schema in header.tables {
            guard let info = tracked[schema.name] else {
                throw ChangeLogError(
                    .schemaMismatch,
                    "\(path): the bundle carries table \(displayText(schema.name)), which is not tracked here\(versions(header, replica))")
            }
            var columns: [ColumnInfo] = []
            var dropped: Set<Int> = []
            for name in schema.columns {
                guard let column = info.column(named: name) else {
                    // A column this replica's migration dropped: the sender has not migrated yet.
                    if try replica.isDroppedColumn(name, of: info.tid) {
                        dropped.insert(columns.count)
                        columns.append(ColumnInfo(cid: 0, name: name, primaryKeyPosition: 0))
                        continue
                    }
                    throw ChangeLogError(
                        .schemaMismatch,
                        "\(path): the bundle carries column \(displayText(schema.name)).\(displayText(name)), which this replica lacks\(versions(header, replica)); migrate the schema, run `sqsync refresh`, then import again"
                    )
                }
                columns.append(column)
            }
            for (index, column) in columns.enumerated() where !dropped.contains(index) && policyMismatch == nil {
                let theirs = schema.policies[index]
                if theirs != column.policy {
                    policyMismatch = ChangeLogError(
                        .schemaMismatch,
                        "\(path): \(displayText(header.originLabel)) merges column \(schema.name).\(column.name) as \(theirs.rawValue), this replica as \(column.policy.rawValue); every replica must merge a column alike: run `sqsync policy \(path) \(schema.name) \(column.name) POLICY` with the same policy on both, then import again"
                    )
                }
            }
            let key = schema.primaryKey.map { columns[$0] }
            guard key.map(\.cid) == info.primaryKey.map(\.cid) else {
                throw ChangeLogError(
                    .schemaMismatch,
                    "\(path): table \(displayText(schema.name)) has a different primary key in the bundle\(versions(header, replica))")
            }
            matches.append(TableMatch(info: info, columns: columns, key: key, dropped: dropped))
        }
        return (matches, policyMismatch)
    }

    /// ", the origin is on schema version 5, this replica on 4", when the versions differ.
    static func versions(_ header: ChangeSetHeader, _ replica: Replica) -> String {
        let ours = (try? replica.schemaVersion()) ?? 0
        guard let theirs = header.schemaVersion, theirs != ours else { return "" }
        return " (\(displayText(header.originLabel)) is on schema version \(theirs), this replica on \(ours))"
    }
}
