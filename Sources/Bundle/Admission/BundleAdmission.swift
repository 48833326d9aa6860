import ChangeLog
import FoundationEssentials
import Glibc
import SQLiteDatabase

/// What admission decided about a whole bundle.
enum BundleVerdict {
    /// Written by this very replica, and only what it made: nothing in it is new here.
    case ownBundle
    /// Merge its segments, once ``AdmittedBundle/record(into:)`` has written what admitting
    /// it implies.
    case accept(AdmittedBundle)
    /// Refused whole (exit 3 for a bundle that is not what it claims; the error says why).
    case refuse(Error)
    /// Not yet: an admin statement it carries labels a table by a column this replica lacks.
    case hold(HoldReason)
}

/// What a bundle's admission concluded that the replica must record before any segment is
/// merged: the first keys and moves it accepted (in the ledger), the replicas it names, the
/// acknowledgement statements it believes, and the admin statements new here.
struct AdmittedBundle {
    /// Older than a bundle already taken from the same sender: only its signed changes count.
    var superseded: Bool
    var statements: [AcknowledgementStatement]
    var adminStatements: [StoredAdminStatement]
    var warnings: [String]
}

/// What admission decided about one segment before its header is read: only its envelope
/// entry and the key that signed it are known then.
enum SignerVerdict {
    /// Check the signature and read the header.
    case read
    /// Leave it unread: signed by a key its replica moved away from, and holding nothing
    /// this replica lacks.
    case passOver
    /// Leave it unread: its origin is retired here; the warning, when it reaches past the
    /// retirement.
    case retired(warning: String?)
    case refuse(Error)
}

/// What admission decided about one segment, its header read and checked.
enum SegmentVerdict {
    /// Nothing to merge or keep: cut for a scope that is not this replica's.
    case passOver
    /// This replica's own changes, relayed back: each must be one it made (``OwnChangeCheck``).
    case ownCheck
    /// Changes signed as this replica that it never made (a stolen key, or a copy made with
    /// cp): refused alone, so that whoever holds this replica's key cannot cut it off from
    /// every other origin a relay carries. The message names both fixes.
    case signedAsThisReplica(String)
    /// Cut for a scope within this replica's: kept to relay once this replica holds its
    /// origin's changes through it.
    case relayOnly
    /// The whole bundle waits.
    case hold(HoldReason)
    /// Merge by this plan.
    case merge(MergePlan)
    case refuse(Error)
}

/// The one place that says yes, no or not yet to a bundle and to each of its segments
/// (docs/ARCHITECTURE.md, "Admit"), in the order the checks run. It reads the replica and
/// writes nothing: first keys and moves it accepts wait in its ``KeyLedger``, and what the
/// bundle's verdict implies waits in ``AdmittedBundle``, until the import records them.
/// Not Sendable on purpose.
final class BundleAdmission {
    let reader: BundleReader
    let replica: Replica
    /// `allowed_signers` as given.
    private let trust: AllowedSigners
    /// Key pins, with what this admission accepted.
    let ledger: KeyLedger
    /// `allowed_signers` followed through every recorded or accepted key move: known once
    /// ``admitBundle()`` has accepted the bundle's moves.
    private(set) var movedTrust: AllowedSigners
    private var path: String { reader.path }
    private var envelope: BundleEnvelope { reader.envelope }
    /// The admin statements the bundle carries that this replica did not hold, once
    /// ``admitBundle()`` admitted them: with those held, all a segment may name.
    private var newStatementIDs: Set<[UInt8]> = []
    /// One line per segment judged by statements its origin's evidence shows it held though
    /// the segment leaves them out: what they forbid was denied, and the key may be in other
    /// hands. The import reports them as warnings.
    private(set) var evidenceWarnings: [String] = []

    init(reader: BundleReader, replica: Replica, trust: AllowedSigners) throws {
        self.reader = reader
        self.replica = replica
        self.trust = trust
        ledger = try KeyLedger(replica)
        movedTrust = try ledger.trust(trust)
    }

    // MARK: The bundle

