import SQLiteDatabase

/// What a bundle's sender says of itself, signed with its own key: its own clock, what it
/// holds (its acknowledgement) and what it purged. It speaks for the sender only: what it
/// holds of another replica raises nobody's knowledge of that replica.
public struct SenderReport: Sendable, Equatable {
    public var knowledgeID: String
    public var name: String
    /// Its own last sequence number and clock when it wrote the bundle.
    public var seq: Int64
    public var hlc: Int64
    /// What it held, by knowledge ID.
    public var knowledge: Knowledge
    /// Deletions it had purged, by knowledge ID: a replica that knows less of a site than
    /// this may still hold rows deleted there.
    public var forgotten: Knowledge
    /// Its `PRAGMA user_version`.
    public var schemaVersion: Int64?

    public init(
        knowledgeID: String, name: String, seq: Int64, hlc: Int64, knowledge: Knowledge, forgotten: Knowledge,
        schemaVersion: Int64? = nil
    ) {
        self.knowledgeID = knowledgeID
        self.name = name
        self.seq = seq
        self.hlc = hlc
        self.knowledge = knowledge
        self.forgotten = forgotten
        self.schemaVersion = schemaVersion
    }

    var label: String { displayText(name.isEmpty ? knowledgeID : "\(name) (\(knowledgeID))") }
}

/// What ``Replica/admitSender(_:path:)`` found.
public enum SenderVerdict: Sendable, Equatable {
    /// Merge the bundle.
    case admitted
    /// The bundle is older than one this replica already took from the same sender (its
    /// clock is behind what the sender reported since), or was written by a second file
    /// under the sender's identity: what it says of its sender is stale or another file's,
    /// and only its signed changes count, as a relay's would.
    case superseded
}

extension Replica {
    /// Checks what a bundle's sender says of itself before any of its changes is merged:
    /// it is not a retired peer, its clock went where one replica's clock can go, it lacks
    /// no deletion this replica purged (the other way round is checked after the merge:
    /// ``checkNotOlder(thanPurgedBy:path:)``). A bundle older than one already taken from the
    /// sender is ``SenderVerdict/superseded``: a replay, never a reason to alarm, whose
    /// purge marks are not checked (they are older than what the sender said since).
    public func admitSender(_ report: SenderReport, path: String) throws -> SenderVerdict {
        var verdict = SenderVerdict.admitted
        if let sender = try database.row(MergeSQL.senderRecord, .text(report.knowledgeID)) {
            if try sender.bool("retired") {
                throw ChangeLogError(
                    .retiredPeer,
                    "\(path): the bundle comes from \(report.label), a retired peer; refusing it. If that site is back, give it a fresh copy with `sqsync clone`"
                )
            }
            if let reportedSeq = try sender.optionalInt64("reported_seq"), let reportedHLC = try sender.optionalInt64("reported_hlc") {
                let seq = report.seq, hlc = report.hlc
                if (seq < reportedSeq && hlc <= reportedHLC) || (seq <= reportedSeq && hlc < reportedHLC) {
                    return .superseded
                }
                // One replica's clock never goes back and imports may push it forward with no
                // new change, so more changes never come with an earlier clock, nor fewer with
                // a later one: two files write under its identity (a copy, a backup restored
                // over it, a stolen key). Said at every sync (``standingNumberedTwice()``), not
                // refused: refusing would starve this replica of what the bundle relays.
                if (seq > reportedSeq && hlc < reportedHLC) || (seq < reportedSeq && hlc > reportedHLC) {
                    try noteNumberedTwice(report.knowledgeID, at: min(seq, reportedSeq))
                    verdict = .superseded
                }
            }
        }
        for row in try database.rows(MergeSQL.purgedSites) {
            let id = try row.string("knowledge_id"), forgotten = try row.int64("forgotten_seq")
            // A sender that holds nothing of that replica (one that joined since) holds none of
            // its rows either.
            if id != knowledgeID && id != report.knowledgeID && report.knowledge[id] > 0 && report.knowledge[id] < forgotten {
                throw ChangeLogError(
                    .staleReplica,
                    "\(path): the bundle comes from \(report.label), which lacks deletions of \(displayText(try row.string("label"))) that this replica has already purged, so it may still hold deleted rows; replace that replica with `sqsync clone` of a current one"
                )
            }
        }
        return verdict
    }

    /// Checks, once a bundle's segments are merged, that this replica is not older than what
    /// its sender purged: holding some of a replica's changes but not its deletions the sender
    /// forgot, it may still hold rows deleted since, which no bundle will ever delete. The
    /// segments the bundle carried count (a relay keeps what a late joiner lacks), and a
    /// replica that holds nothing of that replica (one that joined since) holds none of its
    /// rows. Only deletions an sqsync before 0.4 purged are forgotten (docs/MERGE_RULES.md, "Purge").
    public func checkNotOlder(thanPurgedBy report: SenderReport, path: String) throws {
        let knowledge = try self.knowledge()
        for (id, forgotten) in report.forgotten.seqs.sorted(by: { $0.key < $1.key })
        where id != knowledgeID && knowledge[id] > 0 && forgotten > knowledge[id] {
            throw ChangeLogError(
                .staleReplica,
                "\(path): this replica is older than what \(report.label) has purged (it lacks deletions of \(try siteLabel(id)) up to \(forgotten)) and may still hold rows deleted since; replace it with `sqsync clone` of a current replica"
            )
        }
    }

    /// Records what the sender of a merged bundle said of itself: what it holds, when it was
    /// heard from, its schema version; then forgets the change notes every peer now holds.
    public func recordSender(_ report: SenderReport) throws {
        let sender = try siteNumber(for: report.knowledgeID, name: report.name)
        var acknowledged: [Int: Int64] = [:]
        // Only of replicas heard of by their own word: a list of others is no way to add peers.
        for (id, seq) in report.knowledge.seqs {
            if let site = try siteNumberIfKnown(id) { acknowledged[site] = seq }
        }
        try recordAcknowledgement(peer: sender, acknowledged)
        try recordAdminEvidence(of: report.knowledgeID, knowledge: report.knowledge, ownSeq: report.seq)
        try database.run(MergeSQL.heardFrom, .integer(report.seq), .integer(report.hlc), .integer(Int64(sender)))
        if let version = report.schemaVersion {
            try database.run(MergeSQL.schemaVersion, .integer(version), .integer(Int64(sender)))
        }
        // What every peer now holds needs no note: dropped here, with the import, rather than
        // by the next export's fold, which should cost what it sends.
        try forgetAcknowledgedChanges()
    }

    /// Pushes this replica's clock past `hlc`, a value seen in a peer's change.
    public func observeClock(_ hlc: Int64) throws {
        try database.run(MergeSQL.observeClock, .integer(hlc))
    }

    /// A replica's name and knowledge ID, for messages.
    func siteLabel(_ knowledgeID: String) throws -> String {
        let name = try siteName(of: knowledgeID)
        return displayText(name.isEmpty ? knowledgeID : "\(name) (\(knowledgeID))")
    }
}
