import Bundle
import ChangeLog
import FoundationEssentials
import SQLiteDatabase

/// One sync through a mailbox, made for that run alone: what it learns stage by stage lives
/// here, never on the long-lived ``Mailbox``. The stages, each in a file of its own:
///
/// 1. look (`MailboxSync+Look.swift`): the folders exist, this replica's killed uploads are
///    cleared, and the other replicas' bundles are listed;
/// 2. take in (`+TakeIn.swift`): the others' acknowledgements, the held bundles that can go
///    on now, and each listed bundle through the three-stage import;
/// 3. answer (`+Answer.swift`): this replica's own signed acknowledgement;
/// 4. leave out (`+LeaveOut.swift`): this replica's outbox checked, and one bundle per scope
///    group, named by its content, kept or written;
/// 5. tidy (`+Tidy.swift`): its old bundles, the bundles every reader holds or that a newer
///    one supersedes, unneeded readers' keys, rows outside its scope.
///
/// Each stage reads only what the earlier ones set, so a test drives them one at a time on a
/// ``MemoryTransport``. Not Sendable on purpose: it belongs to one run.
final class MailboxSync {
    let mailbox: Mailbox
    let replica: Replica
    let key: SigningKey
    let trust: AllowedSigners
    /// This replica's knowledge ID: the name of its folders in the mailbox.
    let me: String
    let state: MailboxState
    let scratch: ScratchDirectory
    var report = SyncReport()

    /// Look: what this replica held when the sync began, and the others' bundles listed.
    var before = Knowledge()
    var bundles: [(sender: String, name: String)] = []

    /// Take in: each reader's newest verified acknowledgement, the key that signed it (to
    /// encrypt to when none is pinned yet), and the files to remember once the sync succeeds
    /// (a refused sync leaves the database as it was).
    var peers: [String: MailboxAcknowledgement] = [:]
    var acknowledgementKeys: [String: SSHPublicKey] = [:]
    var verifiedAcknowledgements: [(replica: String, file: String, text: String)] = []
    /// Newer acknowledgement files were left for the next sync (``readAcknowledgements(planted:)``).
    var acknowledgementsLeftUnread = false
    /// Readers whose acknowledgement no sync here has read yet: they count as holding nothing.
    var unreadReaders: Set<String> = []
    /// Peers retired here, whose bundles nobody reads.
    var retired: Set<String> = []
    /// Every acknowledgement file listed, by path: refused ones stay remembered while listed.
    var listedAcknowledgements: Set<String> = []
    /// The readers' key files listed (``listedKeyFiles()``), once.
    var listedKeys: Set<String>?
    /// What this sync imported, set once it starts to write to the mailbox.
    var importedBeforeWriting: [ImportResult]?

    /// Answer: what this replica holds after the imports, and what each reader holds.
    var knowledge = Knowledge()
    var readers: [String: Knowledge] = [:]

    /// Leave out: this replica's bundles found in its outbox, and those this sync keeps.
    var mine: [String] = []
    /// This replica's acknowledgement in the mailbox after the answer stage: its name stays
    /// recorded as an upload, with the bundles kept.
    var ownAcknowledgement: String?
    /// Set when another file with this replica's identity wrote its acknowledgement after
    /// this one's last (``writeAcknowledgement(_:)``): the file and what to say.
    var foreignAcknowledgement: (file: String, message: String)?
    /// With it: the first of this file's own changes it may not have told the mailbox of.
    var foreignFrom: Int64 = 1
    /// Whether any replica has a scope, read once per sync when a bundle is not addressed here.
    private var hasScopes: Bool?

    func mailboxHasScopes() throws -> Bool {
        if let hasScopes { return hasScopes }
        let read = try replica.adminRules().hasScopes
        hasScopes = read
        return read
    }
    /// Names in this replica's outbox that something other than a file holds (a folder, a
    /// prefix planted on an object store): a bundle is never published under one of them.
    var takenNames: Set<String> = []
    var keep: Set<String> = []
    /// Set once this sync leaves (or keeps) a bundle of every row for every reader: it relays
    /// every origin, so it supersedes the others' bundles it carries all of.
    var superseding: Knowledge?

    /// Files this sync left unread (larger than a mailbox file may be), one line each.
    var skipped: [String] = []
    /// Files copied out of the mailbox (bundles, acknowledgements, readers' keys).
    var filesRead = 0
    /// A write to the mailbox failed (not a read): the medium refuses writes.
    var failedWriting = false

    var transport: Transport { mailbox.transport }

    init(mailbox: Mailbox, replica: Replica, key: SigningKey, trust: AllowedSigners) throws {
        self.mailbox = mailbox
        self.replica = replica
        self.key = key
        self.trust = trust
        me = replica.knowledgeID
        state = try mailbox.state(replica)
        scratch = try ScratchDirectory(beside: replica.path)
    }

    /// The five stages in order. A medium that refuses writes once the imports are done fails
    /// with one line saying what was imported and kept.
    func run() throws -> SyncReport {
        do {
            try look()
            try takeIn()
            if try answer() {
                if try leaveOut() { try tidy() }
            } else if try checkOwnOutbox(), let foreignAcknowledgement {
                // The outbox says it first when the other file left a bundle there too (and
                // nothing here changes). Else noted: `reidentify` keeps this file's changes
                // after its last acknowledgement here as the new identity's.
                try replica.recordOwnChangesMadeElsewhere(from: foreignFrom, message: foreignAcknowledgement.message)
                report.refused.append((foreignAcknowledgement.file, foreignAcknowledgement.message))
            }
        } catch let error as TransportError where importedBeforeWriting != nil && failedWriting {
            throw Mailbox.failedAfterImporting(importedBeforeWriting ?? [], error, mailbox: transport.displayName)
        }
        report.warnings += skipped
        report.oversized = skipped.count
        report.filesRead = filesRead
        return report
    }

    /// Nothing imported, written or read anew: the next sync may stop at comparing stamps.
    var foundNothingToDo: Bool {
        report.didNothing && verifiedAcknowledgements.isEmpty && !acknowledgementsLeftUnread
    }

    /// Runs one write to the mailbox (an upload or a removal), then renews the mailbox's mark
    /// (``Mailbox/mailboxMark()``), noting that a transport error came from writing, not from reading.
    func writing<T>(_ body: () throws -> T) throws -> T {
        do {
            let result = try body()
            try (transport as? StampedFolders)?.markChanged(Mailbox.folder)
            return result
        } catch let error as TransportError {
            failedWriting = true
            throw error
        }
    }

    /// Copies a file out of the mailbox; false when another replica removed or replaced it
    /// since the listing (it wrote a newer one, which the next sync picks up).
    /// A file larger than `maxBytes` is not read: false, with a warning.
    func fetch(_ folder: String, _ name: String, to local: String, maxBytes: Int = BundleLimits.maxBundleBytes) throws -> Bool {
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

    /// What a file refused here was judged with (the trust and this replica's key): a file
    /// refused before is read again once that changes. Nil when trust depends on the time.
    var plantedContext: String? { trust.fingerprint.map { PlantedFile.context(trust: $0, key: key.publicKey) } }

    /// The path of another replica's bundle in the mailbox, as messages show it.
    func remotePath(_ bundle: (sender: String, name: String)) -> String {
        "\(Mailbox.outbox)/\(bundle.sender)/\(bundle.name)"
    }
}
