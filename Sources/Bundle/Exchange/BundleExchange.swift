import ChangeLog
import Foundation
import SQLiteDatabase

/// What an export wrote.
public struct ExportResult: Sendable {
    public var path: String
    public var envelope: BundleEnvelope
    /// Row records in the bundle, of every origin.
    public var rows: Int
    public var bytes: Int
}

/// What an import did with one bundle.
public struct ImportResult: Sendable {
    public enum Outcome: Sendable, Equatable {
        case applied
        /// Verified, but waiting for a schema migration; kept beside the database.
        case held(reason: String)
        /// Written by this very replica: nothing in it is new here.
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
    /// What was ignored on the way, one line each.
    public var warnings: [String] = []
    /// Older than a bundle already taken from the same sender (a replayed file): only its
    /// signed changes were merged, none of them new unless a relay missed them.
    public var superseded = false
}

/// Export and import of whole bundles: the glue between a replica and the file format.
public enum BundleExchange {
    /// Writes one signed bundle with what a receiver that holds `base` lacks: this replica's
    /// own changes after `base`, signed as their origin, and the segments of other replicas it
    /// keeps for relaying beyond `base`. `destination` is a file path, or a folder when
    /// `intoDirectory` is true; then the file is named after the sender and its sequence
    /// range (docs/BUNDLE_FORMAT.md). `readers`: replicas that read the mailbox the bundle
    /// goes to, which leave their own changes and statements there: they are not relayed.
    /// A known `receiver` (knowledge ID) is spared its own statement.
    public static func export(
        replica: Replica, since base: Knowledge, key: SigningKey, to destination: String, intoDirectory: Bool,
        nameSuffix: String? = nil, receiver: String? = nil, readers: Set<String> = [], encryptTo recipients: [SSHPublicKey] = [],
        scope: [String]? = nil, progress: ((Int) -> Void)? = nil
    ) throws -> ExportResult {
        try replica.refuseWhileMigrating("export")
        try KeyBinding.prepareToSign(replica: replica, key: key)
        let me = replica.knowledgeID
        var leaving = readers.subtracting([me])
        if let receiver { leaving.insert(receiver) }
        let scope = scope.map { Array(Set($0)).sorted() }
        let adminStatements = try replica.adminStatements()
        let rules = AdminRules(acts: adminStatements.map(\.act))
        let ownScope = rules.scope(of: me)
        let epochs = try replica.adminEpochs()
        return try ChangeExporter.snapshot(of: replica, ownChangesAfter: base[me]) { exporter in
            let header = exporter.header
            let sites = exporter.sites
            let path = intoDirectory ? destination + "/" + fileName(sender: me, base: header.base, last: header.last, suffix: nameSuffix) : destination
            let writer = try BundleWriter(
                destination: path, encryptTo: recipients,
                scratchDirectory: URL(fileURLWithPath: replica.path).deletingLastPathComponent().path)
            if header.last > header.base {
                let parts = ownSegments(
                    after: header.base, through: header.last, epochs: epochs, scope: scope, knownScopes: rules.distinctScopes)
                if parts.count == 1 && parts[0].scope == nil {
                    var whole = header
                    whole.adminStatements = parts[0].statements
                    try writer.writeSegment(whole, site: 0, key: key, progress: progress) { emit in try exporter.forEachChange(emit) }
                } else {
                    for part in parts {
                        let partExporter = try exporter.part(after: part.after, through: part.through, scope: part.scope)
                        var partHeader = partExporter.header
                        partHeader.adminStatements = part.statements
                        try writer.writeSegment(partHeader, site: 0, key: key, progress: progress) { emit in
                            try partExporter.forEachChange(emit)
                        }
                    }
                }
            }
            var origins = [me]
            let store = SegmentStore(replica)
            var relayed: [(site: Int, segment: SegmentStore.Stored)] = []
            // A replica relays only to a reader whose scope lies within its own, and only the
            // segments cut for that scope (or for one within it, which the reader relays on).
            let relays = scope.map { wanted in ownScope.map { Set(wanted).isSubset(of: $0) } ?? true } ?? (ownScope == nil)
            for (index, site) in sites.enumerated()
            where relays && index > 0 && !site.retired && !leaving.contains(site.knowledgeID) {
                for segment in try store.segments(of: site.knowledgeID, after: min(base[site.knowledgeID], site.known))
                where segment.scope == scope || (scope != nil && segment.scope.map { Set($0).isStrictSubset(of: Set(scope!)) } == true) {
                    relayed.append((index, segment))
                }
            }
            // Oldest first: a change set comes after those its origin had seen when it wrote it.
            for (site, segment) in relayed.sorted(by: { $0.segment.createdHLC < $1.segment.createdHLC }) {
                try writer.copySegment(
                    site: site, base: segment.base, last: segment.last, records: segment.records, length: segment.length
                ) {
                    try store.read(segment, to: $0)
                }
                origins.append(segment.origin)
            }
            let statements = Self.withinBudget(
                try KeyBinding.carriedStatements(of: replica, except: leaving), sites: sites, carriedKeys: Set(origins))
            let keys = try KeyBinding.carriedKeys(of: replica, for: Array(Set(origins + statements.map(\.replica))).sorted())
            let index = Dictionary(uniqueKeysWithValues: sites.enumerated().map { ($0.element.knowledgeID, $0.offset) })
            var envelope = BundleEnvelope(
                bodyLength: 0, bodyDigest: [], createdAt: ClockBound.now,
                sites: sites.map {
                    .init(id: $0.knowledgeID, name: $0.name, knowledge: $0.known, base: min(base[$0.knowledgeID], $0.known),
                          forgotten: $0.forgotten)
                },
                senderSeq: header.last, senderHLC: header.createdHLC, schemaVersion: header.schemaVersion)
            envelope.identities = keys.identities.compactMap { id, key in index[id].map { .init(site: $0, key: key) } }
            envelope.moves = keys.moves.filter { index[$0.replica] != nil }
            envelope.acknowledgements = statements.filter { statement in
                statement.knowledge.seqs.keys.allSatisfy { index[$0] != nil } && index[statement.replica] != nil
            }
            envelope.adminStatements = adminStatements.map(\.signed)
            let (bytes, finished) = try writer.finish(envelope: envelope, signingKey: key)
            return ExportResult(path: path, envelope: finished, rows: writer.recordCount, bytes: bytes)
        }
    }

