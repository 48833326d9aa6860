import Bundle
import ChangeLog
import FoundationEssentials

/// Stage 4, leave out: this replica's outbox is checked (junk removed, a copy's bundle
/// refused), then each group of readers with one scope gets one bundle of what its
/// least-informed reader lacks, named by its content: kept when it is there already.
extension MailboxSync {
    /// False when the sync stops here: another copy of this database writes under its identity.
    func leaveOut() throws -> Bool {
        guard try checkOwnOutbox() else { return false }
        let rules = try KeyBinding.adminRules(of: replica)
        // Readers with different scopes get bundles of their own (docs/SCOPES.md); with no
        // reader yet, one bundle holds every row. A reader made with a scoped replica's key
        // is in that replica's group. Once any replica has a scope, a bundle is
        // encrypted to its own readers' keys only, never to every trusted key.
        var groups: [Scope: [String: Knowledge]] = [:]
        for (reader, held) in readers { groups[Scope(rules.scope(of: reader)), default: [:]][reader] = held }
        if readers.isEmpty { groups[.everyRow] = [:] }
        let uploaded = try state.uploadedBundles()
        for (scope, readers) in groups.sorted(by: { $0.key.text < $1.key.text }) {
            try leaveBundle(scope: scope, readers: readers, rules: rules, uploaded: uploaded)
        }
        return true
    }

