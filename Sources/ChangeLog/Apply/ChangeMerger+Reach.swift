import SQLiteDatabase

/// Reaches (``Reach``): each record of a labelled table's row widens the row's reach here by
/// the one its origin knew; a replica that holds every row announces, as a change of its own,
/// what a record's origin could not have sent to every reader that may hold the row
/// (docs/SCOPES.md, "Reach").
extension ChangeMerger {
    /// The row as it was before a record that may change its reach.
    struct ReachBefore {
        let key: SQLValue
        let entry: (cl: Int64, stamp: LocalStamp, cells: SQLValue)?
        /// nil: unknown.
        let reach: Reach?
    }

    /// What the merge needs to settle the row's reach once `change` is merged; nil when the
    /// change carries nothing that moves it (an update within a life, or a table without a
    /// label).
    func reachBefore(_ change: RowChange, in target: Target) throws -> ReachBefore? {
        guard target.info.label != nil, change.rowStamp != nil || change.reach != nil || movesUnlabelled(change, in: target)
        else { return nil }
        // A record without a reach held here already was merged before: before the label was
        // known here (the reach the label gave the row covers what it did) or after (it left
        // the reach unknown then). Relays send such records again and again.
        if change.reach == nil, isOldNews(change) { return nil }
        let key = try metadataKey(change.key)
        let entry = try rowEntry(tid: target.info.tid, key: key)
        // A key new here has been nowhere through this replica: an empty reach.
        let reach = entry == nil ? Reach([]) : try reaches.reach(tid: target.info.tid, key: key)
        return ReachBefore(key: key, entry: entry, reach: reach)
    }

    /// An update made where the table's label was not known that writes a column the label
    /// reads: it may have moved the row to any label.
    func movesUnlabelled(_ change: RowChange, in target: Target) -> Bool {
        guard target.madeWithoutItsLabel, change.rowStamp == nil else { return false }
        let labelColumns = target.labelColumnIDs
        return change.columns.contains { labelColumns.contains(target.columns[$0.column].cid) }
    }

    /// Every stamp of the record is one this replica held before the merge.
    func isOldNews(_ change: RowChange) -> Bool {
        (change.rowStamp.map { knownHere(local($0)) } ?? true) && change.columns.allSatisfy { knownHere(local($0.stamp)) }
            && change.counters.allSatisfy { knownHere(local($0.stamp)) }
    }

    /// Records the row's reach after `change`, and notes the row for an announcement of this
    /// replica's own when readers may hold it that the record's origin did not reach:
    /// - the record changed the row here, and this replica knew labels its origin did not
    ///   (a concurrent life, or a move the origin had not seen): readers of those labels
    ///   must see the row's new state;
    /// - the record did not settle the row (another life or stamp won here) and brought
    ///   labels this replica did not know: readers of those labels hold the record's
    ///   life and must see the state that won.
    func settleReach(after change: RowChange, in target: Target, before: ReachBefore) throws {
        // An update carries no reach: one made where the label was not known may have moved
        // the row anywhere, so its reach is unknown.
        let incoming = change.reach
        // An update without a row stamp is judged by its life only: one made where the label
        // was not known, lost to a later life here (a deletion, a move), may have moved the
        // row to readers that life never reached. (One of a life not seen here yet waits for
        // it: nothing is settled.)
        let rowStamp = change.rowStamp.map(local)
        if announcesReach, rowStamp != nil || movesUnlabelled(change, in: target), let was = before.entry,
            let now = try rowEntry(tid: target.info.tid, key: before.key)
        {
            let changedHere = now.cl != was.cl || now.stamp != was.stamp || now.cells != was.cells
            let settled = rowStamp.map { now.cl == change.causalLength && now.stamp == $0 } ?? (now.cl <= change.causalLength)
            if (changedHere && !before.reach.isWithin(incoming)) || (!settled && !incoming.isWithin(before.reach)) {
                if now.cl % 2 == 1 {
                    relabelled.append((target.info.name, change.key))
                } else {
                    deletedAgain.append((target.info.name, change.key))
                }
            }
        }
        try reaches.record(before.reach.joined(incoming), tid: target.info.tid, key: before.key)
    }

    /// Adds to each touched row's known reach the label it has here now: wherever a row is
    /// held, its reach holds its label, whichever change gave it (a life merged column by
    /// column, an update made where the label was not known), so that what this replica
    /// sends of it later reaches readers of that label.
    func addCurrentLabelsToReach() throws {
        for (target, keyValues) in reachTouched {
            let key = try metadataKey(keyValues)
            guard let known = try reaches.reach(tid: target.info.tid, key: key) else { continue }
            let label = try reaches.label(ofRow: keyValues, in: target.info)
            guard !label.isWithin(known) else { continue }
            try reaches.record(Optional(known).joined(label), tid: target.info.tid, key: key)
        }
        reachTouched.removeAll()
    }

    /// A life denied here still stands at its writer and wherever it was taken: its reach
    /// joins the row's, so that the life this replica gives the row in answer
    /// (``undoneByNewLife``) and whatever follows reach those readers too.
    func widenReach(byDenied change: RowChange, in target: Target) throws {
        guard change.rowStamp != nil, let before = try reachBefore(change, in: target), before.entry != nil else { return }
        try reaches.record(before.reach.joined(change.reach), tid: target.info.tid, key: before.key)
    }
}
