import ChangeLog
import SQLiteDatabase
import Foundation

/// What an export wrote.
public struct ExportResult: Sendable {
    public var path: String
    public var header: ChangeSetHeader
    public var rows: Int
    public var bytes: Int
}

/// What an import did with one bundle.
public struct ImportResult: Sendable {
    public enum Outcome: Sendable, Equatable {
        case applied
        /// Verified, but waiting for a schema migration; kept beside the database.
        case held(reason: String)
        /// Written by this very replica, and everything in it is held here as it was written.
        case ownBundle
    }

    public var path: String
    public var sender: String
    public var senderName: String
    public var signer: String
    /// What the sender held when it wrote the bundle.
    public var senderKnowledge: Knowledge
    public var outcome: Outcome
    public var summary: ApplySummary
    /// What was ignored on the way, one line each (statements not signed by their replica).
    public var warnings: [String] = []
}

/// Export and import of whole bundles: the glue between a replica and the file format.
public enum BundleExchange {
    /// Writes one signed bundle with every change `since` lacks (every change when empty).
    /// `destination` is a file path, or a folder when `intoDirectory` is true; then the file
    /// is named after the sender and its sequence range (docs/BUNDLE_FORMAT.md). A known
    /// `receiver` (knowledge ID) is spared its own acknowledgement statement.
    public static func export(
        replica: Replica, since base: Knowledge, key: SigningKey, to destination: String, intoDirectory: Bool,
        nameSuffix: String? = nil, receiver: String? = nil, progress: ((Int) -> Void)? = nil
    ) throws -> ExportResult {
        try KeyBinding.prepareToSign(replica: replica, key: key)
        return try ChangeExporter.snapshot(of: replica, since: base) { exporter in
            var header = exporter.header
            header.statements = try KeyBinding.carriedStatements(of: replica, except: receiver)
            let path = intoDirectory ? destination + "/" + fileName(for: header, suffix: nameSuffix) : destination
            let writer = try BundleWriter(
                destination: path, header: header, createdAt: Int64(Date().timeIntervalSince1970 * 1000))
            try exporter.forEachChange { change in
                try writer.write(change)
                if writer.recordCount % 10_000 == 0 { progress?(writer.recordCount) }
            }
            let bytes = try writer.finish(signingKey: key)
            return ExportResult(path: path, header: header, rows: writer.recordCount, bytes: bytes)
        }
    }

    /// `<sender>_<first>-<last>_<suffix>.sqsb`: valid on FAT32 and exFAT. `first` is the first
    /// of the sender's own changes the bundle may carry and `last` the sender's own sequence
    /// number when it wrote it, so a bundle with none of its own changes reads `6-5`: a name
    /// never claims a change its sender had not made. The suffix is random unless given, so
    /// two exports never collide.
    public static func fileName(for header: ChangeSetHeader, suffix: String? = nil) -> String {
        let suffix = suffix ?? String(format: "%08x", UInt32.random(in: 0...UInt32.max))
        return "\(header.sender)_\(header.base[0] + 1)-\(header.senderSeq)_\(suffix).sqsb"
    }

    /// The sender's own sequence number a bundle file name announces (`last`), if it is one of ours.
    public static func senderSeq(ofFileName name: String) -> Int64? {
        let parts = name.split(separator: "_")
        guard parts.count == 3 else { return nil }
        let bounds = parts[1].split(separator: "-").compactMap { Int64($0) }
        guard bounds.count == 2, bounds[0] <= bounds[1] + 1 else { return nil }
        return bounds[1]
    }

    public static func isBundleFileName(_ name: String) -> Bool {
        name.hasSuffix(".sqsb") && !name.hasPrefix(".")
    }