    /// The segments of this replica's own changes after `base` through `last`: one per admin
    /// epoch (the statements its changes were made under), and per scope: the reader's, and
    /// each known scope within it (every known scope, for a reader without one), which the
    /// reader keeps to relay (docs/SCOPES.md).
    static func ownSegments(
        after base: Int64, through last: Int64, epochs: [(afterSeq: Int64, ids: [[UInt8]])], scope: [String]?,
        knownScopes: [[String]]
    ) -> [(after: Int64, through: Int64, statements: [[UInt8]], scope: [String]?)] {
        func statements(from seq: Int64) -> [[UInt8]] { epochs.last { $0.afterSeq < seq }?.ids ?? [] }
        var bounds = [base]
        for epoch in epochs where epoch.afterSeq > base && epoch.afterSeq < last { bounds.append(epoch.afterSeq) }
        bounds.append(last)
        var scopes: [[String]?] = [scope]
        if let scope {
            scopes += knownScopes.filter { Set($0).isStrictSubset(of: Set(scope)) }.map { $0 }
        } else {
            scopes += knownScopes.map { $0 }
        }
        var parts: [(after: Int64, through: Int64, statements: [[UInt8]], scope: [String]?)] = []
        for (start, end) in zip(bounds, bounds.dropFirst()) where end > start {
            for cut in scopes { parts.append((start, end, statements(from: start + 1), cut)) }
        }
        return parts
    }

    /// Bytes of statements and their keys an envelope may carry per replica it lists (and
    /// at least `statementBytesAtLeast`): what a bundle carries beyond its changes stays
    /// O(replicas), not O(replicas²) (docs/KEYS.md).
    static let statementBytesPerSite = 56
    static let statementBytesAtLeast = 4096

