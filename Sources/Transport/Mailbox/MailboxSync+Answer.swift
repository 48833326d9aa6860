import Bundle
import ChangeLog

/// Stage 3, answer: this replica's own signed acknowledgement of what it can serve, and what
/// each reader holds, which decides what the bundles left out carry.
extension MailboxSync {
    /// False when the sync stops here: another file wrote this replica's acknowledgement.
    func answer() throws -> Bool {
        knowledge = try replica.knowledge()
        // What each reader acknowledged counts as far as this replica holds it: again now that
        // the imports taught it more, so that a purge here is not held back by an
        // acknowledgement read before.
        if knowledge != before {
            for (reader, acknowledgement) in peers {
                try replica.recordAcknowledgement(
                    of: reader, name: acknowledgement.name, knowledge: acknowledgement.knowledge, above: before)
            }
        }
        // What this replica acknowledges is what it can serve: peers send the rest whole.
        guard try writeAcknowledgement(try BundleExchange.servableKnowledge(of: replica)) else { return false }
        readers = peers.mapValues(\.knowledge)
        // Each holds what no acknowledgement says: everything since its first change goes.
        for reader in unreadReaders { readers[reader] = Knowledge() }
        return true
    }
}