    /// The checks on the bundle as a whole, in order: written by this replica; the sender's
    /// clock; the identities and key moves it carries; the sender's own key; the sender's word
    /// on itself (not retired, its clock, purges on either side); the statements it relays;
    /// its admin statements, each signed by an admin key, each label they set applying here.
    func admitBundle() throws -> BundleVerdict {
        let sender = envelope.sender
        let signer = reader.signature.publicKey
        do {
            if sender.id == replica.knowledgeID {
                try checkOwnBundle(signer: signer)
                return .ownBundle
            }
            if let ahead = ClockBound.excess(of: envelope.senderHLC) {
                return .refuse(BundleExchange.clockAhead(path, who: KeyBinding.label(sender.name, sender.id), by: ahead))
            }
            // Who signed comes first: what the sender says of itself counts only once its own
            // key has said it.
            try KeyBinding.admitKeys(envelope, path: path, replica: replica, ledger: ledger)
            try KeyBinding.checkSender(
                envelope, signer: signer, principal: reader.principal, path: path, replica: replica, ledger: ledger)
            // Keys moved to are trusted as the keys they came from are, but only through moves
            // of the replica the old key belongs to (accepted just now or before).
            movedTrust = try ledger.trust(trust)
            guard movedTrust.principal(for: signer, namespace: BundleCodec.signatureNamespace) != nil else {
                return .refuse(
                    BundleError(
                        .untrusted,
                        "\(path): signed by key \(signer.fingerprint), which only a key move that is not its replica's leads to; refusing it"
                    ))
            }
            let superseded = try replica.admitSender(envelope.senderReport, path: path) == .superseded
            let (statements, warnings) = try KeyBinding.believedAcknowledgements(
                envelope, path: path, replica: replica, trust: movedTrust, ledger: ledger)
            // Admin statements count only signed by an admin key; one that is not refuses the
            // bundle before any change in it is read.
            let adminStatements = try SignedAdminStatement.admitted(
                envelope.adminStatements, trust: movedTrust, path: path, held: Set(try replica.adminStatements().map(\.id)))
            newStatementIDs = Set(adminStatements.map(\.id))
            if let reason = try replica.labelHold(adding: adminStatements, path: path) { return .hold(reason) }
            return .accept(
                AdmittedBundle(superseded: superseded, statements: statements, adminStatements: adminStatements, warnings: warnings))
        } catch let error as BundleError {
            return .refuse(error)
        } catch let error as ChangeLogError where Self.refusals.contains(error.kind) {
            return .refuse(error)
        }
    }

    /// Errors that refuse a bundle rather than fail the import.
    static let refusals: [ChangeLogError.Kind] = [.retiredPeer, .identityClash, .staleReplica]

    /// A bundle under this replica's own knowledge ID must be signed by its own key and claim
    /// no change it never made: otherwise another database writes under its ID with its key.
    /// One signed by another key was planted. A replica that never signed anything wrote no
    /// bundle: one under its ID comes from a copy of it.
    private func checkOwnBundle(signer: SSHPublicKey) throws {
        let me = replica.knowledgeID
        let own = try replica.knowledge()[me]
        guard let ownKey = try ledger.currentKey(of: me) else {
            if ReplicaIdentity.isKeyBound(me) && !ReplicaIdentity.isBound(me, to: signer) { throw planted(me, signer) }
            throw BundleExchange.copiedIdentity(path, replica: replica, "this replica has never signed a bundle")
        }
        guard ownKey == signer else { throw planted(me, signer) }
        if envelope.senderSeq > own {
            throw BundleExchange.copiedIdentity(path, replica: replica, "it carries changes up to \(envelope.senderSeq); this replica made \(own)")
        }
    }

    private func planted(_ me: String, _ signer: SSHPublicKey) -> BundleError {
        BundleError(
            .untrusted,
            "\(path): the bundle claims to come from this replica (\(me)) but is signed by key \(signer.fingerprint), not this replica's; refusing it"
        )
    }

    // MARK: Each segment

    /// Before a segment's header is read: a retired origin's segment is passed over (with a
    /// warning when it reaches past the retirement); the key that signed it must be one its
    /// origin may sign that range with (``KeyBinding/checkOrigin``), binding a replica of a
    /// random ID at its first signature (in the ledger). `known`: this replica's knowledge now.
    func admitSigner(of entry: BundleEnvelope.SegmentEntry, signer: SSHPublicKey, known: Knowledge, retired: [String: Int64])
        throws -> SignerVerdict
    {
        let origin = envelope.sites[entry.site]
        if let retiredAt = retired[origin.id] {
            return .retired(
                warning: entry.last > retiredAt
                    ? "\(path): the changes of \(KeyBinding.label(origin.name, origin.id)) after \(retiredAt) come after it was retired here; refusing them, whoever relays them"
                    : nil)
        }
        do {
            let read = try KeyBinding.checkOrigin(
                entry, signer: signer, envelope: envelope, path: path, replica: replica, trust: movedTrust, known: known, ledger: ledger)
            return read ? .read : .passOver
        } catch let error as BundleError {
            return .refuse(error)
        }
    }