    /// The statements that fit the budget, those closest to the envelope's knowledge (the
    /// cheapest to encode, and the freshest) first. One left out only waits for a later
    /// bundle, or its replica's own word: purges wait longer, never less.
    private static func withinBudget(
        _ statements: [AcknowledgementStatement], sites: [SiteSummary], carriedKeys: Set<String>
    ) -> [AcknowledgementStatement] {
        var budget = max(statementBytesPerSite * sites.count, statementBytesAtLeast)
        let costed = statements.map { statement in
            let differences = sites.filter { statement.knowledge[$0.knowledgeID] != $0.known }.count
            return (statement, 72 + 6 * differences + (carriedKeys.contains(statement.replica) ? 0 : 33))
        }
        var kept: [AcknowledgementStatement] = []
        let most = BundleLimits.maxStatementEntries / max(sites.count, 1)
        for (statement, cost) in costed.sorted(by: { $0.1 < $1.1 }) where cost <= budget && kept.count < most {
            kept.append(statement)
            budget -= cost
        }
        return kept.sorted { $0.replica < $1.replica }
    }

    /// True when an export since `base` would carry changes: this replica's own after it, or
    /// relayed ones of a replica other than those in `except` (which speak for themselves).
    public static func hasChanges(of replica: Replica, since base: Knowledge, except: Set<String>) throws -> Bool {
        let knowledge = try replica.knowledge()
        if knowledge[replica.knowledgeID] > base[replica.knowledgeID] { return true }
        let store = SegmentStore(replica)
        for (id, seq) in knowledge.seqs where id != replica.knowledgeID && !except.contains(id) && seq > base[id] {
            if !(try store.segments(of: id, after: base[id]).isEmpty) { return true }
        }
        return false
    }

