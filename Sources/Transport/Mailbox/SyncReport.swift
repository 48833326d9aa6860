import Bundle
import ChangeLog

/// What one `sync` did.
public struct SyncReport: Sendable {
    public var imported: [ImportResult] = []
    /// Bundles refused (bad signature, untrusted, damaged): name and reason.
    public var rejected: [(name: String, reason: String)] = []
    /// Bundles verified but refused by the merge (a copied replica, a sender that forgot
    /// deletions this replica still needs): name and reason, with the way out.
    public var refused: [(name: String, reason: String)] = []
    public var exported: ExportResult?
    public var removed = 0
    /// Unfinished uploads of this replica (a sync killed half-way) removed from the mailbox.
    public var leftoversRemoved = 0
    /// Files in the mailbox that were ignored (unsigned, forged or untrusted acknowledgements,
    /// junk in this replica's outbox): one line each, naming the file.
    public var warnings: [String] = []
    /// Bundles that brought nothing new, one line each (a replayed older bundle).
    public var notes: [String] = []
    /// Bundles held after this sync (taken now or earlier), waiting for a migration, an admin
    /// statement or a key (``HoldReason``): path and reason, so that every sync says why.
    public var stillHeld: [(path: String, reason: String)] = []
    /// Ranges of other replicas' changes this replica lacks though it holds later ones, after
    /// this sync: each heals at a meeting with anyone who holds it.
    public var gaps: [KnowledgeGap] = []
    /// The mailbox and the replica were as a sync that found nothing to do left them, so this
    /// sync stopped after comparing them.
    public var unchanged = false
    /// Files refused by an earlier sync and unchanged since, by path in the mailbox: not read
    /// again, only counted.
    public var plantedSkipped: [String] = []
    /// Rows removed here because they are outside this replica's scope (moved to another
    /// label by a change taken now or earlier, or written here for another site) and every
    /// peer that needs them has them.
    public var rowsLeftScope = 0
    /// Files left unread because they are larger than a mailbox file may be.
    public var oversized = 0
    /// Bundles in this mailbox signed by keys not trusted here, refused now or before and
    /// unchanged since: one line each, naming the replica and the `allowed_signers` line to add.
    public var untrusted: [String] = []
    /// Bundles this replica cannot open yet, waiting for a readers' key file to come or change.
    public var waitingForKey = 0
    /// Bundles not encrypted to this replica's key while replicas have scopes: most are for
    /// another scope group's readers, as they should be, so they are counted, not each said.
    public var forOtherReaders = 0
    /// Own values left out of bundles because they are larger than a bundle may carry: the
    /// rest went, and each goes once it fits.
    public var withheld: [WithheldValue] = []
    /// Changes signed as this replica that it never made, refused now or before (its key is
    /// in other hands, or a copy of its file writes as it): one line each, naming both fixes,
    /// every sync until the operator clears the conflict log.
    public var signedAsThisReplica: [String] = []
    /// Other replicas that signed two different changes under the same numbers (a restored
    /// backup, a copy, a stolen key): one line each, every sync until the conflict log is
    /// cleared or the replica retired here.
    public var numberedTwice: [String] = []
    /// Files copied out of the mailbox (bundles, acknowledgements, readers' keys): in steady
    /// state bounded, whatever the number of replicas (docs/PERFORMANCE.md, "A thousand replicas").
    public var filesRead = 0

    /// Nothing imported, refused, exported, removed or worth a warning.
    var didNothing: Bool {
        imported.isEmpty && rejected.isEmpty && refused.isEmpty && exported == nil && removed == 0 && leftoversRemoved == 0
            && warnings.isEmpty && rowsLeftScope == 0
    }

    public init() {}
}
