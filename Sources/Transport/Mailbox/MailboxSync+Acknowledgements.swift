import Bundle
import ChangeLog
import FoundationEssentials
import Glibc

/// The acknowledgement files of a mailbox (`sqsync/acks/<knowledge-id>/…`): what each replica
/// says it holds, signed, which decides what the others leave for it and when a bundle may go.
extension MailboxSync {
    /// Leaves this replica's signed acknowledgement of `servable` and removes every other
    /// file in its folder (only it writes there, so anything else is stale or planted). What
    /// this sync's imports taught it (from ``before`` to ``knowledge``) updates the learning
    /// events its previous acknowledgement reported.
    /// False when the sync stops here: another file with this replica's identity wrote its
    /// acknowledgement after this one's last (``otherFileAcknowledged(_:signedBy:)``).
    func writeAcknowledgement(_ servable: Knowledge) throws -> Bool {
        let replicaName = replica.name
        let folder = "\(Mailbox.acks)/\(me)"
        let old = try transport.listFiles(in: folder)
        var earlier: [String: LearningEvent] = [:]
        var unchanged: MailboxAcknowledgement?
        if let previous = old.filter({ $0.hasSuffix(".ack") }).max() {
            ownAcknowledgement = previous
            if let cached = try state.cachedAcknowledgements()[me],
                cached.file == previous,
                let acknowledgement = try? MailboxAcknowledgement.alreadyVerified(cached.text, expectedReplica: me, trust: trust)
            {
                earlier = acknowledgement.acknowledgement.learned
                // After a key rotation the file is signed again, with the new key.
                if acknowledgement.key == key.publicKey { unchanged = acknowledgement.acknowledgement }
            } else {
                let local = scratch.path + "/" + previous
                if try fetch(folder, previous, to: local, maxBytes: MailboxAcknowledgement.maxBytes),
                    let text = try? String(contentsOfFile: local, encoding: .utf8),
                    let acknowledgement = try? MailboxAcknowledgement.verified(text, expectedReplica: me, trust: trust)
                {
                    earlier = acknowledgement.acknowledgement.learned
                    if try otherFileAcknowledged(previous, acknowledgement.acknowledgement, signedBy: acknowledgement.key) {
                        try? FileManager.default.removeItem(atPath: local)
                        return false
                    }
                }
                try? FileManager.default.removeItem(atPath: local)
            }
        }
        let learned = LearningEvent.after(earlier, before: before, after: knowledge, ownSeq: before[me], me: me)
        let unopened = try state.keysNotOpened()
        let damaged = try state.damagedBundles()
        // Signed anew for what this sync's imports brought, as an export would.
        let statement = try MailboxAcknowledgement.statementText(
            try KeyBinding.ownStatement(of: replica, signedWith: key), knowledge: servable)
        // A quiet sync leaves the file it wrote last time: same knowledge, same name, same news
        // (a damaged bundle gone since is no news).
        if let unchanged, unchanged.knowledge == servable, unchanged.learned == learned, unchanged.name == replicaName,
            unchanged.unopened == unopened, Set(damaged).isSubset(of: Set(unchanged.damaged)),
            unchanged.statementText == statement,
            let previous = old.filter({ $0.hasSuffix(".ack") }).max()
        {
            for stale in old where stale != previous { try writing { try transport.removeFile("\(folder)/\(stale)") } }
            return true
        }
        let now = UInt64(Date().timeIntervalSince1970 * 1000)
        let stamp = decimalString(now, width: 20)
        let name = "\(stamp)_\(hexString(UInt32.random(in: 0...UInt32.max), width: 8)).ack"
        let local = scratch.path + "/" + name
        let text = try MailboxAcknowledgement(
            replica: me, name: replicaName, knowledge: servable, learned: learned, birth: try KeyBinding.birth(of: replica),
            unopened: unopened, damaged: damaged, written: now, statementText: statement
        ).signedText(key: key)
        try Data(text.utf8).write(to: URL(fileURLWithPath: local))
        // Recorded before it is written, as a bundle is: a sync killed after writing it still
        // knows the file is its own.
        try state.recordUpload(name)
        ownAcknowledgement = name
        try writing { try transport.writeFile(from: local, to: "\(folder)/\(name)") }
        verifiedAcknowledgements.append((me, name, text))
        for stale in old where stale != name { try writing { try transport.removeFile("\(folder)/\(stale)") } }
        return true
    }

