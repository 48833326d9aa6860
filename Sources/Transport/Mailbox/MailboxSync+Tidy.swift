import Bundle
import ChangeLog

/// Stage 5, tidy: what this replica no longer needs in the mailbox goes (its bundles this
/// sync did not keep, the others' bundles every reader holds or a newer one supersedes, its
/// unneeded readers' keys); the acknowledgements verified are remembered, and its own writes
/// outside its scope leave it once every peer has them.
extension MailboxSync {
    func tidy() throws {
        for name in mine where !keep.contains(name) {
            try writing { try transport.removeFile("\(Mailbox.outbox)/\(me)/\(name)") }
            report.removed += 1
        }
        try state.rememberUploads(keep.union(ownAcknowledgement.map { [$0] } ?? []))
        let others = bundles.filter { $0.sender != me }
        report.removed += try removeBundlesEveryReaderHolds(others, seen: try state.seenBundles())
        try removeUnneededReadersKeys(others: others, kept: Array(keep))
        for verified in verifiedAcknowledgements {
            try state.cacheAcknowledgement(replica: verified.replica, file: verified.file, text: verified.text)
        }
        report.rowsLeftScope = try replica.removeRowsOutOfScope()
    }

    /// Another replica's bundle can go once every reader, its sender aside, holds what it
    /// carries, or once this sync left a bundle for every reader that carries all of it
    /// (``superseding``, ``BundleExchange/carriedKnowledge(of:since:)``): in steady state the
    /// mailbox then holds the newest bundle or two, whatever the number of replicas.
    private func removeBundlesEveryReaderHolds(_ others: [(sender: String, name: String)], seen: [String: Knowledge]) throws -> Int {
        var removed = 0
        for bundle in others {
            guard let carried = seen[bundle.name] else { continue }
            var holders = readers.filter { $0.key != bundle.sender }
            holders[me] = knowledge
            if holders.values.allSatisfy({ $0.covers(carried) }) || superseding?.covers(carried) == true {
                try writing { try transport.removeFile(remotePath(bundle)) }
                removed += 1
            }
        }
        return removed
    }
}
