import Bundle
import ChangeLog
import FoundationEssentials
import SQLiteDatabase

/// When a sync has nothing to do (docs/PERFORMANCE.md, "A thousand replicas"): the mailbox's
/// mark, renewed by every write (``MailboxSync/writing(_:)``), and a digest of the replica's own
/// state tell it, before anything is listed; every replica's folder stamps when the mark is not
/// trusted. Only media with ``StampedFolders`` have marks; the others always list.
extension Mailbox {
    /// What a sync compared, before anything was listed, to learn whether it has anything to do.
    struct QuietCheck {
        var now: Int64
        var state: MailboxState
        var mark: String?
        var replicaInputs: String?
        var inputs: String?
        /// The mailbox and the replica are as the last sync that found nothing to do left them.
        var unchanged = false
    }

    /// Compares the mailbox's mark, else every folder's stamp, and the replica's own state with
    /// what the last quiet sync saw. Taken before anything is listed, so a change made during
    /// this sync shows next time; the mark first, so that a change made while the folders are
    /// compared shows in it.
    func quietCheck(replica: Replica, key: SigningKey, trust: AllowedSigners) throws -> QuietCheck {
        var check = QuietCheck(now: Int64(Date().timeIntervalSince1970 * 1000), state: try state(replica), mark: try mailboxMark())
        let lastQuiet = try check.state.lastQuietSync()
        // The last quiet sync checked this key and signed what this replica held then (its
        // statement, key pins and knowledge are in the inputs): unchanged, there is nothing to
        // check or sign again, which reads every replica's entry. (Without one, the tables
        // the inputs read may not exist yet.)
        check.replicaInputs = lastQuiet == nil ? nil : try replicaSyncInputs(replica: replica, key: key, trust: trust)
        if check.replicaInputs == nil || lastQuiet?.replicaInputs != check.replicaInputs {
            try KeyBinding.prepareToSign(replica: replica, key: key)
            check.replicaInputs = try replicaSyncInputs(replica: replica, key: key, trust: trust)
        }
        if let last = lastQuiet {
            if let replicaInputs = check.replicaInputs, last.replicaInputs == replicaInputs, check.now >= last.savedAt {
                if try markStillSays(last, mark: check.mark, state: check.state, now: check.now) {
                    check.unchanged = true
                    return check
                }
                check.inputs = try folderInputs(replicaInputs: replicaInputs)
                if let inputs = check.inputs, inputs == last.inputs {
                    check.unchanged = true
                    try rememberQuiet(check)
                    return check
                }
                // A folder changed and the mark did not: a writer here does not mark its changes.
                if check.inputs != nil, let mark = check.mark, last.mark == mark { try check.state.noteUnmarkedChange(at: check.now) }
            }
            // Forgotten first: a sync that fails half-way may have changed what the digest
            // does not cover.
            try check.state.forgetQuietSync()
        }
        if check.inputs == nil, let replicaInputs = check.replicaInputs { check.inputs = try folderInputs(replicaInputs: replicaInputs) }
        return check
    }

    /// Remembers that a sync found nothing to do, with what it compared, for the next one.
    func rememberQuiet(_ check: QuietCheck) throws {
        guard let inputs = check.inputs else { return }
        try check.state.rememberQuietSync(
            .init(inputs: inputs, savedAt: check.now, mark: check.mark, replicaInputs: check.replicaInputs, fullCheckedAt: check.now))
    }

    /// How long a sync that finds the mailbox's mark unchanged stops there, before it compares
    /// every replica's folder again all the same: a writer of an older sqsync marks nothing.
    nonisolated(unsafe) public static var markTrustedFor: Int64 = 600_000
    /// Once a folder changed without the mark, how long every sync there compares every folder.
    static let unmarkedWritersRemembered: Int64 = 30 * 86_400_000

    /// Whether the mailbox's mark is as `last` saw it, `last` compared every folder recently,
    /// and no folder here changed without the mark for a while: then nothing below it changed.
    func markStillSays(_ last: MailboxState.QuietSync, mark: String?, state: MailboxState, now: Int64) throws -> Bool {
        guard let mark, last.mark == mark, now >= last.savedAt, now - last.fullCheckedAt < Self.markTrustedFor else { return false }
        return try state.unmarkedChangeSeenAt().map { now - $0 >= Self.unmarkedWritersRemembered } ?? true
    }

