import SQLiteDatabase

/// Whether a change set may be merged into a replica at all, decided before anything is
/// written, as git's `bundle verify` comes before `unbundle`. It refuses a change set that
/// comes from this replica's own identity or a retired peer, one whose sender's clock a single
/// replica could not have shown, one that needs deletions purged here or that this replica
/// lacks deletions the sender purged, and one that needs a table, column, key or merge policy
/// this replica does not have (``ChangeLogError/Kind/schemaMismatch``: held until a
/// migration). What it admits, it has matched to the tracked tables for the merge.
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
    /// The local site number of each of the change set's sites.
    let localSite: [Int]
    /// This replica's knowledge before the merge, by knowledge ID and by local site.
    let knowledgeBefore: Knowledge
    let knownBefore: [Int: Int64]
    /// What the sender held, by local site.
    let senderKnows: [Int: Int64]

    init(header: ChangeSetHeader, replica: Replica, checkingOwnBundle: Bool) throws {
        let database = replica.database
        let path = replica.path
        if header.sender == replica.knowledgeID && !checkingOwnBundle {
            throw ChangeLogError(
                .identityClash,
                "\(path): the bundle comes from a replica with this replica's own knowledge ID \(replica.knowledgeID): one database was copied instead of cloned; keep one copy and make others with `sqsync clone`"
            )
        }
        if let ownIndex = header.sites.firstIndex(of: replica.knowledgeID),
            header.knowledge[ownIndex] > (try database.int64(#"SELECT "seq" FROM "_sqsync_replica""#))
        {
            throw ChangeLogError(
                .identityClash,
                "\(path): the sender holds changes \(header.knowledge[ownIndex]) of this replica's knowledge ID, which it never made: this file is a copy of another replica, or a restored backup; replace it with `sqsync clone` of a current replica"
            )
        }
        try Self.checkSender(header, replica: replica)
        try replica.fold()
        let (tables, policyMismatch) = try Self.matchTables(header, replica: replica)
        self.tables = tables

        var localSite: [Int] = []
        for (index, id) in header.sites.enumerated() {
            localSite.append(try replica.siteNumber(for: id, name: header.siteNames[index]))
        }
        self.localSite = localSite
        let knowledge = try replica.knowledge()
        knowledgeBefore = knowledge
        var knownBefore: [Int: Int64] = [:]
        for (site, id) in try replica.siteIDs() { knownBefore[site] = knowledge[id] }
        self.knownBefore = knownBefore
        // Merging a column differently would diverge; a bundle with nothing new (one held
        // from before both replicas set the policy) changes nothing and may go.
        if let policyMismatch, header.sites.indices.contains(where: { header.knowledge[$0] > knowledge[header.sites[$0]] }) {
            throw policyMismatch
        }
        for (index, site) in localSite.enumerated() where header.forgotten[index] > (knownBefore[site] ?? 0) {
            throw ChangeLogError(
                .staleReplica,
                "\(path): this replica is older than what \(header.senderName) has purged (it lacks deletions of \(header.siteNames[index].isEmpty ? header.sites[index] : header.siteNames[index]) up to \(header.forgotten[index])) and may still hold rows deleted since; replace it with `sqsync clone` of a current replica"
            )
        }
        var senderKnows: [Int: Int64] = [:]
        for (index, site) in localSite.enumerated() { senderKnows[site] = header.knowledge[index] }
        self.senderKnows = senderKnows
        for row in try database.rows(MergeSQL.purgedSites) {
            let site = try row.int("site"), forgotten = try row.int64("forgotten_seq")
            if site != replica.site && (senderKnows[site] ?? 0) < forgotten {
                throw ChangeLogError(
                    .staleReplica,
                    "\(path): the bundle comes from \(header.senderName), which lacks deletions of \(try row.string("label")) that this replica has already purged, so it may still hold deleted rows; replace that replica with `sqsync clone` of a current one"
                )
            }
        }
    }

    /// Refuses a retired sender, and a sender whose clock went where one replica's never goes.
    private static func checkSender(_ header: ChangeSetHeader, replica: Replica) throws {
        guard let sender = try replica.database.row(MergeSQL.senderRecord, .text(header.sender)) else { return }
        let path = replica.path
        if try sender.bool("retired") {
            throw ChangeLogError(
                .retiredPeer,
                "\(path): the bundle comes from \(header.senderName) (\(header.sender)), a retired peer; refusing it. If that site is back, give it a fresh copy with `sqsync clone`"
            )
        }
        if let reportedSeq = try sender.optionalInt64("reported_seq"), let reportedHLC = try sender.optionalInt64("reported_hlc") {
            let seq = header.senderSeq, hlc = header.senderHLC
            // One replica's clock never goes back and imports may push it forward with no new
            // change, so more changes never come with an earlier clock, nor fewer with a later one.
            let impossible = (seq > reportedSeq && hlc < reportedHLC) || (seq < reportedSeq && hlc > reportedHLC)
            if impossible {
                throw ChangeLogError(
                    .identityClash,
                    "\(path): two databases claim knowledge ID \(header.sender) (\(header.senderName)): its clock went \(reportedSeq)@\(reportedHLC) → \(seq)@\(hlc), which one replica never does. One was copied instead of cloned; retire that ID with `sqsync peers retire` and re-create the copies with `sqsync clone`"
                )
            }
        }
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
                    "\(path): the bundle carries table \(schema.name), which is not tracked here\(versions(header, replica))")
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
                        "\(path): the bundle carries column \(schema.name).\(name), which this replica lacks\(versions(header, replica)); migrate the schema, run `sqsync refresh`, then import again"
                    )
                }
                columns.append(column)
            }
            for (index, column) in columns.enumerated() where !dropped.contains(index) && policyMismatch == nil {
                let theirs = schema.policies[index]
                if theirs != column.policy {
                    policyMismatch = ChangeLogError(
                        .schemaMismatch,
                        "\(path): \(header.senderName) merges column \(schema.name).\(column.name) as \(theirs.rawValue), this replica as \(column.policy.rawValue); every replica must merge a column alike: run `sqsync policy \(path) \(schema.name) \(column.name) POLICY` with the same policy on both, then import again"
                    )
                }
            }
            let key = schema.primaryKey.map { columns[$0] }
            guard key.map(\.cid) == info.primaryKey.map(\.cid) else {
                throw ChangeLogError(
                    .schemaMismatch,
                    "\(path): table \(schema.name) has a different primary key in the bundle\(versions(header, replica))")
            }
            matches.append(TableMatch(info: info, columns: columns, key: key, dropped: dropped))
        }
        return (matches, policyMismatch)
    }

    /// ", the sender is on schema version 5, this replica on 4", when the versions differ.
    static func versions(_ header: ChangeSetHeader, _ replica: Replica) -> String {
        let ours = (try? replica.schemaVersion()) ?? 0
        guard let theirs = header.schemaVersion, theirs != ours else { return "" }
        return " (\(header.senderName) is on schema version \(theirs), this replica on \(ours))"
    }
}
