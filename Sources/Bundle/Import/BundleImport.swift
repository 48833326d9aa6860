import ChangeLog
import FoundationEssentials
import Glibc
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
    /// this replica's own, or with one of a mailbox's `readersKeys` it was encrypted to.
    public static func importBundle(
        path: String, into replica: Replica, trust: AllowedSigners, decryptingWith key: SigningKey? = nil,
        readersKeys: [ReadersKey] = [], dryRun: Bool = false,
        learning: LearningEvent.ByWriter = [:]
    ) throws -> ImportResult {
        try replica.refuseWhileMigrating("import")
        // Read.
        let reader: BundleReader
        do {
            reader = try BundleReader(
                path: path, trust: try KeyBinding.trust(trust, replica: replica), decryptingWith: key, readersKeys: readersKeys,
                scratchDirectory: URL(fileURLWithPath: replica.path).deletingLastPathComponent().path)
        } catch var error as BundleError where error.kind == .corrupt || error.kind == .untrusted {
            error.concernsTheFileAlone = true
            throw error
        }
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
                    var statements: [AcknowledgementStatement] = []
                    // Bundle's tables, if this is the first bundle: a refused one leaves none.
                    try BundleTables.ready(replica)
                    // Admit the bundle.
                    let admission = try BundleAdmission(reader: reader, replica: replica, trust: trust)
                    switch try admission.admitBundle() {
                    case .ownBundle:
                        // Its own changes, as many as it made: each must be one it made so.
                        try replica.fold()
                        try BundleExchange.checkOwnChanges(in: reader, replica: replica)
                        result.outcome = .ownBundle
                        return
                    case .refuse(let error):
                        throw error
                    case .hold(let reason):
                        throw MergeHeld(reason)
                    case .accept(let admitted):
                        result.superseded = admitted.superseded
                        result.warnings += admitted.warnings
                        try admitted.record(into: replica, envelope: envelope, ledger: admission.ledger)
                        statements = admitted.statements
                    }
                    // One fold before any segment is admitted: every local write is numbered and
                    // has its entry, so admission and the merge see this replica as it is.
                    if !envelope.segments.isEmpty { try replica.fold() }
                    // Admit and merge each segment.
                    let knownBefore = try replica.knowledge()
                    try replica.mergingWithTriggersOff {
                        var keptCuts: [KeptCut] = []
                        result.summary = try mergeSegments(
                            admittedBy: admission, learning: learning, warnings: &result.warnings, keptCuts: &keptCuts)
                        // What this replica kept before and could not count may count now that it
                        // holds more.
                        if try replica.knowledge() != knownBefore {
                            result.summary.add(
                                try mergeKeptSegments(admittedBy: admission, learning: learning, warnings: &result.warnings))
                        }
                        try announceWhereFilesPart(
                            keptCuts, admittedBy: admission, learning: learning, warnings: &result.warnings)
                        result.warnings += admission.evidenceWarnings
                    }
                    try replica.checkNotOlder(thanPurgedBy: envelope.senderReport, path: path)
                    // What others hold counts as far as this replica can check it: now, after the merge.
                    try KeyBinding.recordAcknowledgements(statements, envelope: envelope, replica: replica)
                    if !result.superseded { try replica.recordSender(envelope.senderReport) }
                    try replica.observeClock(envelope.senderHLC)
                    try replica.removeRowsOutOfScope()
                }
            }
        } catch let held as MergeHeld {
            result.outcome = .held(held.reason)
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
    ///
    /// `keptCuts`: the cuts for a scope it newly kept to relay.
    private static func mergeSegments(
        admittedBy admission: BundleAdmission, learning: LearningEvent.ByWriter, warnings: inout [String],
        keptCuts: inout [KeptCut]
    ) throws -> ApplySummary {
        let reader = admission.reader, replica = admission.replica
        let envelope = reader.envelope
        let retired = try replica.retiredPeers()
        var relayOnly: [(entry: BundleEnvelope.SegmentEntry, changes: ChangeSetHeader, records: Int)] = []
        var summary = ApplySummary()
        summary.knowledgeAdvanced = true
        var applied = 0
        // The rows the segments merged so far declare: the one segment of most bundles says all.
        var declared = 0
        let step = "importing " + URL(fileURLWithPath: reader.path).lastPathComponent
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
                    do {
                        try segment.forEachChange { try check.check($0) }
                    } catch let error as ChangeLogError where error.kind == .identityClash {
                        let message = signedAsThisReplica(
                            replica: replica, "a change up to \(changes.last) made otherwise: \(error.description)")
                        try replica.recordSignedAsThisReplica(
                            last: changes.last, from: error.ownChangeClash ?? changes.base + 1, message: message)
                        summary.signedAsThisReplica.append(message)
                    }
                    advanced.insert(index)
                case .signedAsThisReplica(let message):
                    try replica.recordSignedAsThisReplica(
                        last: changes.last, from: try replica.knowledge()[replica.knowledgeID] + 1, message: message)
                    summary.signedAsThisReplica.append(message)
                    advanced.insert(index)
                case .relayOnly:
                    relayOnly.append((segment.entry, changes, segment.header.recordCount))
                    advanced.insert(index)
                case .hold(let reason):
                    throw MergeHeld(reason)
                case .refuse(let error):
                    throw error
                case .merge(let plan):
                    declared += segment.header.recordCount
                    let merged = try merge(
                        segment, by: plan, reader: reader, replica: replica, learning: learning
                    ) { count in
                        applied += count
                        if applied % Replica.progressInterval == 0, let progress = replica.progress {
                            progress(WorkProgress(step: step, done: applied, total: max(applied, declared), unit: "rows"))
                        }
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
            let outcome = try store.keep(
                origin: kept.changes.origin, base: kept.changes.base, last: kept.changes.last,
                createdHLC: kept.changes.createdHLC, records: kept.records, length: kept.entry.length, scope: kept.changes.scope,
                statements: kept.changes.adminStatements, namedOtherwise: numberedTwice(kept.changes.origin, replica: replica)
            ) { consumer in try reader.copySegment(kept.entry, to: consumer) }
            if outcome != .already {
                keptCuts.append(
                    KeptCut(
                        origin: kept.changes.origin, base: kept.changes.base, last: kept.changes.last,
                        scope: Scope(kept.changes.scope), replacingSameRange: outcome == .replacingSameRange))
            }
        }
        return summary
    }

    /// Merges one admitted segment by its plan (the merger's finish records what the merge
    /// implies), and keeps the segment to serve whoever lacks it (`reader` gives its bytes;
    /// nil for one kept already).
    private static func merge(
        _ segment: BundleReader.Segment, by plan: MergePlan, reader: BundleReader?, replica: Replica,
        learning: LearningEvent.ByWriter, anotherFileFrom: Int64? = nil, applied: (Int) -> Void
    ) throws -> ApplySummary {
        let changes = segment.header.changes
        let merger = try ChangeMerger(
            replica: replica, plan: plan,
            learning: learning.merging(changes.learningByOrigin) { mailbox, signed in
                mailbox.merging(signed) { _, signedByOrigin in signedByOrigin }
            })
        merger.wholeLivesOnly = anotherFileFrom != nil
        merger.anotherFileFrom = anotherFileFrom
        try segment.forEachChange { change in
            try merger.apply(change)
            applied(1)
        }
        let merged = try merger.finish()
        // Kept whether or not this replica could count it yet: a replica met later may lack it.
        if let reader {
            try SegmentStore(replica).keep(
                origin: changes.origin, base: changes.base, last: changes.last, createdHLC: changes.createdHLC,
                records: segment.header.recordCount, length: segment.entry.length, scope: changes.scope,
                statements: changes.adminStatements, namedOtherwise: numberedTwice(changes.origin, replica: replica)
            ) { consumer in try reader.copySegment(segment.entry, to: consumer) }
        }
        return merged
    }

    /// What a replica does on keeping a segment of `origin` that names other admin statements
    /// than a kept one covering a number in common (``SegmentStore/keep``): two files write
    /// under its identity, as when a thief sets a stolen file's numbers back. No change of
    /// either need carry a stamp that shows it (the origin's word has no rows, a scoped reader
    /// holds few of its rows), so this is where a replica that holds one file's numbers meets
    /// the other's. Noted, a replica with a scope gives that origin's kept segments to readers
    /// holding every row (``BundleExport/relayedSegments``), which judge them against the rows
    /// they replaced; one that holds every row announces the origin's writes again.
    private static func numberedTwice(_ origin: String, replica: Replica) -> (Int64) throws -> Void {
        { first in
            try replica.noteNumberedTwice(origin, at: first)
            try replica.announceWritesAgain(of: origin, from: first)
        }
    }

    /// Merges again the kept segments this replica could not count when they came (it lacked
    /// their origin's earlier changes, or a life they changed) and now may: of each origin, in
    /// order, those admission lets through (``BundleAdmission/mayMergeAgain(_:holding:)``);
    /// again while any counted. Read from the store and checked as when they came;
    /// one that no longer checks (its key retired, its line removed) or fails to merge is
    /// dropped with a warning, not let stop every later import.
    private static func mergeKeptSegments(
        admittedBy admission: BundleAdmission, learning: LearningEvent.ByWriter, warnings: inout [String]
    ) throws -> ApplySummary {
        let replica = admission.replica
        let store = try SegmentStore(replica)
        var summary = ApplySummary()
        // Read once and again only after a merge: most kept segments are already held, and the
        // store keeps one per origin, so reading it per segment made each import O(replicas²).
        var knowledge = try replica.knowledge()
        for _ in 0..<maxSegmentPasses {
            var advanced = false
            for (origin, kept) in try store.byOrigin().sorted(by: { $0.key < $1.key }) {
                for segment in kept.sorted(by: { ($0.base, $0.last) < ($1.base, $1.last) }) {
                    let held = knowledge[origin]
                    guard try admission.mayMergeAgain(segment, holding: held) else { continue }
                    do {
                        try replica.database.inTransaction {
                            summary.add(try mergeKept(segment, admittedBy: admission, learning: learning))
                        }
                    } catch let error as MergeHeld {
                        throw error
                    } catch {
                        try store.drop(segment)
                        warnings.append("\(replica.path): a kept segment of \(origin) (\(segment.base)-\(segment.last)) could not be merged again and was dropped: \(error)")
                        continue
                    }
                    knowledge = try replica.knowledge()
                    if knowledge[origin] > held { advanced = true }
                }
            }
            guard advanced else { break }
        }
        return summary
    }

    /// `anotherFileFrom`: the segment is a cut another file of its origin's signed, whose
    /// changes from that number on may differ from those held here (``announceWhereFilesPart``).
    private static func mergeKept(
        _ kept: SegmentStore.Stored, admittedBy admission: BundleAdmission, learning: LearningEvent.ByWriter,
        anotherFileFrom: Int64? = nil
    ) throws -> ApplySummary {
        try readKept(kept, admittedBy: admission) { segment in
            switch try admission.admitSegment(segment.header.changes, kept: true, anotherFilesCut: anotherFileFrom != nil) {
            case .merge(let plan):
                return try merge(
                    segment, by: plan, reader: nil, replica: admission.replica, learning: learning, anotherFileFrom: anotherFileFrom
                ) { _ in }
            case .hold(let reason):
                throw MergeHeld(reason)
            case .refuse(let error):
                throw error
            case .passOver, .ownCheck, .relayOnly, .signedAsThisReplica:
                return ApplySummary()
            }
        }
    }

    /// A kept segment, its origin's signature checked again, for `body` to read.
    private static func readKept<Result>(
        _ kept: SegmentStore.Stored, admittedBy admission: BundleAdmission, _ body: (BundleReader.Segment) throws -> Result
    ) throws -> Result {
        let replica = admission.replica
        // A scratch file that has no name: nothing is left behind however the process ends.
        let output = try HashingFileOutput(
            scratchFor: "\(replica.path) (a kept segment of \(kept.origin))",
            in: URL(fileURLWithPath: replica.path).deletingLastPathComponent().path)
        try SegmentStore(replica).read(kept) { try output.write($0) }
        try output.flush()
        let name = try replica.siteName(of: kept.origin)
        guard
            let segment = try BundleReader.keptSegment(
                in: output, origin: (kept.origin, name), base: kept.base, last: kept.last, length: kept.length,
                checkOrigin: { entry, signer in try admission.admitKeptSigner(origin: kept.origin, entry: entry, signer: signer) })
        else { throw BundleError(.untrusted, "its signer does not sign that range here any more") }
        return try body(segment)
    }

    /// A cut for a scope an import newly kept to relay.
    struct KeptCut {
        var origin: String
        var base: Int64
        var last: Int64
        var scope: Scope
        /// It took the place of an older kept cut of the same range and scope.
        var replacingSameRange: Bool
    }

    /// An origin whose two files' versions of a range are both kept here: one merged, one only
    /// relayed (a scoped reader's cut, kept in place of the other file's cut of the same range,
    /// which this replica's knowledge of the origin hides from any merge). Looked for when an
    /// import newly keeps a cut of an origin already found here to number two changes alike,
    /// or a cut that took the place of one of the same range whose stamps are at odds with
    /// what was merged here (``Replica/firstStampAtOdds(with:among:)``): only at a replica that
    /// holds every row. It reads every segment of the origin it keeps; from the lowest number
    /// in question (that one, or the lowest they put in question:
    /// ``OriginNumbering/firstNumberInQuestion(_:)``), which may lie below where a merge first
    /// met the two, it announces the origin's writes again
    /// (``Replica/announceWritesAgain(of:from:)``), and merges the cuts it kept within its
    /// knowledge as any state (what they carry is judged as when it comes) and announces what
    /// they wrote: what either file wrote reaches every reader, under this replica's name. A
    /// cut that fails to merge there for good is dropped, as ``mergeKeptSegments`` drops one.
    private static func announceWhereFilesPart(
        _ keptCuts: [KeptCut], admittedBy admission: BundleAdmission, learning: LearningEvent.ByWriter,
        warnings: inout [String]
    ) throws {
        let replica = admission.replica
        guard !keptCuts.isEmpty, try replica.holdsEveryRow() else { return }
        let forked = Set(try replica.originsNumberedTwice())
        let store = try SegmentStore(replica)
        let knowledge = try replica.knowledge()
        for origin in Set(keptCuts.map(\.origin)).sorted() {
            let kept = try store.segments(of: origin)
            var odds: Int64?
            if !forked.contains(origin) {
                let suspects = keptCuts.filter { $0.origin == origin && $0.replacingSameRange }
                let read = kept.filter { segment in
                    suspects.contains { $0.base == segment.base && $0.last == segment.last && $0.scope == Scope(segment.scope) }
                }
                guard !read.isEmpty,
                    let found = try replica.firstStampAtOdds(with: origin, among: try stamps(of: read, admittedBy: admission))
                else { continue }
                try replica.noteNumberedTwice(origin, at: found)
                odds = found
            }
            let inQuestion = OriginNumbering.firstNumberInQuestion(try stamps(of: kept, admittedBy: admission))
            guard let first = [odds, inQuestion].compactMap({ $0 }).min() else { continue }
            try replica.announceWritesAgain(of: origin, from: first)
            var wroteThrough: Int64?
            for cut in kept where cut.scope != nil && cut.last >= first && cut.last <= knowledge[origin] {
                do {
                    try replica.database.inTransaction {
                        let merged = try mergeKept(cut, admittedBy: admission, learning: learning, anotherFileFrom: first)
                        if merged.changes > 0 { wroteThrough = max(wroteThrough ?? 0, cut.last) }
                    }
                } catch is MergeHeld {
                    // It stays kept, to merge once what it waits for comes.
                } catch let error as SQLiteError where !error.isConstraint {
                    throw error
                } catch {
                    try store.drop(cut)
                    warnings.append(
                        "\(replica.path): a kept segment of \(origin) (\(cut.base)-\(cut.last)) could not be merged and was dropped: \(error)")
                }
            }
            if let wroteThrough { try replica.announceWritesAgain(of: origin, from: first, through: wroteThrough) }
        }
    }

    /// The stamps of the kept segments that still check (one that does not is
    /// ``mergeKeptSegments``'s to drop), each segment's read whole or not at all.
    private static func stamps(
        of segments: [SegmentStore.Stored], admittedBy admission: BundleAdmission
    ) throws -> [(seq: Int64, hlc: Int64)] {
        var stamps: [(seq: Int64, hlc: Int64)] = []
        for segment in segments {
            var read: [(seq: Int64, hlc: Int64)] = []
            do {
                try readKept(segment, admittedBy: admission) { kept in
                    try kept.forEachChange { change in
                        if let stamp = change.rowStamp { read.append((stamp.seq, stamp.hlc)) }
                        read += change.columns.map { ($0.stamp.seq, $0.stamp.hlc) }
                        read += change.counters.map { ($0.stamp.seq, $0.stamp.hlc) }
                    }
                }
            } catch let error as SQLiteError {
                throw error
            } catch {
                continue
            }
            stamps += read
        }
        return stamps
    }

    /// Passes over one bundle's segments; a bundle needs more only when a chain of rows, each
    /// changed by another replica, runs against the order its segments are written in.
    static let maxSegmentPasses = 8

    /// Imports every bundle a replica holds, in case what each waited for (a migration, a
    /// statement, a key) has come since.
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