    /// Whether a kept segment is worth reading again now (``BundleExchange`` merges kept
    /// segments once a bundle taught this replica more): not its own, its origin not retired,
    /// cut for this replica's own scope, beginning at or before what it holds of its origin
    /// (`held`) and reaching past it. Reads the replica, writes nothing; what the segment
    /// carries is then checked by ``admitKeptSigner(origin:entry:signer:)`` and
    /// ``admitSegment(_:)`` as when it came.
    func mayMergeAgain(_ segment: SegmentStore.Stored, holding held: Int64) throws -> Bool {
        guard segment.origin != replica.knowledgeID, segment.base <= held, segment.last > held else { return false }
        if keptSegmentRules == nil { keptSegmentRules = (try replica.retiredPeers(), try boundOwnScope()) }
        guard let rules = keptSegmentRules, rules.retired[segment.origin] == nil else { return false }
        return Scope(segment.scope) == rules.ownScope
    }

    /// Whether statements an origin left out (``Authorization/beyondItsWord``) include a label
    /// or a scope: then it cut its changes for scopes as if they did not exist.
    private func shedsScopes(_ shed: Set<[UInt8]>) throws -> Bool {
        guard !shed.isEmpty else { return false }
        return try replica.adminStatements().contains { statement in
            guard shed.contains(statement.id) else { return false }
            switch statement.act {
            case .label, .scope: return true
            case .grant, .revoke: return false
            }
        }
    }

    /// The scope this replica merges, bound to its key as others see it: a replica made with
    /// a scoped replica's key merges that scope's segments (an honest laptop re-made after a
    /// lost disk receives its rows again).
    private func boundOwnScope() throws -> Scope {
        if let cached = ownScopeBound { return cached }
        let scope = Scope(try KeyBinding.adminRules(of: replica).scope(of: replica.knowledgeID))
        ownScopeBound = scope
        return scope
    }

    /// Read once per import, after the bundle's statements are recorded (the first segment).
    private var ownScopeBound: Scope?
    private var held: (ids: Set<[UInt8]>, rules: AdminRules)?

    /// The statements held here once the bundle's are recorded (with those it carries, for a
    /// verdict reached before that), and the rules they make: read once per import.
    private func heldStatements() throws -> (ids: Set<[UInt8]>, rules: AdminRules) {
        if let held { return held }
        let statements = try replica.adminStatements()
        let read = (Set(statements.map(\.id)).union(newStatementIDs), AdminRules(acts: statements.map(\.act)))
        held = read
        return read
    }

    /// The other replicas any key of `origin`'s signs for (``AdminRules/binding(keySharers:)``).
    private func keySharers(of origin: String) throws -> Set<String> {
        var sharers: Set<String> = []
        for key in try ledger.chain(of: origin) {
            for owner in try ledger.owners(of: key.key) where owner.id != origin { sharers.insert(owner.id) }
        }
        return sharers
    }

    /// Read once per import, when the first kept segment is looked at.
    private var keptSegmentRules: (retired: [String: Int64], ownScope: Scope)?

    /// A segment this replica kept, read again: signed by a key of its origin's that signs that
    /// range, and trusted still. One that is not is passed over (false), not refused: it came
    /// verified, and only what changed since (a key retired, a line removed) says no.
    func admitKeptSigner(origin: String, entry: BundleEnvelope.SegmentEntry, signer: SSHPublicKey) throws -> Bool {
        guard let key = try ledger.chain(of: origin).first(where: { $0.key == signer }) else { return false }
        if let until = key.untilSeq, entry.last > until { return false }
        return movedTrust.principal(for: signer, namespace: BundleCodec.signatureNamespace) != nil
    }