    /// What a sync that found nothing to do reports: what this replica holds back, lacks and
    /// refused before. Kept with the replica's content stamp for the next sync (``stillQuiet``).
    func quietReport(_ replica: Replica, key: SigningKey, trust: AllowedSigners, replicaInputs: String) throws -> SyncReport {
        var report = SyncReport()
        report.unchanged = true
        try addStanding(to: &report, replica: replica)
        if let trusted = trust.fingerprint {
            quietBefore = QuietReplica(
                replica: replica, stamp: try replica.database.contentStamp(), key: key.publicKey, trust: trusted,
                encrypts: encrypts, replicaInputs: replicaInputs, report: report)
        }
        return report
    }

    /// A replica as the last sync through this mailbox that found nothing to do left it.
    struct QuietReplica {
        weak var replica: Replica?
        var stamp: Database.ContentStamp
        var key: SSHPublicKey
        var trust: String
        var encrypts: Bool
        var replicaInputs: String
        var report: SyncReport
    }


    /// The report of a sync that has nothing to do, found without reading the replica: its
    /// connection has written nothing, seen no other commit and undone nothing since the last
    /// sync here found nothing to do (``Database/contentStamp()``), with the same key and trust,
    /// and the mailbox's mark is as that sync saw it. A program that syncs the same replica
    /// again and again (a library user, `make bench`) then costs a few stamps a sync.
    func stillQuiet(replica: Replica, key: SigningKey, trust: AllowedSigners) throws -> SyncReport? {
        guard let before = quietBefore, before.replica === replica, before.key == key.publicKey, let trusted = trust.fingerprint,
            before.trust == trusted, before.encrypts == encrypts, try replica.database.contentStamp() == before.stamp
        else { return nil }
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let state = try state(replica)
        guard let last = try state.lastQuietSync(), last.replicaInputs == before.replicaInputs,
            try markStillSays(last, mark: try mailboxMark(), state: state, now: now)
        else { return nil }
        return before.report
    }


    /// A digest of what in this replica a sync's outcome depends on: its sync state, the
    /// trusted keys, its key and name. Nil when trust depends on the time.
    func replicaSyncInputs(replica: Replica, key: SigningKey, trust: AllowedSigners) throws -> String? {
        guard let trusted = trust.fingerprint else { return nil }
        return sha256Hex(
            [
                try state(replica).syncState(), trusted, key.publicKey.openSSHLine, replica.name, replica.knowledgeID,
                encrypts ? "encrypted" : "in the clear",
            ].joined(separator: "\n"))
    }

    /// A digest of everything a sync's outcome depends on: the stamp of every replica's
    /// folders and `replicaInputs`. A sync that sees the same digest as one that found nothing
    /// to do has nothing to do either. Nil when the medium has no settled stamps.
    func folderInputs(replicaInputs: String) throws -> String? {
        guard let stamped = transport as? StampedFolders, let outboxes = try stamped.settledFolderStamps(in: Self.outbox),
            let acks = try stamped.settledFolderStamps(in: Self.acks)
        else { return nil }
        var text = ""
        for (folder, stamps) in [(Self.outbox, outboxes), (Self.acks, acks)] {
            for name in stamps.keys.sorted() { text += "\(folder)/\(name) \(stamps[name]!)\n" }
        }
        return sha256Hex(text + replicaInputs)
    }

    /// The stamps of the mailbox's own folders, which every change below them renews
    /// (``MailboxSync/writing(_:)``); nil while any is unsettled or the medium has no stamps.
    func mailboxMark() throws -> String? {
        guard let transport = transport as? StampedFolders else { return nil }
        var stamps: [String] = []
        for folder in [Self.folder, Self.outbox, Self.acks, Self.keys] {
            guard let stamp = try transport.settledStamp(of: folder) else { return nil }
            stamps.append(stamp)
        }
        return stamps.joined(separator: " ")
    }
}
