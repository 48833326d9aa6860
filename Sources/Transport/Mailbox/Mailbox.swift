import Bundle
import ChangeLog
import Crypto
import FoundationEssentials
import SQLiteDatabase

/// The mailbox layout shared by every medium (SPEC §5):
///
///     sqsync/outbox/<knowledge-id>/<bundle>.sqsb   what each replica left for the others
///     sqsync/acks/<knowledge-id>/<clock>_<r>.ack   what each replica last said it holds (signed)
///     sqsync/keys/<readers>-<key>.age              keys shared by many readers (Mailbox+ReadersKeys)
///
/// A sync imports what is new, acknowledges, then leaves one bundle with what the
/// least-informed reader lacks, replacing its previous one. A stick thus carries bundles
/// for many sites and relays between sites that never meet. Not Sendable on purpose.
///
/// A `Mailbox` lives as long as its medium is used: it holds only what one sync tells the
/// next (``quietBefore``). What one sync learns lives in a ``MailboxSync``, made per run, whose
/// stages a reader finds by name: look, take in, answer, leave out, tidy.
///
/// Whoever can write to the folder is not trusted: acknowledgements count only when signed
/// by a trusted key for the replica whose folder holds them (``MailboxAcknowledgement``),
/// and a file in this replica's own outbox that it did not write is removed unless it is a
/// bundle signed under this replica's knowledge ID (a copied database). Symbolic links are
/// never listed nor followed (see each transport).
public final class Mailbox {
    /// The one folder of the medium the mailbox reads and writes.
    public static let folder = "sqsync"
    static let outbox = "\(folder)/outbox"
    static let acks = "\(folder)/acks"
    static let keys = "\(folder)/keys"

    public let transport: Transport
    /// Whether bundles left here are encrypted to their readers (docs/BUNDLE_FORMAT.md,
    /// "Encryption"): yes unless `sync --no-encrypt`.
    public var encrypts = true
    /// The last quiet sync's replica, while this mailbox is used again on it (``stillQuiet``).
    var quietBefore: QuietReplica?
    /// Whether a sync may start a mailbox where this replica synced with one before and none
    /// is now (`sync --new-mailbox`): by default it refuses, since that is what an unmounted
    /// stick looks like, and a worker would walk away with nothing on it.
    public var startsNewMailbox = false

    /// How many acknowledgement files not read before a sync reads at most (``MailboxSync/readAcknowledgements(planted:)``).
    nonisolated(unsafe) static var acknowledgementsReadPerSync = 64

    public init(transport: Transport, encrypts: Bool = true, startsNewMailbox: Bool = false) {
        self.transport = transport
        self.encrypts = encrypts
        self.startsNewMailbox = startsNewMailbox
    }

    /// One sync: nothing at all when the mailbox and the replica are as the last sync that
    /// found nothing to do left them, else the five stages of a ``MailboxSync``.
    public func sync(replica: Replica, key: SigningKey, trust: AllowedSigners) throws -> SyncReport {
        if let report = try stillQuiet(replica: replica, key: key, trust: trust) { return report }
        quietBefore = nil
        let trust = try prepare(replica, trust: trust)
        let quiet = try quietCheck(replica: replica, key: key, trust: trust)
        if quiet.unchanged, let replicaInputs = quiet.replicaInputs {
            return try quietReport(replica, key: key, trust: trust, replicaInputs: replicaInputs)
        }
        let run = try MailboxSync(mailbox: self, replica: replica, key: key, trust: trust)
        var report = try run.run()
        if run.foundNothingToDo { try rememberQuiet(quiet) }
        try addStanding(to: &report, replica: replica)
        return report
    }

    /// Refuses a replica that must not sync yet, folds what its app wrote, and gives the
    /// trust its key pins add (``KeyBinding/trust(_:replica:)``).
    private func prepare(_ replica: Replica, trust: AllowedSigners) throws -> AllowedSigners {
        try replica.refuseWhileMigrating("sync")
        try replica.refuseWithUncapturedColumns("sync")
        try replica.refuseWhileCopied("sync")
        try replica.fold()
        let trust = try KeyBinding.trust(trust, replica: replica)
        ScratchDirectory.clearLeftovers(beside: replica.path)
        // Values that fit now are logged again first, so that a quiet mailbox still sends them.
        try replica.releaseWithheldValues(cap: BundleLimits.maxValueBytes)
        return trust
    }

