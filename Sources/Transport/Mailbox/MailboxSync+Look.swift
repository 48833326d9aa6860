import Bundle
import ChangeLog

/// Stage 1, look: the mailbox is there (or may be made), the mailbox's folders for this
/// replica exist, what its own killed uploads left is cleared, and the other replicas'
/// bundles are listed. Nothing is read yet.
extension MailboxSync {
    func look() throws {
        try refuseVanishedMailbox()
        try replica.fold()
        try transport.makeDirectories("\(Mailbox.outbox)/\(me)")
        try transport.makeDirectories("\(Mailbox.acks)/\(me)")
        transport.uploadOwner = me
        report.leftoversRemoved = try removeOwnLeftovers()
        before = try replica.knowledge()
        for sender in try transport.listDirectories(in: Mailbox.outbox) {
            for name in try transport.listFiles(in: "\(Mailbox.outbox)/\(sender)") where BundleExchange.isBundleFileName(name) {
                bundles.append((sender, name))
            }
        }
    }

    /// A target this replica synced with before that holds no mailbox now is a stick not
    /// mounted or a folder moved aside, not a place to start one: refused before anything is
    /// written (SPEC §5), unless `sync --new-mailbox` says so.
    private func refuseVanishedMailbox() throws {
        guard !mailbox.startsNewMailbox, try transport.listDirectories(in: Mailbox.folder).isEmpty,
            try state.syncedHereBefore()
        else { return }
        throw TransportError(
            .noMailbox,
            "\(transport.displayName): no mailbox here, though this replica synced with one here before (is the stick mounted?); nothing was written. To start a new mailbox here on purpose: sqsync sync --new-mailbox \(replica.path) \(transport.displayName)"
        )
    }

    /// Removes what uploads of this replica killed half-way left in the folders it writes to;
    /// others' unfinished uploads are theirs to clear.
    private func removeOwnLeftovers() throws -> Int {
        var removed = 0
        for folder in ["\(Mailbox.outbox)/\(me)", "\(Mailbox.acks)/\(me)", Mailbox.keys] {
            for name in try transport.temporaryFiles(in: folder) where name.hasPrefix("\(temporaryPrefix)\(me)-") {
                try writing { try transport.removeFile("\(folder)/\(name)") }
                removed += 1
            }
        }
        return removed
    }
}