    /// Whether `file`, this replica's newest acknowledgement in the mailbox, signed with its
    /// key, was written by another file with its identity: not one this file recorded writing,
    /// and written (by its signed stamp, which its name carries) after every acknowledgement
    /// this file recorded writing, in any mailbox. A copy of an old acknowledgement under a
    /// newer name is a replay (its signed stamp is old), removed as stale. A copy made with
    /// `cp`, or this file before a backup was restored over it (its change numbers went back,
    /// and what it writes next reuses them), wrote it. Refused as a copy's bundle in the
    /// outbox is (exit 1, every sync while the file is there), and noted so that `reidentify`
    /// keeps this file's changes after its last acknowledgement here as the new identity's:
    /// nothing is lost.
    private func otherFileAcknowledged(_ file: String, _ acknowledgement: MailboxAcknowledgement, signedBy signer: SSHPublicKey) throws -> Bool {
        let recorded = try state.uploadedAnywhere().filter { $0.hasSuffix(".ack") }
        let currentKey = try KeyBinding.currentKey(of: me, replica: replica)
        guard let written = acknowledgement.written, file.hasPrefix(decimalString(written, width: 20) + "_"),
            let newestRecorded = recorded.max(), !recorded.contains(file), file > newestRecorded,
            signer == key.publicKey || currentKey == signer
        else { return false }
        let cached = try state.cachedAcknowledgements()[me].flatMap {
            try? MailboxAcknowledgement.alreadyVerified($0.text, expectedReplica: me, trust: trust)
        }
        foreignFrom = (cached?.acknowledgement.knowledge[me] ?? 0) + 1
        let message =
            "\(transport.displayName)/\(Mailbox.acks)/\(me)/\(displayText(file)): written by another copy of this database, or by this file before a backup was restored over it; run `sqsync reidentify` on the copy (or on this file, after a restore), then sync both"
        foreignAcknowledgement = (file, message)
        return true
    }