    /// Sorts what this replica's outbox holds: its own bundles go to ``mine``; a file it did
    /// not write is removed, unless it is a bundle another copy of this database signed, which
    /// stops the sync (false) so that neither copy loses a change.
    func checkOwnOutbox() throws -> Bool {
        // Names this replica uploaded, to this mailbox or under another path (a stick mounted
        // elsewhere): each is recorded before it is written.
        let ours = try state.uploadedAnywhere()
        let listing = try transport.list("\(Mailbox.outbox)/\(me)")
        takenNames = Set(listing.folders)
        for name in listing.files {
            let path = "\(Mailbox.outbox)/\(me)/\(name)"
            guard BundleExchange.isBundleFileName(name) else {
                try writing { try transport.removeFile(path) }
                report.warnings.append("\(transport.displayName)/\(path): not written by this replica; removed")
                continue
            }
            if ours.contains(name) {
                mine.append(name)
                continue
            }
            if try isCopysBundle(path) {
                // A bundle in this replica's own outbox, signed with its key under its ID, with
                // changes it never made or made otherwise: another file writes under the same
                // identity. Leave everything as it is, so neither loses a change, and say so.
                report.refused.append(
                    (
                        name,
                        "\(transport.displayName)/\(path): written by another copy of this database, or by this file before it was restored; run `sqsync reidentify` on the copy, then sync both"
                    ))
                return false
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
        return true
    }

    /// One scope group's bundle: kept if this replica already left one of the same content for
    /// the same recipients, else exported and written. Every origin's changes are relayed, the
    /// readers' own too: one bundle read brings a reader everything its writer held, so a sync
    /// reads the few newest bundles, not one per replica (docs/PERFORMANCE.md, "A thousand replicas").
    private func leaveBundle(
        scope: Scope, readers: [String: Knowledge], rules: AdminRules, uploaded: Set<String>
    ) throws {
        let base = Knowledge.common(Array(readers.values))
        // The word of replicas that do not read here, relayed even when no change is: a replica
        // with nothing to send is still heard beyond its mailbox, and purges wait on no one
        // for good (docs/BUNDLE_FORMAT.md, "Acknowledgement statements").
        let words = try BundleExchange.carriedWords(of: replica, except: Set(self.readers.keys).union([me]))
        let lastWords = try state.relayedWords(scope: scope.text)
        let newWords = !words.isEmpty && words != lastWords
        let readingHere = Set(self.readers.keys)
        if !readers.isEmpty, !newWords,
            try !BundleExchange.hasChanges(of: replica, since: base, scope: scope.sorted, readingHere: readingHere)
        {
            return
        }
        var recipients = try self.recipients(readers: Set(readers.keys), unscoped: scope.isEveryRow, rules: rules)
        // Past a few dozen readers, once to their shared key and once to this replica's own.
        var readersKey: ReadersKey?
        if recipients.count > BundleLimits.maxDirectRecipients {
            readersKey = try self.readersKey(for: recipients, readers: Set(readers.keys))
            recipients = [key.publicKey]
        }
        let content = try BundleExchange.plannedContent(of: replica, since: base, scope: scope.sorted, readingHere: readingHere)
        let fingerprint = Mailbox.fingerprint(
            knowledge: knowledge, base: base, recipients: recipients, scope: scope.isEveryRow ? "" : scope.text,
            content: content + (readersKey.map { "|" + $0.name } ?? "") + (words.isEmpty ? "" : "|words " + words))
        let names = ["", "-1", "-2"].map { "_\(fingerprint)\($0).sqsb" }
        let named = { (name: String) in names.contains { name.hasSuffix($0) } }
        // A bundle a reader found damaged (a stick pulled while it was written) is left again.
        let damaged = Set(peers.values.flatMap(\.damaged))
        try state.recordRelayedWords(words, scope: scope.text)
        if let existing = mine.first(where: { named($0) && uploaded.contains($0) && !damaged.contains($0) }) {
            keep.insert(existing)
            try state.noteBundleReadersKey(bundle: existing, key: readersKey?.name)
        } else {
            let exported = try BundleExchange.export(
                replica: replica, since: base, key: key, to: scratch.path, intoDirectory: true, nameSuffix: fingerprint,
                encryptTo: recipients, readersKey: readersKey, scope: scope.sorted, readingHere: readingHere)
            let exportedName = URL(fileURLWithPath: exported.path).lastPathComponent
            // A folder (or an object store's prefix) put under the name, or a reader that found
            // the bundle there damaged: it goes under another, which readers take as any name.
            let name =
                names.map { exportedName.replacing(names[0], with: $0) }.first { !takenNames.contains($0) && !damaged.contains($0) }
                ?? exportedName
            // A file under that name this replica did not upload (a copy of one it left in
            // another mailbox, or planted) goes first: the name says what this bundle
            // carries, so a publish is never refused for a name taken.
            if mine.contains(name) { try writing { try transport.removeFile("\(Mailbox.outbox)/\(me)/\(name)") } }
            try state.recordUpload(name)
            try state.noteBundleReadersKey(bundle: name, key: readersKey?.name)
            try writing { try transport.writeFile(from: exported.path, to: "\(Mailbox.outbox)/\(me)/\(name)") }
            keep.insert(name)
            if exported.rows >= (report.exported?.rows ?? 0) { report.exported = exported }
        }
        if scope.isEveryRow && !rules.hasScopes { superseding = try BundleExchange.carriedKnowledge(of: replica, since: base) }
    }

    /// The keys a group's bundle is encrypted to: this replica's own first, so that it can
    /// check its own outbox, then its readers'; none under `sync --no-encrypt`.
    private func recipients(readers: Set<String>, unscoped: Bool, rules: AdminRules) throws -> [SSHPublicKey] {
        guard mailbox.encrypts else { return [] }
        let others = try KeyBinding.encryptionKeys(
            for: readers, replica: replica, trust: trust, signedAcknowledgements: acknowledgementKeys, unmetReaders: unscoped,
            onlyPinned: rules.hasScopes)
        return [key.publicKey] + others.filter { $0 != key.publicKey }
    }

    /// Whether a file in this replica's outbox is a bundle another file with this replica's
    /// identity wrote: signed by this replica's own key under its knowledge ID, with changes
    /// beyond what it made, or with one of its own changes made otherwise (``OwnChangeCheck``).
    /// A replay of a bundle it wrote itself is not; one signed by another key was planted.
    private func isCopysBundle(_ path: String) throws -> Bool {
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
}
