import ChangeLog
import FoundationEssentials
import Glibc
import SQLiteDatabase

extension BundleExchange {
    /// Writes one signed bundle with what a receiver that holds `base` lacks: this replica's
    /// own changes after `base`, signed as their origin, and the segments of other replicas it
    /// keeps for relaying beyond `base`. `destination` is a file path, or a folder when
    /// `intoDirectory` is true; then the file is named after the sender and its sequence
    /// range (docs/BUNDLE_FORMAT.md). `readers`: replicas that read the mailbox the bundle
    /// goes to, which leave their own changes and statements there: they are not relayed.
    /// A known `receiver` (knowledge ID) is spared its own statement. `readingHere`: every
    /// reader of the mailbox the bundle goes to; each gets a bundle cut for its own scope there,
    /// so no relay needs to carry that scope's cuts for it (``laggingCuts(of:below:except:)``).
    ///
    /// Unless `checkpoints` is false (`export --since`, which sends what it is asked), a
    /// receiver behind this replica's latest checkpoint, or any receiver once a new one is due,
    /// gets this replica's own changes from its first (``ChangeLog/Checkpoints``).
    public static func export(
        replica: Replica, since base: Knowledge, key: SigningKey, to destination: String, intoDirectory: Bool,
        nameSuffix: String? = nil, receiver: String? = nil, readers: Set<String> = [], encryptTo recipients: [SSHPublicKey] = [],
        readersKey: ReadersKey? = nil, scope: [String]? = nil, checkpoints: Bool = true, readingHere: Set<String> = []
    ) throws -> ExportResult {
        try BundleTables.ready(replica)
        try replica.refuseWhileMigrating("export")
        try replica.refuseWithUncapturedColumns("export")
        try replica.refuseWhileCopied("export")
        try KeyBinding.prepareToSign(replica: replica, key: key)
        let me = replica.knowledgeID
        var leaving = readers.subtracting([me])
        if let receiver { leaving.insert(receiver) }
        let scope = scope.map { Array(Set($0)).sorted() }
        let lagging = try laggingCuts(of: replica, below: base, except: readingHere)
        let ownLagging = lagging[me] ?? [:]
        let valueCap = BundleLimits.maxValueBytes
        try replica.releaseWithheldValues(cap: valueCap)
        let (result, checkpoint) = try ChangeExporter.snapshot(of: replica, ownChangesAfter: base[me], valueCap: valueCap) {
            exporter in
            // Read within the snapshot, as the changes are: a statement that arrives meanwhile
            // begins an epoch after the last change read, so no segment names statements its
            // changes were not made under (two segments covering one number name the same).
            let adminStatements = try replica.adminStatements()
            let rules = AdminRules(acts: adminStatements.map(\.act))
            let ownScope = rules.scope(of: me)
            let epochs = try replica.adminEpochs()
            let header = exporter.header
            let sites = exporter.sites
            let own =
                checkpoints
                ? try Checkpoints.ownBase(forReceiverHolding: header.base, last: header.last, of: replica)
                : (base: header.base, declares: false)
            let path = intoDirectory ? destination + "/" + fileName(sender: me, base: own.base, last: header.last, suffix: nameSuffix) : destination
            let writer = try BundleWriter(
                destination: path, encryptTo: recipients, readersKey: readersKey,
                scratchDirectory: URL(fileURLWithPath: replica.path).deletingLastPathComponent().path)
            // Own changes to send bound the rows written (several changes of one row send one).
            let ownChanges = Int(header.last - own.base)
            let progress = replica.progress.map { report in
                { (written: Int) in report(WorkProgress(step: "exporting", done: written, total: max(written, ownChanges), unit: "rows")) }
            }
            if header.last > min(own.base, ownLagging.values.min() ?? own.base) {
                let parts = ownSegments(
                    after: own.base, through: header.last, epochs: epochs, scope: scope, knownScopes: rules.distinctScopes,
                    lagging: ownLagging)
                if parts.count == 1 && parts[0].scope == nil && own.base == header.base {
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
            let ownRecords = writer.recordCount
            var origins = [me]
            let store = try SegmentStore(replica)
            let siteIndex = Dictionary(uniqueKeysWithValues: sites.enumerated().map { ($0.element.knowledgeID, $0.offset) })
            let retired = Set(sites.filter(\.retired).map(\.knowledgeID))
            for segment in try relayedSegments(
                from: store, pins: try KeyPins(replica), since: base, leaving: leaving.union(retired).union([me]), scope: scope,
                ownScope: ownScope, lagging: lagging, forked: try replica.originsNumberedTwiceFrom())
            {
                guard let site = siteIndex[segment.origin] else { continue }
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
            envelope.identities = keys.identities.compactMap { identity in
                index[identity.id].map { .init(site: $0, key: identity.key, birth: identity.birth) }
            }
            envelope.moves = keys.moves.filter { index[$0.replica] != nil }
            envelope.acknowledgements = statements.filter { statement in
                statement.knowledge.seqs.keys.allSatisfy { index[$0] != nil } && index[statement.replica] != nil
            }
            envelope.adminStatements = adminStatements.map(\.signed)
            let (bytes, finished) = try writer.finish(envelope: envelope, signingKey: key)
            return (
                ExportResult(path: path, envelope: finished, rows: writer.recordCount, bytes: bytes),
                own.declares ? (seq: header.last, records: ownRecords) : nil
            )
        }
        if let checkpoint { try replica.recordCheckpoint(through: checkpoint.seq, records: checkpoint.records) }
        var withWithheld = result
        withWithheld.withheld = try replica.withheldValues(cap: valueCap)
        return withWithheld
    }

    /// The kept segments a bundle carries for a receiver that holds `base`: of every origin
    /// but those `leaving` (this replica, the receiver, a mailbox's readers, which leave their
    /// own there, and retired replicas), the fewest that carry what the receiver lacks, per
    /// scope, oldest first (a change set comes after those its origin had seen when it wrote
    /// it). A replica relays only to a reader whose scope lies within its own, and only the
    /// segments cut for that scope (or for one within it, which the reader relays on, from
    /// where the `lagging` peers of that scope stand when they are behind the reader). A
    /// segment signed by a key its origin has since moved away from past it is left out: its
    /// receivers would refuse the whole bundle.
    ///
    /// `forked`: origins found here to have numbered two changes alike (a restored backup, a
    /// copy, a thief that set the file's numbers back), with the number where that was found.
    /// A replica with a scope also gives a reader holding every row each segment it keeps of
    /// those that reaches that number, whatever the reader holds: the reader holds that
    /// origin's numbers from the other file, so it would never be sent this file's version,
    /// and only a replica holding every row can judge it against the rows it replaced and
    /// undo what it denies (docs/KEYS.md).
    static func relayedSegments(
        from store: SegmentStore, pins: KeyPins, since base: Knowledge, leaving: Set<String>, scope: [String]?,
        ownScope: [String]?, lagging: [String: [Scope: Int64]] = [:], forked: [String: Int64] = [:]
    ) throws -> [SegmentStore.Stored] {
        let readerScope = Scope(scope)
        let withinOwn = readerScope.isWithin(Scope(ownScope))
        guard withinOwn || (readerScope.isEveryRow && !forked.isEmpty) else { return [] }
        var relayed: [SegmentStore.Stored] = []
        for (origin, kept) in try store.byOrigin() where !leaving.contains(origin) {
            let forkedFrom = withinOwn ? nil : forked[origin]
            if !withinOwn && forkedFrom == nil { continue }
            let chain = try pins.chain(of: origin)
            let checked = { (segment: SegmentStore.Stored) in
                guard let signer = try store.signer(of: segment), let key = chain.first(where: { $0.key == signer }) else { return false }
                return key.untilSeq.map { segment.last <= $0 } ?? true
            }
            if let forkedFrom {
                relayed += try kept.filter { try $0.last >= forkedFrom && checked($0) }
                continue
            }
            let carried = kept.filter { Scope($0.scope).isWithin(readerScope) }
            for (cut, group) in Dictionary(grouping: carried, by: { Scope($0.scope) }) {
                let from = cut == readerScope ? base[origin] : min(base[origin], lagging[origin]?[cut] ?? base[origin])
                relayed += try SegmentStore.cover(of: group, after: from).filter(checked)
            }
        }
        return relayed.sorted { ($0.createdHLC, $0.rowid) < ($1.createdHLC, $1.rowid) }
    }

    /// What a bundle for a receiver that holds `base` would carry, in a few words that differ
    /// whenever the bundle's content would: where this replica's own changes start and end,
    /// and which kept segments it relays. A mailbox names its bundle after it, so that a
    /// bundle's name changes with what it carries, and an unchanged one is not written again.
    public static func plannedContent(
        of replica: Replica, since base: Knowledge, scope: [String]?, checkpoints: Bool = true, readingHere: Set<String> = []
    ) throws -> String {
        try BundleTables.ready(replica)
        try replica.fold()
        let me = replica.knowledgeID
        let last = try replica.knowledge()[me]
        let ownBase =
            checkpoints ? try Checkpoints.ownBase(forReceiverHolding: min(base[me], last), last: last, of: replica).base : base[me]
        let retired = try replica.retiredPeerIDs()
        let lagging = try laggingCuts(of: replica, below: base, except: readingHere)
        let relayed = try relayedSegments(
            from: try SegmentStore(replica), pins: try KeyPins(replica), since: base, leaving: retired.union([me]),
            scope: scope.map { Array(Set($0)).sorted() }, ownScope: try replica.ownScope(), lagging: lagging,
            forked: try replica.originsNumberedTwiceFrom())
        let cuts = (lagging[me] ?? [:]).filter { $0.key.isStrictlyWithin(Scope(scope)) }.map { "\($0.key.text)@\($0.value)" }.sorted()
        return "own \(ownBase)-\(last)" + (cuts.isEmpty ? "" : " cuts " + cuts.joined(separator: ","))
            + " relays " + relayed.map { "\($0.rowid)@\($0.createdHLC)" }.joined(separator: ",")
    }

    /// The segments of this replica's own changes after `base` through `last`: one per admin
    /// epoch (the statements its changes were made under), and per scope: the reader's, and
    /// each known scope within it (every known scope, for a reader without one), which the
    /// reader keeps to relay (docs/SCOPES.md). The cut for a scope some live peer lags in
    /// starts where that peer stands (`lagging`), so that a relay holds it even when this
    /// replica's earlier bundles carried no such cut (it did not know the scope yet).
    static func ownSegments(
        after base: Int64, through last: Int64, epochs: [(afterSeq: Int64, ids: [[UInt8]])], scope: [String]?,
        knownScopes: [[String]], lagging: [Scope: Int64] = [:]
    ) -> [(after: Int64, through: Int64, statements: [[UInt8]], scope: [String]?)] {
        func statements(from seq: Int64) -> [[UInt8]] { epochs.last { $0.afterSeq < seq }?.ids ?? [] }
        func ranges(from start: Int64) -> [(Int64, Int64)] {
            var bounds = [start]
            for epoch in epochs where epoch.afterSeq > start && epoch.afterSeq < last { bounds.append(epoch.afterSeq) }
            bounds.append(last)
            return zip(bounds, bounds.dropFirst()).filter { $0.1 > $0.0 }
        }
        var scopes: [[String]?] = [scope]
        if let scope {
            scopes += knownScopes.filter { Scope($0).isStrictlyWithin(Scope(scope)) }.map { $0 }
        } else {
            scopes += knownScopes.map { $0 }
        }
        var parts: [(after: Int64, through: Int64, statements: [[UInt8]], scope: [String]?)] = []
        for (index, cut) in scopes.enumerated() {
            let start = index == 0 ? base : min(base, lagging[Scope(cut)] ?? base)
            for (from, to) in ranges(from: start) { parts.append((from, to, statements(from: from + 1), cut)) }
        }
        // Oldest first, each range's cuts in the order above.
        return parts.enumerated().sorted { ($0.element.after, $0.offset) < ($1.element.after, $1.offset) }.map(\.element)
    }

    /// For each origin, and each scope a live peer with that scope lags in, the lowest point of
    /// that origin's changes such a peer acknowledged, below what the reader holds (`base`).
    /// The cuts for that scope, own or relayed, start there: so a relay comes to hold them
    /// even when the origin's bundles carried no such cut for those changes (it did not know
    /// the scope yet) or a relay between passed on only the origin's full segments. Peers
    /// `readingHere` (a mailbox's readers, each sent its own scope's bundle) do not count.
    static func laggingCuts(
        of replica: Replica, below base: Knowledge, except readingHere: Set<String> = []
    ) throws -> [String: [Scope: Int64]] {
        let rules = try KeyBinding.adminRules(of: replica)
        guard rules.hasScopes else { return [:] }
        var peersByScope: [Scope: [String]] = [:]
        for peer in try replica.siteIDs().values where peer != replica.knowledgeID && !readingHere.contains(peer) {
            if let labels = rules.scope(of: peer) { peersByScope[Scope(labels), default: []].append(peer) }
        }
        var starts: [String: [Scope: Int64]] = [:]
        for (scope, peers) in peersByScope {
            for (origin, least) in try replica.leastAcknowledged(by: peers.sorted()) where least < base[origin] {
                starts[origin, default: [:]][scope] = least
            }
        }
        return starts
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

    /// What a bundle for every row that relays every origin carries to a receiver holding
    /// `base`: this replica's own changes, and each other origin's as far as the segments it
    /// relays reach from `base` without a gap. Another replica's mailbox bundle that carried no
    /// more is superseded by it: every reader holds `base` and can take the rest from this one.
    public static func carriedKnowledge(of replica: Replica, since base: Knowledge) throws -> Knowledge {
        let me = replica.knowledgeID
        var carried = base
        carried.seqs[me] = max(base[me], try replica.knowledge()[me])
        let relayed = try relayedSegments(
            from: try SegmentStore(replica), pins: try KeyPins(replica), since: base,
            leaving: try replica.retiredPeerIDs().union([me]), scope: nil, ownScope: try replica.ownScope())
        for segment in relayed.sorted(by: { ($0.origin, $0.base) < ($1.origin, $1.base) })
        where segment.scope == nil && segment.base <= carried[segment.origin] {
            carried.seqs[segment.origin] = max(carried[segment.origin], segment.last)
        }
        return carried
    }

    /// The acknowledgement statements an export carries of replicas other than `readers` (those
    /// that say their word in a mailbox themselves), as text for a bundle's fingerprint: a
    /// mailbox writer leaves a bundle when one of them is new, so a replica's word crosses
    /// mailboxes even when no change does (docs/BUNDLE_FORMAT.md, "Acknowledgement statements").
    public static func carriedWords(of replica: Replica, except readers: Set<String>) throws -> String {
        let retired = try replica.retiredPeerIDs()
        return try KeyPins(replica).statementCounters().filter { !readers.contains($0.replica) && !retired.contains($0.replica) }
            .map { "\($0.replica):\($0.counter)" }.joined(separator: ",")
    }

    /// True when an export since `base` would carry changes: this replica's own after it, its
    /// own cut for a scope whose peers lag (``laggingCuts(of:below:except:)``), or relayed ones.
    public static func hasChanges(
        of replica: Replica, since base: Knowledge, scope: [String]? = nil, readingHere: Set<String> = []
    ) throws -> Bool {
        let knowledge = try replica.knowledge()
        if knowledge[replica.knowledgeID] > base[replica.knowledgeID] { return true }
        let lagging = try laggingCuts(of: replica, below: base, except: readingHere)
        if (lagging[replica.knowledgeID] ?? [:]).keys.contains(where: { $0.isStrictlyWithin(Scope(scope)) }) { return true }
        let leaving = try replica.retiredPeerIDs().union([replica.knowledgeID])
        return try !relayedSegments(
            from: try SegmentStore(replica), pins: try KeyPins(replica), since: base, leaving: leaving,
            scope: scope.map { Array(Set($0)).sorted() }, ownScope: try replica.ownScope(), lagging: lagging,
            forked: try replica.originsNumberedTwiceFrom()
        ).isEmpty
    }
}