    /// What every sync reports, whatever it did: the bundles this replica holds back, the
    /// ranges it lacks, the files refused before and the values it withholds.
    func addStanding(to report: inout SyncReport, replica: Replica) throws {
        report.stillHeld = try BundleExchange.heldBundles(of: replica)
        report.gaps = try BundleExchange.gaps(of: replica)
        let untrusted = try MailboxState.untrustedSignerFiles(of: replica).filter { $0.mailbox == transport.displayName }
        // A retired sender's bundles are never read again: its refusals wait on nothing.
        let retired = untrusted.isEmpty ? [] : try replica.retiredPeerIDs()
        report.untrusted = untrusted.filter { !retired.contains(Self.sender(ofBundleAt: $0.path) ?? "") }.map(\.reason)
        report.withheld = try replica.withheldValues(cap: BundleLimits.maxValueBytes)
        report.signedAsThisReplica = try replica.standingSignedAsThisReplica()
        report.numberedTwice = try replica.standingNumberedTwice()
        report.waitingForKey = try state(replica).bundlesWaitingForKey()
    }

    /// The replica whose outbox holds the bundle at `path` (`sqsync/outbox/<id>/<name>`).
    static func sender(ofBundleAt path: String) -> String? {
        let parts = path.split(separator: "/")
        guard parts.count == 4, "\(parts[0])/\(parts[1])" == outbox else { return nil }
        return String(parts[2])
    }

    /// What the replica remembers of this mailbox.
    func state(_ replica: Replica) throws -> MailboxState { try MailboxState(replica, mailbox: transport.displayName) }

    /// Bundles in any mailbox refused because a key not in `allowed_signers` signed them,
    /// unchanged since: the sync's message for each (it names the replica and the line to
    /// add). They are read again once the trust changes.
    public static func untrustedBundlesWaiting(of replica: Replica) throws -> [String] {
        try MailboxState.untrustedSignerFiles(of: replica).map(\.reason)
    }

    /// Tables of a replica's that belong to its file alone (bundles held beside it, what it
    /// saw and left in mailboxes): `sqsync clone` empties them in the copy.
    public static let perFileTables = BundleExchange.perFileTables + MailboxTables.perFileState

    /// The readers' key a bundle still in a mailbox folder is encrypted to, from that
    /// mailbox's `sqsync/keys/` (the bundle is `…/sqsync/outbox/<replica>/<file>`), opened with
    /// `key`; empty when it names none or `key` cannot open it. So `import` and `inspect` read
    /// a mailbox's bundle where it lies, as a sync would.
    public static func readersKeys(besideBundleAt path: String, with key: SigningKey?) -> [ReadersKey] {
        guard let key, let name = AgeFile.readersKeyName(ofFile: path) else { return [] }
        let outbox = URL(fileURLWithPath: path).deletingLastPathComponent().deletingLastPathComponent()
        let keyFile = outbox.deletingLastPathComponent().appendingPathComponent("keys").appendingPathComponent(name).path
        guard let opened = try? ReadersKey.open(path: keyFile, name: name, with: key) else { return [] }
        return [opened]
    }

    /// A medium that fails once the imports are done (a read-only or full stick, a remote that
    /// refuses writes): one line naming the mailbox, what this sync took from it (kept: each
    /// import stands on its own), and that nothing was left for the others.
    static func failedAfterImporting(_ imported: [ImportResult], _ error: TransportError, mailbox: String) -> TransportError {
        let applied = imported.filter { $0.outcome == .applied }
        let rows = applied.reduce(0) { $0 + $1.summary.changes }
        let taken =
            applied.isEmpty
            ? "nothing was imported"
            : "\(applied.count) bundle\(applied.count == 1 ? "" : "s") (\(rows) row\(rows == 1 ? "" : "s") changed) imported and kept"
        return TransportError(
            error.kind, "\(mailbox): cannot write to the mailbox (\(error.description)); \(taken); what this replica leaves for the others was not written")
    }

    /// Same knowledge, base, recipients and content (``BundleExchange/plannedContent(of:since:scope:checkpoints:readingHere:)``)
    /// give the same name, so an unchanged replica does not write the same bundle again, and a
    /// bundle whose content changed (relayed segments included) never takes an old one's name.
    static func fingerprint(
        knowledge: Knowledge, base: Knowledge, recipients: [SSHPublicKey] = [], scope: String = "", content: String = ""
    ) -> String {
        let keys = recipients.map(\.openSSHLine).sorted().joined(separator: ",")
        let digest = SHA256.hash(
            data: Data((knowledge.description + "|" + base.description + "|" + keys + scope + "|" + content).utf8))
        return hexString(digest.prefix(4))
    }
}