    /// `<sender>_<first>-<last>_<suffix>.sqsb`: valid on FAT32 and exFAT. `first` is the first
    /// of the sender's own changes the bundle may carry and `last` the sender's own sequence
    /// number when it wrote it, so a bundle with none of its own changes reads `6-5`: a name
    /// never claims a change its sender had not made. The suffix is random unless given, so
    /// two exports never collide.
    public static func fileName(sender: String, base: Int64, last: Int64, suffix: String? = nil) -> String {
        let suffix = suffix ?? String(format: "%08x", UInt32.random(in: 0...UInt32.max))
        return "\(sender)_\(base + 1)-\(last)_\(suffix).sqsb"
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

    /// Verifies a bundle completely, then merges each origin's segment in one transaction.
    /// Nothing in the file is read before the sender's signature over its envelope checks;
    /// no segment before its origin's signature does. A schema the replica lacks holds the
    /// bundle (copied beside the database) instead of failing. A bundle of this replica's
    /// own knowledge ID, signed by its own key, is ``ImportResult/Outcome/ownBundle``, unless
    /// it claims changes this replica never made: another database writes under its ID. An
    /// encrypted bundle is decrypted with `key`, this replica's own.
    public static func importBundle(
        path: String, into replica: Replica, trust: AllowedSigners, decryptingWith key: SigningKey? = nil, dryRun: Bool = false,
        learning: LearningEvent.ByWriter = [:], progress: ((Int) -> Void)? = nil
    ) throws -> ImportResult {
        try replica.refuseWhileMigrating("import")
        let trusted = try KeyBinding.trust(trust, replica: replica)
        let reader = try BundleReader(
            path: path, trust: trusted, decryptingWith: key,
            scratchDirectory: URL(fileURLWithPath: replica.path).deletingLastPathComponent().path)
        let envelope = reader.envelope
        let sender = envelope.sender
        let signer = reader.signature.publicKey
        var result = ImportResult(
            path: path, sender: sender.id, senderName: sender.name, signer: reader.principal ?? "",
            senderKnowledge: envelope.senderReport.knowledge, outcome: .applied, summary: ApplySummary())
        if sender.id == replica.knowledgeID {
            try checkOwnBundle(envelope, signer: signer, path: path, replica: replica)
            result.outcome = .ownBundle
            return result
        }
        if let ahead = ClockBound.excess(of: envelope.senderHLC) {
            throw clockAhead(path, who: KeyBinding.label(sender.name, sender.id), by: ahead)
        }
        // Foreign keys stay unenforced while merging, so a bundle never gets stuck on one;
        // orphans are reported by `conflicts` and `doctor` instead.
        let enforcedForeignKeys = try replica.database.int64("PRAGMA foreign_keys") == 1
        if enforcedForeignKeys { try replica.database.execute("PRAGMA foreign_keys = OFF") }
        defer { if enforcedForeignKeys { try? replica.database.execute("PRAGMA foreign_keys = ON") } }
        do {
            try replica.database.withPageCache(ofAtLeast: Replica.bulkPageCacheKiB) {
                try replica.database.inTransaction(commit: !dryRun) {
                    // Who signed comes first: what the sender says of itself counts only once
                    // its own key has said it.
                    try KeyBinding.admitKeys(envelope, path: path, replica: replica)
                    try KeyBinding.checkSender(
                        envelope, signer: signer, principal: reader.principal, path: path, replica: replica)
                    // Keys moved to are trusted as the keys they came from are, but only through
                    // moves of the replica the old key belongs to (admitted just now or before).
                    let movedTrust = try KeyBinding.trust(trust, replica: replica)
                    guard movedTrust.principal(for: signer, namespace: BundleCodec.signatureNamespace) != nil else {
                        throw BundleError(
                            .untrusted,
                            "\(path): signed by key \(signer.fingerprint), which only a key move that is not its replica's leads to; refusing it"
                        )
                    }
                    result.superseded = try replica.admitSender(envelope.senderReport, path: path) == .superseded
                    // Every replica the sender knows is one this replica now knows: a segment
                    // one of them lacks is kept to relay to it. (A trusted key listing replicas
                    // that never answer holds purges back, as its own replica could by never
                    // acknowledging; `peers retire` ends both.)
                    for site in envelope.sites { _ = try replica.siteNumber(for: site.id, name: site.name) }
                    result.warnings += try KeyBinding.admitAcknowledgements(
                        envelope, path: path, replica: replica, trust: movedTrust)
                    // Admin statements count only signed by an admin key; one that is not
                    // refuses the bundle before any change in it is read.
                    try replica.addAdminStatements(
                        try SignedAdminStatement.admitted(
                            envelope.adminStatements, trust: movedTrust, path: path,
                            held: Set(try replica.adminStatements().map(\.id))))
                    result.summary = try mergeSegments(
                        of: reader, into: replica, trust: movedTrust, learning: learning, warnings: &result.warnings,
                        progress: progress)
                    if !result.superseded { try replica.recordSender(envelope.senderReport) }
                    try replica.observeClock(envelope.senderHLC)
                    try replica.removeRowsOutOfScope()
                }
            }
        } catch let error as ChangeLogError where error.kind == .schemaMismatch {
            result.outcome = .held(reason: error.description)
            if !dryRun { try HeldBundles(replica: replica).hold(reader, reason: error.description) }
            return result
        }
        if !dryRun && result.outcome == .applied { try HeldBundles(replica: replica).release(digestOf: reader) }
        return result
    }

    /// Merges every segment of another replica's; one that met a row whose life began in
    /// another segment of the bundle is merged again once the others are, in at most
    /// ``maxSegmentPasses`` passes over the file (a segment still waiting then comes again in
    /// a later bundle, so a hostile order costs passes, not an unbounded number). A segment
    /// this replica holds already is merged all the same, as a state-based import would: it
    /// changes nothing, unless it holds a change that differs from the one held here under
    /// the same number, which only a copied database makes (refused). Segments of retired
    /// replicas are passed over unread.
    private static func mergeSegments(
        of reader: BundleReader, into replica: Replica, trust: AllowedSigners, learning: LearningEvent.ByWriter,
        warnings: inout [String], progress: ((Int) -> Void)?
    ) throws -> ApplySummary {
        let envelope = reader.envelope
        let path = reader.path
        let me = replica.knowledgeID
        let retired = try replica.retiredPeers()
        let ownScope = try replica.ownScope()
        var relayOnly: [(entry: BundleEnvelope.SegmentEntry, changes: ChangeSetHeader, records: Int)] = []
        var summary = ApplySummary()
        summary.knowledgeAdvanced = true
        var applied = 0
        var waiting = Set(envelope.segments.indices)
        for (index, entry) in envelope.segments.enumerated() {
            let origin = envelope.sites[entry.site]
            guard let retiredAt = retired[origin.id] else { continue }
            waiting.remove(index)
            if entry.last > retiredAt {
                warnings.append(
                    "\(path): the changes of \(KeyBinding.label(origin.name, origin.id)) after \(retiredAt) come after it was retired here; refusing them, whoever relays them"
                )
            }
        }
        var passes = 0
        while !waiting.isEmpty && passes < maxSegmentPasses {
            passes += 1
            var advanced: Set<Int> = []
            var index = -1
            let known = try replica.knowledge()
            try reader.readSegments(checkOrigin: { entry, signer in
                index += 1
                guard waiting.contains(index) else { return false }
                if try KeyBinding.checkOrigin(
                    entry, signer: signer, envelope: envelope, path: path, replica: replica, trust: trust, known: known)
                {
                    return true
                }
                advanced.insert(index)
                return false
            }) { segment in
                let changes = segment.header.changes
                if changes.origin == me {
                    try checkOwnSegment(changes, path: path, replica: replica)
                    let check = try OwnChangeCheck(replica: replica, header: changes, path: path)
                    try segment.forEachChange { try check.check($0) }
                    advanced.insert(index)
                    return
                }
                if let ahead = ClockBound.excess(of: changes.createdHLC) {
                    throw clockAhead(path, who: changes.originLabel, by: ahead)
                }
                // A segment cut for another scope is not this replica's to merge; one cut for a
                // scope within its own is kept to relay (docs/SCOPES.md).
                if changes.scope != ownScope {
                    if let cut = changes.scope, ownScope.map({ Set(cut).isStrictSubset(of: Set($0)) }) ?? true {
                        relayOnly.append((segment.entry, changes, segment.header.recordCount))
                    }
                    advanced.insert(index)
                    return
                }
                // Statements only accumulate: an origin's later changes name every statement its
                // earlier ones did, unless its key is in other hands, shedding grants.
                let claim = try replica.adminClaim(of: changes.origin)
                // (An honest segment reaching past the claim lies in the claim's epoch or a later one:
                // epochs never shrink, and no segment spans two.)
                if let claim, changes.last > claim.last, !Set(claim.ids).isSubset(of: Set(changes.adminStatements)) {
                    throw BundleError(
                        .untrusted,
                        "\(path): the changes of \(changes.originLabel) after \(claim.last) name fewer admin statements than its changes up to \(claim.last) did, as a key shedding its grants would; refusing the bundle"
                    )
                }
                guard let rules = try replica.adminRules(namedBy: changes.adminStatements) else {
                    throw ChangeLogError(
                        .schemaMismatch,
                        "\(path): the changes of \(changes.originLabel) were made under admin statements this replica does not hold yet; held until they arrive")
                }
                let merger = try ChangeMerger(
                    replica: replica, header: changes,
                    learning: learning.merging(changes.learningByOrigin) { mailbox, signed in
                        mailbox.merging(signed) { _, signedByOrigin in signedByOrigin }
                    })
                if rules.isRestricted(changes.origin) {
                    merger.authorization = Authorization(rules: rules, origin: changes.origin, receiverHasScope: ownScope != nil)
                }
                try segment.forEachChange { change in
                    try merger.apply(change)
                    applied += 1
                    if applied % 10_000 == 0 { progress?(applied) }
                }
                let merged = try merger.finish()
                try replica.startNewLives(of: merger.relabelled)
                if merged.knowledgeAdvanced && changes.last > (claim?.last ?? 0) {
                    try replica.recordAdminClaim(of: changes.origin, last: changes.last, ids: changes.adminStatements)
                }
                summary.add(merged)
                if merged.knowledgeAdvanced {
                    advanced.insert(index)
                    let store = SegmentStore(replica)
                    if try store.isNeeded(origin: changes.origin, last: changes.last, sender: envelope.sender.id) {
                        try store.keep(
                            origin: changes.origin, base: changes.base, last: changes.last, createdHLC: changes.createdHLC,
                            records: segment.header.recordCount, length: segment.entry.length, scope: changes.scope
                        ) { consumer in try reader.copySegment(segment.entry, to: consumer) }
                    }
                }
            }
            guard !advanced.isEmpty else { break }
            waiting.subtract(advanced)
        }
        if !waiting.isEmpty { summary.knowledgeAdvanced = false }
        // Never relays what it does not hold: a segment for a scope within this replica's own
        // is kept only once this replica holds its origin's changes through it.
        let knowledge = try replica.knowledge()
        let store = SegmentStore(replica)
        for kept in relayOnly where knowledge[kept.changes.origin] >= kept.changes.last {
            guard try store.isNeeded(origin: kept.changes.origin, last: kept.changes.last, sender: envelope.sender.id) else { continue }
            try store.keep(
                origin: kept.changes.origin, base: kept.changes.base, last: kept.changes.last,
                createdHLC: kept.changes.createdHLC, records: kept.records, length: kept.entry.length, scope: kept.changes.scope
            ) { consumer in try reader.copySegment(kept.entry, to: consumer) }
        }
        return summary
    }

    /// Passes over one bundle's segments; a bundle needs more only when a chain of rows, each
    /// changed by another replica, runs against the order its segments are written in.
    static let maxSegmentPasses = 8

    /// A bundle under this replica's own knowledge ID must be signed by its own key and claim
    /// no change it never made: otherwise another database writes under its ID with its key.
    /// One signed by another key was planted. A replica that never signed anything wrote no
    /// bundle: one under its ID comes from a copy of it.
    private static func checkOwnBundle(_ envelope: BundleEnvelope, signer: SSHPublicKey, path: String, replica: Replica) throws {
        let me = replica.knowledgeID
        let own = try replica.knowledge()[me]
        guard let ownKey = try KeyPins(replica).currentKey(of: me) else {
            if ReplicaIdentity.isKeyBound(me) && !ReplicaIdentity.isBound(me, to: signer) { throw planted(path, me, signer) }
            throw copiedIdentity(path, replica: replica, "this replica has never signed a bundle")
        }
        guard ownKey == signer else { throw planted(path, me, signer) }
        if envelope.senderSeq > own {
            throw copiedIdentity(path, replica: replica, "it carries changes up to \(envelope.senderSeq); this replica made \(own)")
        }
    }

    private static func planted(_ path: String, _ me: String, _ signer: SSHPublicKey) -> BundleError {
        BundleError(
            .untrusted,
            "\(path): the bundle claims to come from this replica (\(me)) but is signed by key \(signer.fingerprint), not this replica's; refusing it"
        )
    }

    /// A segment of this replica's own changes, relayed back: signed by one of its keys
    /// (checked), it may claim no change beyond what this replica made, and each change in
    /// it must be one this replica made (``OwnChangeCheck``).
    private static func checkOwnSegment(_ changes: ChangeSetHeader, path: String, replica: Replica) throws {
        if changes.last > (try replica.knowledge()[replica.knowledgeID]) {
            throw copiedIdentity(path, replica: replica, "its own signed changes go up to \(changes.last)")
        }
    }

    private static func copiedIdentity(_ path: String, replica: Replica, _ detail: String) -> ChangeLogError {
        ChangeLogError(
            .identityClash,
            "\(path): written by another copy of this database, knowledge ID \(replica.knowledgeID) (\(detail)); keep one copy and make the others with `sqsync clone`"
        )
    }

    static func clockAhead(_ path: String, who: String, by milliseconds: Int64) -> BundleError {
        BundleError(
            .untrusted,
            "\(path): the changes of \(who) are stamped \(ClockBound.describe(milliseconds)) ahead of this machine's clock, more than the \(ClockBound.describe(ClockBound.milliseconds)) allowed (\(ClockBound.environmentVariable)); refusing the bundle"
        )
    }

    /// Imports every bundle a replica holds, in case a migration now lets them apply.
    public static func retryHeld(replica: Replica, trust: AllowedSigners) throws -> [ImportResult] {
        var results: [ImportResult] = []
        let heldBundles = HeldBundles(replica: replica)
        for held in try heldBundles.all() {
            do {
                let result = try importBundle(path: held.path, into: replica, trust: trust)
                if result.outcome != .held(reason: "") && !isHeld(result) { results.append(result) }
            } catch let error as BundleError {
                // Gone or no longer trusted: it can never apply, so it must not block the rest.
                try heldBundles.forget(path: held.path, because: error.description)
            } catch let error as ChangeLogError where [.retiredPeer, .identityClash, .staleReplica].contains(error.kind) {
                try heldBundles.forget(path: held.path, because: error.description)
            }
        }
        return results
    }

    /// The bundles waiting for a schema migration, with why.
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