    /// The newest validly signed acknowledgement of every other replica that left one here,
    /// as far as this sync reads: also recorded in the replica (so `status` shows it). Newer
    /// files that are not validly signed for that replica are ignored with a warning, and do
    /// not hide an older valid one.
    ///
    /// A file read by an earlier sync is taken from the replica's cache. Of the readers with a
    /// newer file, at most ``Mailbox/acknowledgementsReadPerSync`` are read: those never read before
    /// first, then those whose acknowledgement here is the oldest (it holds back what bundles
    /// leave out). The others count with the one read before: each lists every replica, so
    /// reading all of them would cost a sync O(replicas²) in a round where all changed. An
    /// older acknowledgement says less than the newer one, never more, so a bundle carries a
    /// little more and a purge waits a little longer, nothing is lost. A reader none of whose
    /// files was read yet goes to ``unreadReaders``: it counts as holding nothing. A file
    /// refused is warned of once, then passed over while it stays as it was.
    func readAcknowledgements(planted: [String: PlantedFile]) throws -> [String: MailboxAcknowledgement] {
        let retired = try replica.retiredPeerIDs()
        let cache = try state.cachedAcknowledgements()
        let context = plantedContext
        var readers: [String: MailboxAcknowledgement] = [:]
        var newer: [(reader: String, names: [String])] = []
        for reader in try transport.listDirectories(in: Mailbox.acks) where reader != me && !retired.contains(reader) {
            let names = Array(try transport.listFiles(in: "\(Mailbox.acks)/\(reader)").filter({ $0.hasSuffix(".ack") }).sorted().reversed())
            listedAcknowledgements.formUnion(names.map { "\(Mailbox.acks)/\(reader)/\($0)" })
            guard let newest = names.first else { continue }
            // Read and recorded by an earlier sync: names are unique, so the listing is enough
            // to tell whether a newer one is there. Gone since, it still says what it said.
            if let cached = cache[reader],
                let acknowledgement = try? MailboxAcknowledgement.alreadyVerified(
                    cached.text, expectedReplica: reader, trust: trust, learnedAbout: me),
                try KeyBinding.checkAcknowledgementFile(
                    of: reader, name: acknowledgement.acknowledgement.name, signedBy: acknowledgement.key,
                    birth: acknowledgement.acknowledgement.birth, replica: replica) == nil
            {
                readers[reader] = acknowledgement.acknowledgement
                acknowledgementKeys[reader] = acknowledgement.key
                if newest == cached.file { continue }
                newer.append((reader, Array(names.prefix { $0 != cached.file })))
            } else {
                newer.append((reader, names))
            }
        }
        func priority(_ reader: String) -> (Int, Int64, String) {
            guard let known = readers[reader] else { return (0, 0, reader) }
            return (1, known.knowledge.total, reader)
        }
        let order = newer.sorted { priority($0.reader) < priority($1.reader) }
        acknowledgementsLeftUnread = order.count > Mailbox.acknowledgementsReadPerSync
        unreadReaders = Set(order.dropFirst(Mailbox.acknowledgementsReadPerSync).map(\.reader).filter { readers[$0] == nil })
        for (reader, names) in order.prefix(Mailbox.acknowledgementsReadPerSync) {
            let folder = "\(Mailbox.acks)/\(reader)"
            for name in names {
                let path = "\(folder)/\(name)"
                // A file refused before is said once: unchanged, it is passed over unread.
                if let known = planted[path], known.context == context, try transport.fileSize(path) == known.size {
                    report.plantedSkipped.append(path)
                    continue
                }
                let local = scratch.path + "/" + name
                defer { try? FileManager.default.removeItem(atPath: local) }
                guard try fetch(folder, name, to: local, maxBytes: MailboxAcknowledgement.maxBytes) else { continue }
                // Whether the file alone is at fault (its form, its signature, its signer's trust):
                // only then is it passed over until it changes; a refusal that depends on what
                // this replica knows of keys is told again at every sync.
                var fileAlone = true
                do {
                    let text = String(decoding: try Data(contentsOf: URL(fileURLWithPath: local)), as: UTF8.self)
                    let verified = try MailboxAcknowledgement.verified(
                        text, expectedReplica: reader, trust: trust, learnedAbout: me)
                    let acknowledgement = verified.acknowledgement
                    fileAlone = false
                    if let reason = try KeyBinding.checkAcknowledgementFile(
                        of: reader, name: acknowledgement.name, signedBy: verified.key, birth: acknowledgement.birth, replica: replica)
                    {
                        throw TransportError(.io, reason)
                    }
                    readers[reader] = acknowledgement
                    acknowledgementKeys[reader] = verified.key
                    try replica.recordAcknowledgement(of: reader, name: acknowledgement.name, knowledge: acknowledgement.knowledge)
                    if let statement = acknowledgement.statement {
                        try KeyBinding.keepStatement(statement, of: reader, replica: replica)
                    }
                    verifiedAcknowledgements.append((reader, name, text))
                    if planted[path] != nil { try state.forgetPlanted(path) }
                    break
                } catch let error as TransportError {
                    let reason = "\(transport.displayName)/\(path): ignored: \(error.description)"
                    report.warnings.append(reason)
                    if fileAlone, let context {
                        try state.rememberPlanted(
                            path, try PlantedFile(local: local, context: context), reason: reason, untrustedSigner: false)
                    }
                }
            }
        }
        return readers
    }
}
