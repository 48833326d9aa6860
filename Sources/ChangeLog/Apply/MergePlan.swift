import SQLiteDatabase

/// How one origin's change set is to be merged into a replica, once it may be: its tables
/// matched to the tracked tables column by column, what this replica held before, and the
/// grants the origin's changes are judged by. Made by ``Replica/planMerge(of:authorization:)``,
/// which reads the replica and writes nothing; ``ChangeMerger`` then only merges.
public struct MergePlan {
    /// One table of the change set, matched to the tracked table here.
    struct TableMatch {
        let info: TableInfo
        /// The change set's columns, in its order; a dropped column stands as a placeholder.
        let columns: [ColumnInfo]
        let key: [ColumnInfo]
        /// Indexes of columns this replica's migration dropped: their changes are ignored.
        let dropped: Set<Int>
    }

    public let header: ChangeSetHeader
    let tables: [TableMatch]
    /// How far this replica held the origin's changes before the merge.
    let originKnownBefore: Int64
    /// This replica's own sequence number before the merge.
    let ownSeqBefore: Int64
    /// The grants the origin's changes are judged by, when they restrict it.
    public let authorization: Authorization?
}

/// What ``Replica/planMerge(of:authorization:)`` decided about one change set.
public enum MergeVerdict {
    case merge(MergePlan)
    /// Not now: this replica lacks something to merge it as every replica does.
    case hold(HoldReason)
}

extension Replica {
    /// Decides whether one origin's change set may be merged here, as git's `bundle verify`
    /// comes before `unbundle`, and how: reads the replica, writes nothing. Refuses (throws) a
    /// set of this replica's own identity and one of a retired origin beyond what it held when
    /// the origin was retired; holds one that needs a table, column, key or merge policy this
    /// replica does not have. What a bundle's sender says of itself is admitted once per
    /// bundle, by ``Replica/admitSender(_:path:)``. The caller folds pending local changes first.
    public func planMerge(of header: ChangeSetHeader, authorization: Authorization? = nil) throws -> MergeVerdict {
        if header.origin == knowledgeID {
            throw ChangeLogError(
                .identityClash,
                "\(path): a change set of this replica's own knowledge ID \(knowledgeID) cannot be merged into it")
        }
        if let retiredAt = try database.optionalInt64(MergeSQL.retiredAtByID, .text(header.origin)), header.last > retiredAt {
            throw ChangeLogError(
                .retiredPeer,
                "\(path): the changes of \(displayText(header.originLabel)) after \(retiredAt) come after it was retired here; refusing them, whoever relays them"
            )
        }
        let originKnownBefore = try knownSeq(of: header.origin)
        let tables: [MergePlan.TableMatch]
        let policyMismatch: HoldReason?
        switch try MergePlan.matchTables(header, replica: self) {
        case .failure(let reason): return .hold(reason)
        case .success(let matched): (tables, policyMismatch) = matched
        }
        // Merging a column differently would diverge; a set with nothing new (one held from
        // before both replicas set the policy) changes nothing and may go.
        if let policyMismatch, header.last > originKnownBefore { return .hold(policyMismatch) }
        return .merge(
            MergePlan(
                header: header, tables: tables, originKnownBefore: originKnownBefore, ownSeqBefore: try knownSeq(of: knowledgeID),
                authorization: authorization))
    }
}

extension MergePlan {
    /// Matches every table of the change set to a tracked table, column by column; a policy
    /// mismatch is returned rather than thrown, since it matters only for a change set with
    /// something new.
    static func matchTables(_ header: ChangeSetHeader, replica: Replica) throws -> Result<([TableMatch], HoldReason?), HoldReason> {
        let path = replica.path
        var matches: [TableMatch] = []
        var policyMismatch: HoldReason?
        let trackedTables: [TableInfo]
        do {
            trackedTables = try replica.trackedTables()
        } catch let error as ChangeLogError where error.kind == .schemaMismatch {
            return .failure(HoldReason(.trackedTableMissing, error.description))
        }
        let tracked = Dictionary(uniqueKeysWithValues: trackedTables.map { ($0.name, $0) })
        for schema in header.tables {
            guard let info = tracked[schema.name] else {
                return .failure(
                    HoldReason(
                        .tableNotTracked(schema.name),
                        "\(path): the bundle carries table \(displayText(schema.name)), which is not tracked here\(versions(header, replica))"))
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
                    return .failure(
                        HoldReason(
                            .columnMissing(table: schema.name, column: name),
                            "\(path): the bundle carries column \(displayText(schema.name)).\(displayText(name)), which this replica lacks\(versions(header, replica)); migrate the schema, run `sqsync refresh`, then import again"
                        ))
                }
                columns.append(column)
            }
            for (index, column) in columns.enumerated() where !dropped.contains(index) && policyMismatch == nil {
                let theirs = schema.policies[index]
                if theirs != column.policy {
                    policyMismatch = HoldReason(
                        .policyMismatch(table: schema.name, column: column.name),
                        "\(path): \(displayText(header.originLabel)) merges column \(schema.name).\(column.name) as \(theirs.rawValue), this replica as \(column.policy.rawValue); every replica must merge a column alike: run `sqsync policy \(path) \(schema.name) \(column.name) POLICY` with the same policy on both, then import again"
                    )
                }
            }
            let key = schema.primaryKey.map { columns[$0] }
            guard key.map(\.cid) == info.primaryKey.map(\.cid) else {
                return .failure(
                    HoldReason(
                        .differentKey(schema.name),
                        "\(path): table \(displayText(schema.name)) has a different primary key in the bundle\(versions(header, replica))"))
            }
            matches.append(TableMatch(info: info, columns: columns, key: key, dropped: dropped))
        }
        return .success((matches, policyMismatch))
    }

    /// ", the origin is on schema version 5, this replica on 4", when the versions differ.
    static func versions(_ header: ChangeSetHeader, _ replica: Replica) -> String {
        let ours = (try? replica.schemaVersion()) ?? 0
        guard let theirs = header.schemaVersion, theirs != ours else { return "" }
        return " (\(displayText(header.originLabel)) is on schema version \(theirs), this replica on \(ours))"
    }
}
