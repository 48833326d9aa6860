import SQLiteDatabase

extension ChangeMerger {
    /// Whether the writer of `theirs` provably made it before it learned of this replica's own
    /// value `ours`: it reported learning `ours` in an import made after `theirs` was numbered.
    /// Then `ours`, overwritten here, lost a conflict the bundle does not show (the writer
    /// knew `ours` by the time it sent it), and is logged here as well as by the writer.
    func overwritesConcurrentOwnValue(_ ours: LocalStamp, with theirs: LocalStamp) -> Bool {
        guard ours.site == replica.site, let writer = siteIDs[theirs.site],
            let event = learning[writer]?[replica.knowledgeID]
        else { return false }
        return event.previous < ours.seq && ours.seq <= event.reached && theirs.seq <= event.ownSeq
    }
}
