import ChangeLog
import Foundation
import SQLiteDatabase

/// An import in three stages (docs/ARCHITECTURE.md): read (``BundleReader`` verifies the
/// file and decodes it, deciding nothing about this replica), admit (``BundleAdmission``
/// says yes, no or not yet, to the bundle and to each segment, and writes nothing), merge
/// (a switch over the verdicts: ``ChangeMerger`` merges a segment by its ``MergePlan``).
extension BundleExchange {
    /// Verifies a bundle completely, then merges each origin's segment in one transaction.
    /// Nothing in the file is read before the sender's signature over its envelope checks;
    /// no segment before its origin's signature does. A bundle this replica cannot merge yet
    /// (``HoldReason``) is held (copied beside the database) instead of failing. A bundle of
    /// this replica's own knowledge ID, signed by its own key, is
    /// ``ImportResult/Outcome/ownBundle``, unless it claims changes this replica never made:
    /// another database writes under its ID. An encrypted bundle is decrypted with `key`,
    /// this replica's own.
    public static func importBundle(
        path: String, into replica: Replica, trust: AllowedSigners, decryptingWith key: SigningKey? = nil, dryRun: Bool = false,
        learning: LearningEvent.ByWriter = [:], progress: ((Int) -> Void)? = nil
    ) throws -> ImportResult {
        try replica.refuseWhileMigrating("import")
        // Read.
        let reader = try BundleReader(
            path: path, trust: try KeyBinding.trust(trust, replica: replica), decryptingWith: key,
            scratchDirectory: URL(fileURLWithPath: replica.path).deletingLastPathComponent().path)
        let envelope = reader.envelope
        var result = ImportResult(
            path: path, sender: envelope.sender.id, senderName: envelope.sender.name, signer: reader.principal ?? "",
            senderKnowledge: envelope.senderReport.knowledge, outcome: .applied, summary: ApplySummary())
        // Foreign keys stay unenforced while merging, so a bundle never gets stuck on one;
        // orphans are reported by `conflicts` and `doctor` instead.
        let enforcedForeignKeys = try replica.database.int64("PRAGMA foreign_keys") == 1
        if enforcedForeignKeys { try replica.database.execute("PRAGMA foreign_keys = OFF") }
        defer { if enforcedForeignKeys { try? replica.database.execute("PRAGMA foreign_keys = ON") } }
        do {
            try replica.database.withPageCache(ofAtLeast: Replica.bulkPageCacheKiB) {
                try replica.database.inTransaction(commit: !dryRun) {
                    // Bundle's tables, if this is the first bundle: a refused one leaves none.
                    try BundleTables.ready(replica)
                    // Admit the bundle.
                    let admission = try BundleAdmission(reader: reader, replica: replica, trust: trust)
                    switch try admission.admitBundle() {
                    case .ownBundle:
                        result.outcome = .ownBundle
                        return
                    case .refuse(let error):
                        throw error
                    case .accept(let admitted):
                        result.superseded = admitted.superseded
                        result.warnings += admitted.warnings
                        try admitted.record(into: replica, envelope: envelope, ledger: admission.ledger)
                    }
                    // One fold before any segment is admitted: every local write is numbered and
                    // has its entry, so admission and the merge see this replica as it is.
                    if !envelope.segments.isEmpty { try replica.fold() }
                    // Admit and merge each segment.
                    result.summary = try mergeSegments(
                        admittedBy: admission, learning: learning, warnings: &result.warnings, progress: progress)
                    if !result.superseded { try replica.recordSender(envelope.senderReport) }
                    try replica.observeClock(envelope.senderHLC)
                    try replica.removeRowsOutOfScope()
                }
            }
        } catch let held as MergeHeld {
            result.outcome = .held(reason: held.description)
            if !dryRun { try HeldBundles(replica: replica).hold(reader, reason: held.description) }
            return result
        }
        if !dryRun && result.outcome == .applied { try HeldBundles(replica: replica).release(digestOf: reader) }
        return result
    }

