import Bundle
import ChangeLog
import Crypto
import FoundationEssentials
import Glibc
import SQLiteDatabase

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
    /// Bundles that wait for a schema migration after this sync (taken now or earlier): path
    /// and reason, so that every sync says why.
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
    /// Own values left out of bundles because they are larger than a bundle may carry: the
    /// rest went, and each goes once it fits.
    public var withheld: [WithheldValue] = []
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

/// The mailbox layout shared by every medium (SPEC §5):
///
///     sqsync/outbox/<knowledge-id>/<bundle>.sqsb   what each replica left for the others
///     sqsync/acks/<knowledge-id>/<clock>_<r>.ack   what each replica last said it holds (signed)
///
/// A sync imports what is new, acknowledges, then leaves one bundle with what the
/// least-informed reader lacks, replacing its previous one. A stick thus carries bundles
/// for many sites and relays between sites that never meet. Not Sendable on purpose.
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

    public let transport: Transport
    /// Acknowledgement files this sync verified or wrote, remembered in the replica only when
    /// the sync succeeds: a refused sync leaves the database as it was.
    var verifiedAcknowledgements: [(replica: String, file: String, text: String)] = []
    /// Files this sync left unread (larger than a mailbox file may be), one line each.
    private var skipped: [String] = []
    /// What this sync imported, set once it starts to write to the mailbox.
    private var importedBeforeWriting: [ImportResult]?
    /// A write to the mailbox failed (not a read): the medium refuses writes.
    private var failedWriting = false
    /// The key that signed each reader's acknowledgement file this sync read: the key to
    /// encrypt to when none is pinned for that reader yet.
    var acknowledgementKeys: [String: SSHPublicKey] = [:]
    /// The readers' key files this sync listed (``listedKeyFiles()``), once.
    var listedKeys: Set<String>?
    /// Newer acknowledgement files were left for the next sync (``readAcknowledgements``).
    var acknowledgementsLeftUnread = false
    /// Readers whose acknowledgement no sync here has read yet: they count as holding nothing.
    var unreadReaders: Set<String> = []
    /// Files this sync copied out of the mailbox (bundles, acknowledgements, readers' keys).
    private var filesRead = 0
    /// The last quiet sync's replica, while this mailbox is used again on it (``stillQuiet``).
    var quietBefore: QuietReplica?

    /// How many acknowledgement files not read before a sync reads at most (``readAcknowledgements``).
    nonisolated(unsafe) static var acknowledgementsReadPerSync = 64

    /// Whether bundles left here are encrypted to their readers (docs/BUNDLE_FORMAT.md,
    /// "Encryption"): yes unless `sync --no-encrypt`.
    public var encrypts = true

    public init(transport: Transport, encrypts: Bool = true) {
        self.transport = transport
        self.encrypts = encrypts
    }

    public func sync(replica: Replica, key: SigningKey, trust: AllowedSigners) throws -> SyncReport {
        if let report = try stillQuiet(replica: replica, key: key, trust: trust) { return report }
        quietBefore = nil
        try replica.refuseWhileMigrating("sync")
        try replica.refuseWithUncapturedColumns("sync")
        try replica.refuseWhileCopied("sync")
        try replica.fold()
        let trust = try KeyBinding.trust(trust, replica: replica)
        ScratchDirectory.clearLeftovers(beside: replica.path)
        // Values that fit now are logged again first, so that a quiet mailbox still sends them.
        try replica.releaseWithheldValues(cap: BundleLimits.maxValueBytes)
        // Taken before anything is listed, so a change made during this sync shows next time;
        // the mark first, so that a change made while the folders are compared shows in it.
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let state = try state(replica)
        let mark = try mailboxMark()
        let lastQuiet = try state.lastQuietSync()
        // The last quiet sync checked this key and signed what this replica held then (its
        // statement, key pins and knowledge are in the inputs): unchanged, there is nothing to
        // check or sign again, which reads every replica's entry. (Without one, the tables
        // the inputs read may not exist yet.)
        var replicaInputs = lastQuiet == nil ? nil : try replicaSyncInputs(replica: replica, key: key, trust: trust)
        if replicaInputs == nil || lastQuiet?.replicaInputs != replicaInputs {
            try KeyBinding.prepareToSign(replica: replica, key: key)
            replicaInputs = try replicaSyncInputs(replica: replica, key: key, trust: trust)
        }
        var inputs: String?
        if let last = lastQuiet {
            if let replicaInputs, last.replicaInputs == replicaInputs, now >= last.savedAt {
                if try markStillSays(last, mark: mark, state: state, now: now) {
                    return try quietReport(replica, key: key, trust: trust, replicaInputs: replicaInputs)
                }
                inputs = try folderInputs(replicaInputs: replicaInputs)
                if let inputs, inputs == last.inputs {
                    try state.rememberQuietSync(
                        .init(inputs: inputs, savedAt: now, mark: mark, replicaInputs: replicaInputs, fullCheckedAt: now))
                    return try quietReport(replica, key: key, trust: trust, replicaInputs: replicaInputs)
                }
                // A folder changed and the mark did not: a writer here does not mark its changes.
                if inputs != nil, let mark, last.mark == mark { try state.noteUnmarkedChange(at: now) }
            }
            // Forgotten first: a sync that fails half-way may have changed what the digest
            // does not cover.
            try state.forgetQuietSync()
        }
        if inputs == nil, let replicaInputs { inputs = try folderInputs(replicaInputs: replicaInputs) }
        var report = try fullSync(replica: replica, key: key, trust: trust)
        if let inputs, report.didNothing && verifiedAcknowledgements.isEmpty && !acknowledgementsLeftUnread {
            try state.rememberQuietSync(.init(inputs: inputs, savedAt: now, mark: mark, replicaInputs: replicaInputs, fullCheckedAt: now))
        }
        try addStanding(to: &report, replica: replica)
        return report
    }

    /// What every sync reports, whatever it did: the bundles this replica holds back, the
    /// ranges it lacks, the files refused before and the values it withholds.
    func addStanding(to report: inout SyncReport, replica: Replica) throws {
        report.stillHeld = try BundleExchange.heldBundles(of: replica)
        report.gaps = try BundleExchange.gaps(of: replica)
        report.untrusted = try untrustedSignerFiles(replica)
        report.withheld = try replica.withheldValues(cap: BundleLimits.maxValueBytes)
    }

    /// This mailbox's bundles refused for a signer not trusted here, unchanged since.
    func untrustedSignerFiles(_ replica: Replica) throws -> [String] {
        try MailboxState.untrustedSignerFiles(of: replica).filter { $0.mailbox == transport.displayName }.map(\.reason)
    }

    private func fullSync(replica: Replica, key: SigningKey, trust: AllowedSigners) throws -> SyncReport {
        skipped = []
        importedBeforeWriting = nil
        failedWriting = false
        acknowledgementsLeftUnread = false
        unreadReaders = []
        filesRead = 0
        do {
            var report = try importAndExport(replica: replica, key: key, trust: trust)
            report.warnings += skipped
            report.oversized = skipped.count
            report.filesRead = filesRead
            return report
        } catch let error as TransportError where importedBeforeWriting != nil && failedWriting {
            throw Self.failedAfterImporting(importedBeforeWriting ?? [], error, mailbox: transport.displayName)
        }
    }

    /// Runs one write to the mailbox (an upload or a removal), then renews the mailbox's mark
    /// (``mailboxMark()``), noting that a transport error came from writing, not from reading.
    func writing<T>(_ body: () throws -> T) throws -> T {
        do {
            let result = try body()
            try transport.markChanged(Self.folder)
            return result
        } catch let error as TransportError {
            failedWriting = true
            throw error
        }
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

    private func importAndExport(replica: Replica, key: SigningKey, trust: AllowedSigners) throws -> SyncReport {
        let scratch = try ScratchDirectory(beside: replica.path)
        var report = SyncReport()
        verifiedAcknowledgements = []
        acknowledgementKeys = [:]
        listedKeys = nil
        let me = replica.knowledgeID
        try replica.fold()
        try transport.makeDirectories("\(Self.outbox)/\(me)")
        try transport.makeDirectories("\(Self.acks)/\(me)")
        transport.uploadOwner = me
        report.leftoversRemoved = try removeOwnLeftovers(of: me)

        let before = try replica.knowledge()
        let peers = try readAcknowledgements(excluding: me, replica: replica, trust: trust, scratch: scratch, report: &report)
        report.imported += try BundleExchange.retryHeld(replica: replica, trust: trust)
        var listed: Set<String> = []
        var bundles: [(sender: String, name: String)] = []
        for sender in try transport.listDirectories(in: Self.outbox) {
            for name in try transport.listFiles(in: "\(Self.outbox)/\(sender)") where BundleExchange.isBundleFileName(name) {
                listed.insert(name)
                bundles.append((sender, name))
            }
        }
        let marks = try state(replica).bundleMarks()
        let (seen, unaddressed) = (marks.seen, marks.unaddressed)
        let waiting = Set(marks.waiting.keys).subtracting(try bundlesWhoseKeyChanged(marks.waiting, replica: replica))
        let retired = try replica.retiredPeerIDs()
        let planted = try state(replica).plantedFiles()
        // Trust that depends on the time (validity windows) gives no context to compare.
        let context = trust.fingerprint.map { PlantedFile.context(trust: $0, key: key.publicKey) }
        for bundle in bundles
        where bundle.sender != me && seen[bundle.name] == nil && !unaddressed.contains(bundle.name) && !waiting.contains(bundle.name)
            && !retired.contains(bundle.sender)
        {
            let remote = "\(Self.outbox)/\(bundle.sender)/\(bundle.name)"
            // A file refused before costs one look: not read again until it changes.
            if let known = planted[remote], known.context == context, try transport.fileSize(remote) == known.size {
                report.plantedSkipped.append(remote)
                continue
            }
            let local = scratch.path + "/" + bundle.name
            guard try fetch("\(Self.outbox)/\(bundle.sender)", bundle.name, to: local) else { continue }
            do {
                var readersKeys: [ReadersKey] = []
                switch try readersKey(forBundleAt: local, named: bundle.name, replica: replica, key: key, scratch: scratch) {
                case .opened(let opened): readersKeys = [opened]
                case .none: break
                case .unavailable(let name, let size):
                    report.notes.append(
                        "\(transport.displayName)/\(Self.outbox)/\(displayText(bundle.sender))/\(displayText(bundle.name)): encrypted to the readers' key \(Self.keys)/\(name), which this replica cannot open (\(size == nil ? "not in the mailbox" : "damaged, or not for this replica's key")); read again when that file changes"
                    )
                    try state(replica).markWaitingForKey(bundle: bundle.name, keyFileSize: size)
                    try? FileManager.default.removeItem(atPath: local)
                    continue
                }
                let result = try BundleExchange.importBundle(
                    path: local, into: replica, trust: trust, decryptingWith: key, readersKeys: readersKeys,
                    learning: peers.mapValues(\.learned))
                if result.superseded && result.summary.changes == 0 {
                    report.notes.append(
                        "\(transport.displayName)/\(Self.outbox)/\(bundle.sender)/\(bundle.name): nothing new (an older bundle of \(displayText(result.senderName.isEmpty ? result.sender : result.senderName)) than one already taken)"
                    )
                } else if result.outcome != .ownBundle {
                    report.imported.append(result)
                }
                report.warnings += result.warnings.map { naming($0, local, bundle) }
                try state(replica).markSeen(bundle: bundle.name, knowledge: result.senderKnowledge)
                if planted[remote] != nil { try state(replica).forgetPlanted(remote) }
            } catch let error as BundleError where error.kind == .notAddressed {
                // Encrypted before its sender knew this replica reads here: once it sees this
                // replica's acknowledgement it leaves one this replica can read, under another name.
                report.notes.append(naming(error.description, local, bundle))
                try state(replica).markUnaddressed(bundle: bundle.name)
            } catch let error as BundleError where error.kind != .io {
                report.rejected.append((bundle.name, naming(error.description, local, bundle)))
                if let context, error.concernsTheFileAlone {
                    try state(replica).rememberPlanted(
                        remote, try PlantedFile(local: local, context: context), reason: naming(error.description, local, bundle),
                        untrustedSigner: error.signerNotTrusted)
                }
            } catch let error as ChangeLogError {
                report.refused.append((bundle.name, naming(error.description, local, bundle)))
            } catch let error as SQLiteError where !error.isBusy {
                // One bundle that cannot apply must not stop the rest of the sync.
                report.refused.append((bundle.name, naming("\(local): \(error.message)", local, bundle)))
            }
            try? FileManager.default.removeItem(atPath: local)
        }
        importedBeforeWriting = report.imported
        try state(replica).forgetSeen(keeping: listed)
        try state(replica).forgetPlanted(keeping: Set(bundles.map { "\(Self.outbox)/\($0.sender)/\($0.name)" }))
        let knowledge = try replica.knowledge()
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
        let servable = try BundleExchange.servableKnowledge(of: replica)
        try writeAcknowledgement(
            servable, holding: knowledge, learnedSince: before, of: replica, key: key, trust: trust, scratch: scratch)
        var readers = peers.mapValues(\.knowledge)
        // Each holds what no acknowledgement says: everything since its first change goes.
        for reader in unreadReaders { readers[reader] = Knowledge() }

        var mine: [String] = []
        // Names this replica uploaded, to this mailbox or under another path (a stick mounted
        // elsewhere): each is recorded before it is written.
        let ours = try state(replica).uploadedAnywhere()
        for name in try transport.listFiles(in: "\(Self.outbox)/\(me)") {
            let path = "\(Self.outbox)/\(me)/\(name)"
            guard BundleExchange.isBundleFileName(name) else {
                try writing { try transport.removeFile(path) }
                report.warnings.append("\(transport.displayName)/\(path): not written by this replica; removed")
                continue
            }
            if ours.contains(name) {
                mine.append(name)
                continue
            }
            if try isCopysBundle(path, of: replica, key: key, scratch: scratch) {
                // A bundle in this replica's own outbox, signed with its key under its ID, with
                // changes it never made or made otherwise: another file writes under the same
                // identity. Leave everything as it is, so neither loses a change, and say so.
                report.refused.append(
                    (
                        name,
                        "\(transport.displayName)/\(path): written by another copy of this database (a file copied with cp); run `sqsync reidentify` on the copy, then sync both"
                    ))
                return report
            }
            if (BundleExchange.senderSeq(ofFileName: name) ?? 0) <= knowledge[me] {
                // Its own bundle from before uploads were recorded, or replayed: nothing new.
                mine.append(name)
                continue
            }
            try writing { try transport.removeFile(path) }
            report.warnings.append(
                "\(transport.displayName)/\(path): not a bundle signed by this replica's knowledge ID; removed")
        }
        // Readers with different scopes get bundles of their own (docs/SCOPES.md); with no
        // reader yet, one bundle holds every row. Once any replica has a scope, a bundle is
        // encrypted to its own readers' keys only, never to every trusted key.
        let rules = try replica.adminRules()
        var groups: [String: (scope: [String]?, readers: [String: Knowledge])] = [:]
        for (reader, held) in readers {
            let scope = rules.scope(of: reader)
            groups[Self.scopeKey(scope), default: (scope, [:])].readers[reader] = held
        }
        if readers.isEmpty { groups["*"] = (nil, [:]) }
        var keep: Set<String> = []
        // Set once this sync leaves (or keeps) a bundle of every row for every reader: it
        // relays every origin, so it supersedes the others' bundles it carries all of.
        var superseding: Knowledge?
        let uploaded = try state(replica).uploadedBundles()
        for (scopeKey, group) in groups.sorted(by: { $0.key < $1.key }) {
            let base = Knowledge.common(Array(group.readers.values))
            // Every origin's changes are relayed, the readers' own too: one bundle read brings a
            // reader everything its writer held, so a sync reads the few newest bundles, not
            // one per replica (docs/PERFORMANCE.md, "A thousand replicas").
            let offersNothing = try !BundleExchange.hasChanges(
                of: replica, since: base, scope: group.scope)
            if !group.readers.isEmpty && offersNothing { continue }
            // This replica's own key too, so that it can check its own outbox.
            var recipients =
                encrypts
                ? [key.publicKey]
                    + (try KeyBinding.encryptionKeys(
                        for: Set(group.readers.keys), replica: replica, trust: trust, signedAcknowledgements: acknowledgementKeys,
                        unmetReaders: group.scope == nil, onlyPinned: rules.hasScopes)).filter {
                        $0 != key.publicKey
                    } : []
            // Past a few dozen readers, once to their shared key and once to this replica's own.
            var readersKey: ReadersKey?
            if recipients.count > BundleLimits.maxDirectRecipients {
                readersKey = try self.readersKey(for: recipients, replica: replica, key: key, scratch: scratch)
                recipients = [key.publicKey]
            }
            let content = try BundleExchange.plannedContent(
                of: replica, since: base, scope: group.scope)
            let fingerprint = Self.fingerprint(
                knowledge: knowledge, base: base, recipients: recipients, scope: group.scope == nil ? "" : scopeKey,
                content: content + (readersKey.map { "|" + $0.name } ?? ""))
            if let existing = mine.first(where: { $0.hasSuffix("_\(fingerprint).sqsb") && uploaded.contains($0) }) {
                keep.insert(existing)
                try state(replica).noteBundleReadersKey(bundle: existing, key: readersKey?.name)
            } else {
                let exported = try BundleExchange.export(
                    replica: replica, since: base, key: key, to: scratch.path, intoDirectory: true, nameSuffix: fingerprint,
                    encryptTo: recipients, readersKey: readersKey, scope: group.scope)
                let name = URL(fileURLWithPath: exported.path).lastPathComponent
                // A file under that name this replica did not upload (a copy of one it left in
                // another mailbox, or planted) goes first: the name says what this bundle
                // carries, so a publish is never refused for a name taken.
                if mine.contains(name) { try writing { try transport.removeFile("\(Self.outbox)/\(me)/\(name)") } }
                try state(replica).recordUpload(name)
                try state(replica).noteBundleReadersKey(bundle: name, key: readersKey?.name)
                try writing { try transport.writeFile(from: exported.path, to: "\(Self.outbox)/\(me)/\(name)") }
                keep.insert(name)
                if exported.rows >= (report.exported?.rows ?? 0) { report.exported = exported }
            }
            if group.scope == nil && !rules.hasScopes { superseding = try BundleExchange.carriedKnowledge(of: replica, since: base) }
        }
        for name in mine where !keep.contains(name) {
            try writing { try transport.removeFile("\(Self.outbox)/\(me)/\(name)") }
            report.removed += 1
        }
        try state(replica).rememberUploads(keep)
        report.removed += try removeBundlesEveryReaderHolds(
            bundles.filter { $0.sender != me }, readers: readers, me: me, knowledge: knowledge, seen: try state(replica).seenBundles(),
            superseding: superseding)
        try removeUnneededReadersKeys(
            others: bundles.filter { $0.sender != me }, kept: Array(keep), retired: retired, replica: replica)
        for verified in verifiedAcknowledgements {
            try state(replica).cacheAcknowledgement(replica: verified.replica, file: verified.file, text: verified.text)
        }
        // Own writes outside this replica's scope leave it once every peer has them.
        report.rowsLeftScope = try replica.removeRowsOutOfScope()
        return report
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

    /// Copies a file out of the mailbox; false when another replica removed or replaced it
    /// since the listing (it wrote a newer one, which the next sync picks up).
    /// A file larger than `maxBytes` is not read: false, with a warning.
    func fetch(_ folder: String, _ name: String, to local: String, maxBytes: Int = BundleLimits.maxBundleBytes) throws
        -> Bool
    {
        do {
            filesRead += 1
            try transport.readFile("\(folder)/\(name)", to: local, maxBytes: maxBytes)
            return true
        } catch let error as TransportError where error.kind == .tooLarge {
            skipped.append(error.description)
            return false
        } catch let error as TransportError where error.kind == .io {
            if try transport.listFiles(in: folder).contains(name) { throw error }
            return false
        }
    }

    /// A message about the downloaded copy, made to name the bundle where the user sees it.
    /// Names come from the mailbox's listing, which anyone who can write there chooses: escaped.
    private func naming(_ message: String, _ local: String, _ bundle: (sender: String, name: String)) -> String {
        message.replacing(
            local, with: "\(transport.displayName)/\(Self.outbox)/\(displayText(bundle.sender))/\(displayText(bundle.name))")
    }

    /// Same knowledge, base, recipients and content (``BundleExchange/plannedContent(of:since:scope:checkpoints:)``)
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

    /// A scope as a dictionary key: "*" for every row.
    static func scopeKey(_ scope: [String]?) -> String {
        scope.map { "[" + $0.sorted().joined(separator: "\u{1f}") + "]" } ?? "*"
    }

    /// Removes what uploads of this replica killed half-way left in the two folders only it
    /// writes to; others' unfinished uploads are theirs to clear.
    private func removeOwnLeftovers(of me: String) throws -> Int {
        var removed = 0
        for folder in ["\(Self.outbox)/\(me)", "\(Self.acks)/\(me)", Self.keys] {
            for name in try transport.temporaryFiles(in: folder) where name.hasPrefix("\(temporaryPrefix)\(me)-") {
                try writing { try transport.removeFile("\(folder)/\(name)") }
                removed += 1
            }
        }
        return removed
    }

    /// Whether a file in this replica's outbox is a bundle another file with this replica's
    /// identity wrote: signed by this replica's own key under its knowledge ID, with changes
    /// beyond what it made, or with one of its own changes made otherwise (``OwnChangeCheck``).
    /// A replay of a bundle it wrote itself is not; one signed by another key was planted.
    private func isCopysBundle(_ path: String, of replica: Replica, key: SigningKey, scratch: ScratchDirectory) throws -> Bool {
        let me = replica.knowledgeID
        let local = scratch.path + "/outbox-check.sqsb"
        defer { try? FileManager.default.removeItem(atPath: local) }
        let folder = RelativePath.parent(of: path), name = String(path.dropFirst(folder.count + 1))
        guard try fetch(folder, name, to: local) else { return false }
        do {
            let reader = try BundleReader(path: local, trust: nil, decryptingWith: key)
            let ownKey = try KeyBinding.currentKey(of: me, replica: replica)
            guard reader.envelope.sender.id == me, reader.signature.publicKey == ownKey else { return false }
            if reader.envelope.senderSeq > (try replica.knowledge()[me]) { return true }
            do {
                try BundleExchange.checkOwnChanges(in: reader, replica: replica)
            } catch let error as ChangeLogError where error.kind == .identityClash {
                return true
            }
            return false
        } catch is BundleError {
            return false
        }
    }

    /// Another replica's bundle can go once every reader, its sender aside, holds what it
    /// carries, or once this sync left a bundle for every reader that carries all of it
    /// (`superseding`, ``BundleExchange/carriedKnowledge(of:since:)``): in steady state the
    /// mailbox then holds the newest bundle or two, whatever the number of replicas.
    private func removeBundlesEveryReaderHolds(
        _ bundles: [(sender: String, name: String)], readers: [String: Knowledge], me: String, knowledge: Knowledge,
        seen: [String: Knowledge], superseding: Knowledge?
    ) throws -> Int {
        var removed = 0
        for bundle in bundles {
            guard let carried = seen[bundle.name] else { continue }
            var holders = readers.filter { $0.key != bundle.sender }
            holders[me] = knowledge
            if holders.values.allSatisfy({ $0.covers(carried) }) || superseding?.covers(carried) == true {
                try writing { try transport.removeFile("\(Self.outbox)/\(bundle.sender)/\(bundle.name)") }
                removed += 1
            }
        }
        return removed
    }
}

/// A private temporary folder beside the database, removed with everything in it when
/// released. A sync killed half-way leaves it behind; the next sync (which holds the lock)
/// clears what earlier runs left.
final class ScratchDirectory {
    let path: String

    static func parent(of database: String) -> String {
        let url = URL(fileURLWithPath: database)
        return url.deletingLastPathComponent().path + "/." + url.lastPathComponent + "-sqsync-tmp"
    }

    /// Removes what syncs killed half-way left; call only while holding the sync lock.
    static func clearLeftovers(beside database: String) {
        try? FileManager.default.removeItem(atPath: parent(of: database))
    }

    init(beside database: String) throws {
        let parent = Self.parent(of: database)
        do {
            try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
        } catch {
            throw TransportError(.io, "\(parent): cannot create a temporary folder: \(errorText(error))")
        }
        var template = Array((parent + "/XXXXXX").utf8CString)
        guard let created = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw TransportError(.io, "\(parent): cannot create a temporary folder: \(String(cString: strerror(errno)))")
        }
        path = String(cString: created)
    }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
        rmdir(URL(fileURLWithPath: path).deletingLastPathComponent().path)
    }
}
