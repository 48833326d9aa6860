import Bundle
import ChangeLog
import FoundationEssentials
import SQLiteDatabase

/// Stage 2, take in: the other replicas' acknowledgements (MailboxSync+Acknowledgements.swift),
/// the held bundles that can go on now, then each listed bundle not taken before through the
/// three-stage import (``BundleExchange/importBundle(path:into:trust:decryptingWith:readersKeys:learning:)``).
/// A file refused before costs one look until it changes; one bundle that cannot apply never
/// stops the others.
extension MailboxSync {
    func takeIn() throws {
        // Read once: what the acknowledgements add to it are files no bundle is listed under.
        let planted = try state.plantedFiles()
        peers = try readAcknowledgements(planted: planted)
        report.imported += try BundleExchange.retryHeld(replica: replica, trust: trust)
        let marks = try state.bundleMarks()
        let waiting = Set(marks.waiting.keys).subtracting(try bundlesWhoseKeyChanged(marks.waiting))
        retired = try replica.retiredPeerIDs()
        // Trust that depends on the time (validity windows) gives no context to compare.
        let context = plantedContext
        var toRead: [(sender: String, name: String)] = []
        for bundle in bundles
        where bundle.sender != me && marks.seen[bundle.name] == nil && !marks.unaddressed.contains(bundle.name)
            && !waiting.contains(bundle.name) && !retired.contains(bundle.sender)
        {
            let remote = remotePath(bundle)
            // A file refused before costs one look: not read again until it changes.
            if let known = planted[remote], known.context == context, try transport.fileSize(remote) == known.size {
                report.plantedSkipped.append(remote)
                continue
            }
            toRead.append(bundle)
        }
        // Fetched together where each read costs a process (an object store through rclone).
        try transport.prefetch(toRead.map(remotePath), maxBytes: BundleLimits.maxBundleBytes, into: scratch.path + "/prefetch")
        for bundle in toRead {
            try importBundle(bundle, plantedBefore: planted[remotePath(bundle)] != nil, context: context)
        }
        importedBeforeWriting = report.imported
        try state.forgetSeen(keeping: Set(bundles.map(\.name)))
        try state.forgetPlanted(keeping: Set(bundles.map(remotePath)).union(listedAcknowledgements))
    }

    /// Fetches one bundle and imports it, noting in the replica what came of it: seen, not
    /// addressed here, waiting for a readers' key, or refused (remembered as planted when the
    /// file alone is at fault).
    private func importBundle(_ bundle: (sender: String, name: String), plantedBefore: Bool, context: String?) throws {
        let remote = remotePath(bundle)
        let local = scratch.path + "/" + bundle.name
        guard try fetch("\(Mailbox.outbox)/\(bundle.sender)", bundle.name, to: local) else { return }
        defer { try? FileManager.default.removeItem(atPath: local) }
        do {
            var readersKeys: [ReadersKey] = []
            switch try readersKey(forBundleAt: local, named: bundle.name) {
            case .opened(let opened): readersKeys = [opened]
            case .none: break
            case .unavailable(let name, let size):
                report.notes.append(
                    "\(transport.displayName)/\(Mailbox.outbox)/\(displayText(bundle.sender))/\(displayText(bundle.name)): encrypted to the readers' key \(Mailbox.keys)/\(name), which this replica cannot open (\(size == nil ? "not in the mailbox" : "damaged, or not for this replica's key")); read again when that file changes"
                )
                try state.markWaitingForKey(bundle: bundle.name, keyFileSize: size)
                return
            }
            let result = try BundleExchange.importBundle(
                path: local, into: replica, trust: trust, decryptingWith: key, readersKeys: readersKeys,
                learning: peers.mapValues(\.learned))
            if result.superseded && result.summary.changes == 0 {
                report.notes.append(
                    "\(transport.displayName)/\(remote): nothing new (an older bundle of \(displayText(result.senderName.isEmpty ? result.sender : result.senderName)) than one already taken)"
                )
            } else if result.outcome != .ownBundle {
                report.imported.append(result)
            }
            report.warnings += result.warnings.map { naming($0, local, bundle) }
            try state.markSeen(bundle: bundle.name, knowledge: result.senderKnowledge)
            if plantedBefore { try state.forgetPlanted(remote) }
        } catch let error as BundleError where error.kind == .notAddressed {
            // Encrypted before its sender knew this replica reads here: once it sees this
            // replica's acknowledgement it leaves one this replica can read, under another name.
            // With scopes, most are another group's: counted, so that a note still means something.
            if try mailboxHasScopes() {
                report.forOtherReaders += 1
            } else {
                report.notes.append(naming(error.description, local, bundle))
            }
            try state.markUnaddressed(bundle: bundle.name)
        } catch let error as BundleError where error.kind != .io {
            report.rejected.append((bundle.name, naming(error.description, local, bundle)))
            if let context, error.concernsTheFileAlone {
                try state.rememberPlanted(
                    remote, try PlantedFile(local: local, context: context), reason: naming(error.description, local, bundle),
                    untrustedSigner: error.signerNotTrusted, damaged: error.bytesDamaged)
            }
        } catch let error as ChangeLogError {
            report.refused.append((bundle.name, naming(error.description, local, bundle)))
        } catch let error as SQLiteError where !error.isBusy {
            // One bundle that cannot apply must not stop the rest of the sync.
            report.refused.append((bundle.name, naming("\(local): \(error.message)", local, bundle)))
        }
    }

    /// A message about the downloaded copy, made to name the bundle where the user sees it.
    /// Names come from the mailbox's listing, which anyone who can write there chooses: escaped.
    private func naming(_ message: String, _ local: String, _ bundle: (sender: String, name: String)) -> String {
        message.replacing(
            local, with: "\(transport.displayName)/\(Mailbox.outbox)/\(displayText(bundle.sender))/\(displayText(bundle.name))")
    }
}