    /// A segment whose origin signature verified: this replica's own changes; the origin's
    /// clock; the scope it was cut for; the admin statements it names (no fewer than the
    /// origin's earlier changes named, all held here); then the tables, columns and policies
    /// it needs (``Replica/planMerge(of:authorization:)``).
    /// `anotherFilesCut`: a kept cut of an origin found writing from two files, which a
    /// replica holding every row merges rather than only relays (``BundleImport``).
    func admitSegment(_ changes: ChangeSetHeader, kept: Bool = false, anotherFilesCut: Bool = false) throws -> SegmentVerdict {
        do {
            if changes.origin == replica.knowledgeID {
                let made = try replica.knowledge()[replica.knowledgeID]
                if changes.last > made {
                    return .signedAsThisReplica(
                        BundleExchange.signedAsThisReplica(replica: replica, "changes up to \(changes.last), and it made \(made)"))
                }
                return .ownCheck
            }
            if let ahead = ClockBound.excess(of: changes.createdHLC) {
                return .refuse(BundleExchange.clockAhead(path, who: changes.originLabel, by: ahead))
            }
            // A bundle carries every statement its segments name (its writer held each one
            // before it merged or relayed them): one it names and does not carry can never
            // come with it. Its origin's own file is refused once, not held for good; a relay's
            // segment is passed over (the relay is not at fault), and never kept to relay.
            let (heldIDs, held) = try heldStatements()
            let absent = Set(changes.adminStatements).subtracting(heldIDs)
            if !absent.isEmpty && !kept {
                guard changes.origin == envelope.sender.id else { return .passOver }
                var error = BundleError(
                    .corrupt,
                    "\(path): the changes of \(changes.originLabel) name \(absent.count) admin statement(s) that neither this replica holds nor the bundle carries, which no bundle sqsync writes does; refusing it")
                error.concernsTheFileAlone = true
                return .refuse(error)
            }
            // A segment cut for another scope is not this replica's to merge; one cut for a scope
            // within its own is kept to relay (docs/SCOPES.md).
            let ownScope = try boundOwnScope()
            let cut = Scope(changes.scope)
            if cut != ownScope && !(anotherFilesCut && cut.isStrictlyWithin(ownScope)) {
                return !cut.isEveryRow && cut.isStrictlyWithin(ownScope) ? .relayOnly : .passOver
            }
            // Statements only accumulate: an origin's later changes name every statement its
            // earlier ones did, unless its key is in other hands, shedding grants. (An honest
            // segment reaching past the claim lies in the claim's epoch or a later one: epochs
            // never shrink, and no segment spans two.)
            // Nor fewer than the origin itself signed it held before (AdminEvidence.swift): a
            // revoke binds from its first change after it acknowledged it. Such changes are
            // judged by every statement the evidence shows, not refused: what those statements
            // forbid is denied and logged, and a replica holding every row starts a new life of
            // each denied row (ChangeMerger+Grants.swift), which also undoes the change wherever
            // a replica without the evidence took it. Every replica ends with the same rows.
            // The header stays as its origin signed it (what is recorded of the origin's word);
            // only the judging takes the statements the evidence adds.
            let claim = try replica.adminClaim(of: changes.origin)
            var shed = Set(claim.map { changes.last > $0.last ? $0.ids : [] } ?? [])
            shed.formUnion(try replica.adminStatementsBinding(changesOf: changes.origin, through: changes.last))
            shed.subtract(changes.adminStatements)
            if !shed.isEmpty {
                let warning =
                    "\(path): the changes of \(changes.originLabel) up to \(changes.last) leave out \(shed.count) admin statement(s) its own signed changes or acknowledgements show it held, as a key shedding its grants or skipping a revoke would: judged by them all, what they forbid is denied (sqsync conflicts); if its key is lost: sqsync peers retire, and remove its line from allowed_signers"
                if !evidenceWarnings.contains(warning) { evidenceWarnings.append(warning) }
            }
            guard let named = try replica.adminRules(namedBy: changes.adminStatements + shed) else {
                return .hold(
                    HoldReason(
                        .adminStatementsMissing(origin: changes.origin),
                        "\(path): the changes of \(changes.originLabel) were made under admin statements this replica does not hold yet; held until they arrive"
                    ))
            }
            // A replica made with a restricted replica's key is restricted as it is.
            let sharers = held.restrictsAnyone ? try keySharers(of: changes.origin) : []
            let rules = sharers.isEmpty ? named : named.binding(keySharers: [changes.origin: sharers], held: held)
            let authorization =
                rules.isRestricted(changes.origin)
                ? Authorization(
                    rules: rules, origin: changes.origin, receiverHasScope: !ownScope.isEveryRow,
                    beyondItsWord: try shedsScopes(shed)) : nil
            if authorization != nil,
                let reason = try replica.labelHold(
                    judging: changes.originLabel, by: rules, tables: changes.tables.map(\.name), path: path)
            {
                return .hold(reason)
            }
            switch try replica.planMerge(of: changes, authorization: authorization) {
            case .merge(let plan): return .merge(plan)
            case .hold(let reason): return .hold(reason)
            }
        } catch let error as BundleError {
            return .refuse(error)
        } catch let error as ChangeLogError where Self.refusals.contains(error.kind) {
            return .refuse(error)
        }
    }
}

extension AdmittedBundle {
    /// The writes admitting the bundle implies, in one step before any segment is merged:
    /// the keys the ledger accepted, every replica the envelope names, and the admin
    /// statements new here (which may change labels and grants here, and hold the bundle when
    /// a label does not apply). The statements believed are recorded after the merge, as far
    /// as this replica then holds what they say.
    func record(into replica: Replica, envelope: BundleEnvelope, ledger: KeyLedger) throws {
        try ledger.write()
        // (A replica only listed here, never seen signing anything, holds back no purge:
        // LifecycleSQL.vouched.)
        for site in envelope.sites { _ = try replica.siteNumber(for: site.id, name: site.name) }
        try replica.addAdminStatements(adminStatements)
    }
}
