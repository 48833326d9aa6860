import Bundle
import ChangeLog

/// Stage 1, look: the mailbox's folders for this replica exist, what its own killed uploads
/// left is cleared, and the other replicas' bundles are listed. Nothing is read yet.
extension MailboxSync {
    func look() throws {
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