    /// Merges every segment admission lets through; one that met a row whose life began in
    /// another segment of the bundle is merged again once the others are, in at most
    /// ``maxSegmentPasses`` passes over the file (a segment still waiting then comes again in
    /// a later bundle, so a hostile order costs passes, not an unbounded number). A segment
    /// this replica holds already is merged all the same, as a state-based import would: it
    /// changes nothing, unless it holds a change that differs from the one held here under
    /// the same number, which only a copied database makes (refused).
    private static func mergeSegments(
        admittedBy admission: BundleAdmission, learning: LearningEvent.ByWriter, warnings: inout [String],
        progress: ((Int) -> Void)?
    ) throws -> ApplySummary {
        let reader = admission.reader, replica = admission.replica
        let envelope = reader.envelope
        let retired = try replica.retiredPeers()
        var relayOnly: [(entry: BundleEnvelope.SegmentEntry, changes: ChangeSetHeader, records: Int)] = []
        var summary = ApplySummary()
        summary.knowledgeAdvanced = true
        var applied = 0
        var waiting = Set(envelope.segments.indices)
        var passes = 0
        while !waiting.isEmpty && passes < maxSegmentPasses {
            passes += 1
            var advanced: Set<Int> = []
            var index = -1
            let known = try replica.knowledge()
            try reader.readSegments(checkOrigin: { entry, signer in
                index += 1
                guard waiting.contains(index) else { return false }
                switch try admission.admitSigner(of: entry, signer: signer, known: known, retired: retired) {
                case .read:
                    return true
                case .passOver:
                    advanced.insert(index)
                case .retired(let warning):
                    if let warning { warnings.append(warning) }
                    advanced.insert(index)
                case .refuse(let error):
                    throw error
                }
                return false
            }) { segment in
                // A first key the signer's check accepted is recorded before anything of it is used.
                try admission.ledger.write()
                let changes = segment.header.changes
                switch try admission.admitSegment(changes) {
                case .passOver:
                    advanced.insert(index)
                case .ownCheck:
                    let check = try OwnChangeCheck(replica: replica, header: changes, path: reader.path)
                    try segment.forEachChange { try check.check($0) }
                    advanced.insert(index)
                case .relayOnly:
                    relayOnly.append((segment.entry, changes, segment.header.recordCount))
                    advanced.insert(index)
                case .hold(let reason):
                    throw MergeHeld(reason)
                case .refuse(let error):
                    throw error
                case .merge(let plan, let claim):
                    let merged = try merge(
                        segment, by: plan, claim: claim, reader: reader, replica: replica, learning: learning
                    ) { count in
                        applied += count
                        if applied % 10_000 == 0 { progress?(applied) }
                    }
                    summary.add(merged)
                    if merged.knowledgeAdvanced { advanced.insert(index) }
                }
            }
            guard !advanced.isEmpty else { break }
            waiting.subtract(advanced)
        }
        if !waiting.isEmpty { summary.knowledgeAdvanced = false }
        // Never relays what it does not hold: a segment for a scope within this replica's own
        // is kept only once this replica holds its origin's changes through it.
        let knowledge = try replica.knowledge()
        let store = try SegmentStore(replica)
        for kept in relayOnly where knowledge[kept.changes.origin] >= kept.changes.last {
            guard try store.isNeeded(origin: kept.changes.origin, last: kept.changes.last, sender: envelope.sender.id) else { continue }
            try store.keep(
                origin: kept.changes.origin, base: kept.changes.base, last: kept.changes.last,
                createdHLC: kept.changes.createdHLC, records: kept.records, length: kept.entry.length, scope: kept.changes.scope
            ) { consumer in try reader.copySegment(kept.entry, to: consumer) }
        }
        return summary
    }

    /// Merges one admitted segment by its plan, then what the merge implies: new lives of rows
    /// whose label a concurrent life changed, the origin's admin claim, and the segment kept
    /// to relay while a peer still needs it.
    private static func merge(
        _ segment: BundleReader.Segment, by plan: MergePlan, claim: Int64?, reader: BundleReader, replica: Replica,
        learning: LearningEvent.ByWriter, applied: (Int) -> Void
    ) throws -> ApplySummary {
        let changes = segment.header.changes
        let merger = try ChangeMerger(
            replica: replica, plan: plan,
            learning: learning.merging(changes.learningByOrigin) { mailbox, signed in
                mailbox.merging(signed) { _, signedByOrigin in signedByOrigin }
            })
        try segment.forEachChange { change in
            try merger.apply(change)
            applied(1)
        }
        let merged = try merger.finish()
        try replica.startNewLives(of: merger.relabelled)
        if merged.knowledgeAdvanced && changes.last > (claim ?? 0) {
            try replica.recordAdminClaim(of: changes.origin, last: changes.last, ids: changes.adminStatements)
        }
        if merged.knowledgeAdvanced {
            let store = try SegmentStore(replica)
            if try store.isNeeded(origin: changes.origin, last: changes.last, sender: reader.envelope.sender.id) {
                try store.keep(
                    origin: changes.origin, base: changes.base, last: changes.last, createdHLC: changes.createdHLC,
                    records: segment.header.recordCount, length: segment.entry.length, scope: changes.scope
                ) { consumer in try reader.copySegment(segment.entry, to: consumer) }
            }
        }
        return merged
    }

    /// Passes over one bundle's segments; a bundle needs more only when a chain of rows, each
    /// changed by another replica, runs against the order its segments are written in.
    static let maxSegmentPasses = 8

    /// Imports every bundle a replica holds, in case a migration now lets them apply.
    public static func retryHeld(replica: Replica, trust: AllowedSigners) throws -> [ImportResult] {
        var results: [ImportResult] = []
        let heldBundles = try HeldBundles(replica: replica)
        for held in try heldBundles.all() {
            do {
                let result = try importBundle(path: held.path, into: replica, trust: trust)
                if !isHeld(result) { results.append(result) }
            } catch let error as BundleError {
                // Gone or no longer trusted: it can never apply, so it must not block the rest.
                try heldBundles.forget(path: held.path, because: error.description)
            } catch let error as ChangeLogError where BundleAdmission.refusals.contains(error.kind) {
                try heldBundles.forget(path: held.path, because: error.description)
            }
        }
        return results
    }

    /// The bundles waiting beside the database, with why.
    public static func heldBundles(of replica: Replica) throws -> [(path: String, reason: String)] {
        try HeldBundles(replica: replica).all()
    }

    private static func isHeld(_ result: ImportResult) -> Bool {
        if case .held = result.outcome { return true }
        return false
    }
}

extension ChangeSetHeader {
    /// The origin's learning events, as the merger takes them.
    var learningByOrigin: LearningEvent.ByWriter {
        learned.isEmpty ? [:] : [origin: learned]
    }
}