    /// Verifies a bundle completely, then merges it in one transaction. A schema the
    /// replica lacks holds the bundle (copied beside the database) instead of failing.
    /// A bundle of this replica's own knowledge ID (an operator importing a whole stick's
    /// outboxes) is tried without committing: if it would change nothing here, this replica
    /// wrote it and the outcome is ``ImportResult/Outcome/ownBundle``; anything else means
    /// another database writes under this ID, and is refused as a copy.
    public static func importBundle(
        path: String, into replica: Replica, trust: AllowedSigners, dryRun: Bool = false,
        learning: LearningEvent.ByWriter = [:], progress: ((Int) -> Void)? = nil
    ) throws -> ImportResult {
        let reader = try BundleReader(path: path)
        let trusted = KeyBinding.trust(trust, following: reader.header.statements, replica: replica)
        let signer = try reader.verify(trust: trusted)
        let own = reader.header.sender == replica.knowledgeID
        var result = ImportResult(
            path: path, sender: reader.header.sender, senderName: reader.header.senderName, signer: signer,
            senderKnowledge: Knowledge(Dictionary(uniqueKeysWithValues: zip(reader.header.sites, reader.header.knowledge))),
            outcome: .applied, summary: ApplySummary())
        // Foreign keys stay unenforced while merging, so a bundle never gets stuck on one;
        // orphans are reported by `conflicts` and `doctor` instead.
        let enforcedForeignKeys = try replica.database.int64("PRAGMA foreign_keys") == 1
        if enforcedForeignKeys { try replica.database.execute("PRAGMA foreign_keys = OFF") }
        defer { if enforcedForeignKeys { try? replica.database.execute("PRAGMA foreign_keys = ON") } }
        do {
            result.summary = try replica.database.withPageCache(ofAtLeast: Replica.bulkPageCacheKiB) {
                try replica.database.inTransaction(commit: !dryRun && !own) {
                    // The signer must be the sender's own key before anything else is read as the sender's.
                    result.warnings = try KeyBinding.admit(
                        header: reader.header, signer: reader.signature.publicKey, path: path, replica: replica,
                        trust: trusted)
                    let applier = try ChangeMerger(
                        replica: replica, header: reader.header, checkingOwnBundle: own,
                        learning: learning.merging(reader.header.learningBySender) { mailbox, bundle in
                            mailbox.merging(bundle) { _, signedInBundle in signedInBundle }
                        })
                    var applied = 0
                    try reader.forEachChange { change in
                        try applier.apply(change)
                        applied += 1
                        if applied % 10_000 == 0 { progress?(applied) }
                    }
                    return try applier.finish()
                }
            }
        } catch let error as ChangeLogError where own {
            throw copiedIdentity(path, replica: replica, error.description)
        } catch let error as ChangeLogError where error.kind == .schemaMismatch {
            result.outcome = .held(reason: error.description)
            if !dryRun { try HeldBundles(replica: replica).hold(reader, reason: error.description) }
            return result
        }
        if own {
            guard result.summary.changes == 0 && result.summary.conflicts == 0 else {
                throw copiedIdentity(path, replica: replica, "its changes differ from the ones held here")
            }
            result.outcome = .ownBundle
            return result
        }
        if !dryRun { try HeldBundles(replica: replica).release(digestOf: reader) }
        return result
    }

    private static func copiedIdentity(_ path: String, replica: Replica, _ detail: String) -> ChangeLogError {
        ChangeLogError(
            .identityClash,
            "\(path): the bundle comes from this replica's own knowledge ID \(replica.knowledgeID) but was not written by \(replica.path) (\(detail)): one database was copied instead of cloned; keep one copy and make others with `sqsync clone`"
        )
    }

    /// Imports every bundle a replica holds, in case a migration now lets them apply.
    public static func retryHeld(replica: Replica, trust: AllowedSigners) throws -> [ImportResult] {
        var results: [ImportResult] = []
        let heldBundles = HeldBundles(replica: replica)
        for held in try heldBundles.all() {
            do {
                let result = try importBundle(path: held.path, into: replica, trust: trust)
                if result.outcome == .applied { results.append(result) }
            } catch let error as BundleError {
                // Gone or no longer trusted: it can never apply, so it must not block the rest.
                try heldBundles.forget(path: held.path, because: error.description)
            } catch let error as ChangeLogError where [.retiredPeer, .identityClash, .staleReplica].contains(error.kind) {
                try heldBundles.forget(path: held.path, because: error.description)
            }
        }
        return results
    }
}

extension ChangeSetHeader {
    /// The sender's learning events by knowledge ID, as the applier takes them.
    var learningBySender: LearningEvent.ByWriter {
        guard !senderLearned.isEmpty else { return [:] }
        var events: [String: LearningEvent] = [:]
        for (site, event) in senderLearned { events[sites[site]] = event }
        return [sender: events]
    }
}
