import ChangeLog
import FoundationEssentials
import Glibc

/// Which key speaks for which replica (docs/KEYS.md).
///
/// `allowed_signers` says which keys may sign at all; it does not say for which replica. A
/// replica's knowledge ID is made from its first key (``ReplicaIdentity``), so any receiver
/// checks who may speak for it by hashing that key; each later key comes from a move the
/// previous key signed, naming the change after which the new key signs; a key that moved
/// away signs nothing past that change; one key belongs to one replica; and two different
/// moves from one key are refused, loudly. A replica made without a key (by an earlier sqsync,
/// or `init`/`clone` without one) is bound to the first key seen signing for it.
public enum KeyBinding {
    // MARK: This replica's own key

    /// Before this replica signs anything: `key` must be its current key, bound at its
    /// first signature (a key-bound ID only to the key it was made from), not a key of
    /// another replica (a clone still using its source's key), nor one it moved away from.
    /// Then signs a fresh acknowledgement statement when its knowledge changed since the last.
    public static func prepareToSign(replica: Replica, key: SigningKey) throws {
        try replica.fold()
        try replica.database.inTransaction {
            let pins = try KeyPins(replica)
            let me = replica.knowledgeID
            let chain = try pins.chain(of: me)
            if chain.isEmpty {
                if ReplicaIdentity.isKeyBound(me) && !ReplicaIdentity.isBound(me, to: key.publicKey) {
                    throw ChangeLogError(
                        .identityClash,
                        "\(replica.path): this replica's knowledge ID \(me) was made from another key than \(key.publicKey.fingerprint); sign with the key it was made with"
                    )
                }
                if let reason = try refusal(toBind: key.publicKey, to: me, birth: [], owners: try pins.owners(of: key.publicKey)) {
                    throw ChangeLogError(.identityClash, "\(replica.path): \(reason)")
                }
                try pins.bindFirst(key.publicKey, to: me, name: nil)
            } else if let mine = chain.first(where: { $0.key == key.publicKey }) {
                if let until = mine.untilSeq {
                    let next = chain.first { $0.afterSeq >= until && $0.key != key.publicKey }?.key.fingerprint ?? "a newer key"
                    throw ChangeLogError(
                        .identityClash,
                        "\(replica.path): key \(key.publicKey.fingerprint) was rotated away from (to \(next)); sign with the new key")
                }
            } else {
                let current = chain.last?.key.fingerprint ?? "?"
                throw ChangeLogError(
                    .identityClash,
                    "\(replica.path): this replica signs with key \(current), not \(key.publicKey.fingerprint); give --key its own key, or move it with `sqsync keygen --rotate \(replica.path)`"
                )
            }
            try signOwnStatement(replica: replica, key: key)
        }
    }

    /// Signs this replica's acknowledgement statement anew when what it holds, or its counter
    /// fold, changed since the one it holds; returns the current one.
    @discardableResult
    private static func signOwnStatement(replica: Replica, key: SigningKey) throws -> AcknowledgementStatement {
        let pins = try KeyPins(replica)
        let knowledge = try replica.knowledge()
        let folded = try replica.countersFolded()
        let stored = try pins.acknowledgementStatement(of: replica.knowledgeID)
        if let stored, stored.knowledge == knowledge, stored.countersFolded == folded, stored.isSigned(by: key.publicKey) {
            return stored
        }
        let signed = try AcknowledgementStatement.sign(
            replica: replica.knowledgeID, counter: (stored?.counter ?? 0) + 1, countersFolded: folded, knowledge: knowledge, key: key)
        try pins.store(signed)
        return signed
    }

    /// Moves this replica to a new key from its next change on: the move is signed by the
    /// old key (bundles carry it, so peers follow), and only `newKey` signs afterwards.
    public static func rotate(replica: Replica, from oldKey: SigningKey, to newKey: SigningKey) throws {
        try prepareToSign(replica: replica, key: oldKey)
        try replica.database.inTransaction {
            let pins = try KeyPins(replica)
            if let other = try pins.owners(of: newKey.publicKey).first {
                throw ChangeLogError(
                    .identityClash,
                    "\(replica.path): key \(newKey.publicKey.fingerprint) already belongs to replica \(label(other.name, other.id)); make a new one")
            }
            let move = try KeyMove.sign(
                replica: replica.knowledgeID, from: oldKey, to: newKey.publicKey, afterSeq: try replica.knowledge()[replica.knowledgeID])
            try pins.record(move)
        }
        try prepareToSign(replica: replica, key: newKey)
    }

    /// The rules every statement held here makes, with each restriction bound to the keys of
    /// the replica it names (``AdminRules/binding(keySharers:)``): what writers group readers
    /// by, so that a replica made with a scoped key reads no more than that scope.
    public static func adminRules(of replica: Replica) throws -> AdminRules {
        let rules = try replica.adminRules()
        guard rules.restrictsAnyone else { return rules }
        return rules.binding(keySharers: try KeyPins(replica).keySharers())
    }

    /// The key a replica signs with now, as this replica knows it.
    public static func currentKey(of knowledgeID: String, replica: Replica) throws -> SSHPublicKey? {
        try KeyPins(replica).currentKey(of: knowledgeID)
    }

    // MARK: What bundles carry about keys

    /// The identities (first keys, with births) of the given replicas and every move held, for a bundle.
    static func carriedKeys(of replica: Replica, for ids: [String]) throws -> (
        identities: [(id: String, key: SSHPublicKey, birth: [UInt8])], moves: [KeyMove]
    ) {
        let pins = try KeyPins(replica)
        var identities: [(id: String, key: SSHPublicKey, birth: [UInt8])] = []
        for id in ids {
            if let first = try pins.chain(of: id).first(where: { $0.move == nil }) { identities.append((id, first.key, first.birth)) }
        }
        return (identities, try pins.moves())
    }

    /// Whether `key` is the key of a replica this one knows.
    public static func speaksForAReplica(_ key: SSHPublicKey, replica: Replica) throws -> Bool {
        try !KeyPins(replica).owners(of: key).isEmpty
    }

    /// This replica's birth (empty for an ID made from its key alone, or a random one).
    public static func birth(of replica: Replica) throws -> [UInt8] {
        try KeyPins(replica).chain(of: replica.knowledgeID).first { $0.move == nil }?.birth ?? []
    }

    /// Records this replica's own identity as it is made (`init`, `clone`, `reidentify`): its
    /// first key and birth, from which its knowledge ID was made, so that it signs with that
    /// key and its bundles carry the birth that proves the ID.
    public static func bindOwnIdentity(replica: Replica, key: SSHPublicKey, birth: [UInt8]) throws {
        try BundleTables.ready(replica)
        guard ReplicaIdentity.isBound(replica.knowledgeID, to: key, birth: birth) else {
            throw ChangeLogError(
                .identityClash, "\(replica.path): knowledge ID \(replica.knowledgeID) was not made from key \(key.fingerprint)")
        }
        let pins = try KeyPins(replica)
        guard try pins.chain(of: replica.knowledgeID).isEmpty else { return }
        if let reason = try refusal(toBind: key, to: replica.knowledgeID, birth: birth, owners: try pins.owners(of: key)) {
            throw ChangeLogError(.identityClash, "\(replica.path): \(reason)")
        }
        try pins.bindFirst(key, to: replica.knowledgeID, name: nil, birth: birth)
    }

    /// `trust` plus every key a recorded move leads to from a trusted key, under the old
    /// key's principal: a moved-to key is trusted as long as the key it came from is, so
    /// removing that one from allowed_signers revokes both.
    public static func trust(_ trust: AllowedSigners, replica: Replica) throws -> AllowedSigners {
        // A replica Bundle never used has recorded no move (and is not changed by asking).
        guard try BundleTables.exist(in: replica) else { return trust }
        return trust.following(try KeyPins(replica).moves().map { ($0.from, $0.to) })
    }

    // MARK: Keys and statements from others

    /// Checks the identities and key moves an envelope carries, and records what they prove.
    /// A key that claims a key-bound knowledge ID it was not made from, a move not signed by
    /// a key of its replica, and a second, different move from one key are forgeries: the
    /// bundle is refused. A random knowledge ID is not bound to the key an envelope names
    /// for it (that would let a relay choose it), only by its own signature (``checkOrigin``).
    /// Keys of retired replicas are no longer followed: a stolen key's moves change nothing.
    static func admitKeys(_ envelope: BundleEnvelope, path: String, replica: Replica, ledger pins: KeyLedger) throws {
        let retired = try replica.retiredPeerIDs()
        for identity in envelope.identities {
            let id = envelope.sites[identity.site].id
            guard id != replica.knowledgeID, ReplicaIdentity.isKeyBound(id), !retired.contains(id) else { continue }
            guard ReplicaIdentity.isBound(id, to: identity.key, birth: identity.birth) else {
                throw BundleError(
                    .untrusted,
                    "\(path): the bundle says key \(identity.key.fingerprint) is the identity of \(siteLabel(envelope, identity.site)), whose knowledge ID was made from another key: a forgery; refusing it"
                )
            }
            if try pins.chain(of: id).isEmpty {
                try bind(
                    identity.key, to: id, name: envelope.sites[identity.site].name, birth: identity.birth, path: path, pins: pins)
            }
        }
        try admitMoves(
            envelope.moves.filter { $0.replica != replica.knowledgeID && !retired.contains($0.replica) }, path: path,
            replica: replica, pins: pins)
    }

    /// Records each move of a replica whose first key is pinned (the others wait for their
    /// replica's first signature, ``bindAtFirstSignature``).
    private static func admitMoves(_ moves: [KeyMove], path: String, replica: Replica, pins: KeyLedger) throws {
        for move in moves.sorted(by: { $0.afterSeq < $1.afterSeq }) {
            guard move.isValid else {
                throw BundleError(.untrusted, "\(path): a key move of \(displayText(move.replica)) does not verify; refusing the bundle")
            }
            let chain = try pins.chain(of: move.replica)
            guard !chain.isEmpty else { continue }
            guard let from = chain.first(where: { $0.key == move.from }) else {
                throw BundleError(
                    .untrusted,
                    "\(path): a key move of \(try replica.siteLabelForMessages(move.replica)) is signed by key \(move.from.fingerprint), which is not that replica's; refusing the bundle"
                )
            }
            if let until = from.untilSeq {
                let next = chain.first { $0.move?.from == move.from }
                if next?.key == move.to && until == move.afterSeq { continue }
                throw BundleError(
                    .untrusted,
                    "\(path): key \(move.from.fingerprint) of \(try replica.siteLabelForMessages(move.replica)) signed two different moves (to \(next?.key.fingerprint ?? "none") after change \(until), and to \(move.to.fingerprint) after change \(move.afterSeq)): its key was stolen or copied; retire that replica (`sqsync peers retire`) and give its site a new key and a fresh clone"
                )
            }
            guard move.afterSeq >= from.afterSeq else {
                throw BundleError(.untrusted, "\(path): a key move of \(displayText(move.replica)) goes back before the key it leaves; refusing the bundle")
            }
            if let other = try pins.owners(of: move.to).first(where: { $0.id != move.replica }) {
                throw BundleError(
                    .untrusted,
                    "\(path): a key move gives \(try replica.siteLabelForMessages(move.replica)) key \(move.to.fingerprint), which belongs to replica \(label(other.name, other.id)); refusing the bundle"
                )
            }
            try pins.record(move)
        }
    }

    /// Binds a random knowledge ID that has no key pinned here at its first signature: to the
    /// key the envelope names for it when the envelope's moves of that replica (each signed by
    /// the key it leaves) lead from that key to `signer`, recording them; else to `signer`
    /// itself. Never to a key that did not sign, so a relay's word alone binds nothing.
    /// With `trust`, binds only a signer it trusts, directly or as the key those moves lead to.
    private static func bindAtFirstSignature(
        _ site: Int, signer: SSHPublicKey, envelope: BundleEnvelope, path: String, replica: Replica, pins: KeyLedger,
        trust: AllowedSigners? = nil
    ) throws {
        let id = envelope.sites[site].id
        var movesFrom: [SSHPublicKey: KeyMove] = [:]
        for move in envelope.moves where move.replica == id && move.isValid { movesFrom[move.from] = movesFrom[move.from] ?? move }
        var route: [KeyMove] = []
        if let named = envelope.identities.first(where: { $0.site == site })?.key {
            var current = named
            while current != signer, route.count < movesFrom.count, let move = movesFrom[current] {
                route.append(move)
                current = move.to
            }
            if current != signer { route = [] }
        }
        if let trust, trust.following(route.map { ($0.from, $0.to) }).principal(for: signer, namespace: BundleCodec.signatureNamespace) == nil {
            return
        }
        try bind(route.first?.from ?? signer, to: id, name: envelope.sites[site].name, path: path, pins: pins)
        try admitMoves(route, path: path, replica: replica, pins: pins)
    }

    private static func bind(
        _ key: SSHPublicKey, to id: String, name: String, birth: [UInt8] = [], path: String, pins: KeyLedger
    ) throws {
        if let reason = try refusal(toBind: key, to: id, birth: birth, owners: try pins.owners(of: key)) {
            throw BundleError(.untrusted, "\(path): the bundle gives key \(key.fingerprint) to \(label(name, id)), but \(reason); refusing it")
        }
        try pins.bindFirst(key, to: id, name: name.isEmpty ? nil : name, birth: birth)
    }

    /// Why `key` may not become the first key of replica `id`, or nil: a key a replica moved
    /// away from gives birth to no replica (it may be in other hands); a key another replica
    /// holds may be the first key of a new one only when the new one's ID was made from that
    /// key and its own birth (one key, several databases), never of a random ID, which
    /// anyone could claim.
    static func refusal(
        toBind key: SSHPublicKey, to id: String, birth: [UInt8], owners: [(id: String, name: String, movedAway: Bool)]
    ) throws -> String? {
        let others = owners.filter { $0.id != id }
        if let old = others.first(where: \.movedAway) {
            return "key \(key.fingerprint) is one replica \(label(old.name, old.id)) moved away from, which makes no new replica"
        }
        if let other = others.first, !(ReplicaIdentity.isKeyBound(id) && ReplicaIdentity.isBound(id, to: key, birth: birth)) {
            return "key \(key.fingerprint) is bound to replica \(label(other.name, other.id)); give this replica its own key (sqsync keygen) and add its line to allowed_signers on its peers"
        }
        return nil
    }

    /// The sender's signature must be its current key's. A sender of a key-bound ID is
    /// bound here by its first signature only if the ID was made from that key.
    /// `principal` is the signer's name in allowed_signers, for messages.
    static func checkSender(
        _ envelope: BundleEnvelope, signer: SSHPublicKey, principal: String?, path: String, replica: Replica, ledger pins: KeyLedger
    ) throws {
        let sender = envelope.sender
        let chain = try pins.chain(of: sender.id)
        let claim = "\(path): the bundle claims to come from \(label(sender.name, sender.id))"
        let signedBy = principal.map { "\(displayText($0))'s key \(signer.fingerprint)" } ?? "key \(signer.fingerprint)"
        guard !chain.isEmpty else {
            let birth = envelope.identities.first { $0.site == 0 && $0.key == signer }?.birth ?? []
            if ReplicaIdentity.isKeyBound(sender.id) && !ReplicaIdentity.isBound(sender.id, to: signer, birth: birth) {
                throw BundleError(
                    .untrusted, "\(claim), but it is signed by \(signedBy), not the key that knowledge ID was made from; refusing it")
            }
            try bindAtFirstSignature(0, signer: signer, envelope: envelope, path: path, replica: replica, pins: pins)
            return
        }
        guard let key = chain.first(where: { $0.key == signer }) else {
            let current = chain.last { $0.untilSeq == nil }?.key.fingerprint ?? "?"
            throw BundleError(
                .untrusted, "\(claim), which signs with key \(current), but it is signed by \(signedBy); refusing it")
        }
        if let until = key.untilSeq {
            let current = chain.last { $0.untilSeq == nil }?.key.fingerprint ?? "?"
            throw BundleError(
                .untrusted,
                "\(claim), but it is signed by \(signedBy), which that replica moved away from after its change \(until) (it signs with key \(current) now); refusing it"
            )
        }
    }

    /// The key that signed a segment must be its origin's, and one that had not moved away
    /// before the segment's last change; it must be trusted, or reached by a move from a
    /// trusted key. A replica of a random knowledge ID not yet pinned is bound here, to the
    /// trusted key that signed its own changes (never to a key a relay names for it). Returns
    /// false for a segment to pass over: one signed by a key its replica has moved away from
    /// that holds nothing this replica lacks (an old key, perhaps stolen, can tell nothing
    /// new, so what it re-signs is not even compared).
    static func checkOrigin(
        _ entry: BundleEnvelope.SegmentEntry, signer: SSHPublicKey, envelope: BundleEnvelope, path: String, replica: Replica,
        trust: AllowedSigners, known: Knowledge, ledger pins: KeyLedger
    ) throws -> Bool {
        let origin = envelope.sites[entry.site]
        var chain = try pins.chain(of: origin.id)
        let whose = "\(path): the changes of \(label(origin.name, origin.id))"
        if chain.isEmpty && !ReplicaIdentity.isKeyBound(origin.id) && origin.id != replica.knowledgeID {
            try bindAtFirstSignature(entry.site, signer: signer, envelope: envelope, path: path, replica: replica, pins: pins, trust: trust)
            chain = try pins.chain(of: origin.id)
        }
        let trusted = try pins.trust(trust).principal(for: signer, namespace: BundleCodec.signatureNamespace) != nil
        guard let key = chain.first(where: { $0.key == signer }) else {
            if chain.isEmpty {
                throw BundleError(.untrusted, "\(whose) come without a key this replica can check them against; refusing the bundle")
            }
            throw BundleError(
                .untrusted,
                "\(whose) are signed by key \(signer.fingerprint), which is not that replica's key: a relay cannot speak for another replica; refusing the bundle"
            )
        }
        if let until = key.untilSeq {
            if entry.last > until {
                throw BundleError(
                    .untrusted,
                    "\(whose) up to \(entry.last) are signed by key \(signer.fingerprint), which that replica moved away from after change \(until); refusing the bundle"
                )
            }
            if entry.last <= known[origin.id] { return false }
        }
        guard trusted else {
            throw BundleError(
                .untrusted,
                "\(whose) are signed by key \(signer.fingerprint), which allowed_signers does not trust; refusing the bundle")
        }
        return true
    }

    /// The acknowledgement statements to believe: those signed by their replica's current key
    /// (and trusted), binding a replica of a random ID at its statement's signature as its
    /// changes would. Returns them, and one line per statement not believed.
    static func believedAcknowledgements(
        _ envelope: BundleEnvelope, path: String, replica: Replica, trust: AllowedSigners, ledger pins: KeyLedger
    ) throws -> (believed: [AcknowledgementStatement], warnings: [String]) {
        let retired = try replica.retiredPeerIDs()
        var ignored = 0
        var believed: [AcknowledgementStatement] = []
        for statement in envelope.acknowledgements where statement.replica != replica.knowledgeID {
            guard !retired.contains(statement.replica) else { continue }
            if try pins.chain(of: statement.replica).isEmpty && !ReplicaIdentity.isKeyBound(statement.replica),
                let site = envelope.sites.firstIndex(where: { $0.id == statement.replica })
            {
                // A statement is its replica's own signature: one of a random ID not yet pinned
                // binds it, as its changes would (``bindAtFirstSignature``).
                let named = envelope.identities.filter { $0.site == site }.map(\.key)
                let candidates = named + envelope.moves.filter { $0.replica == statement.replica }.map(\.to)
                if let signer = candidates.first(where: { statement.isSigned(by: $0) }) {
                    try bindAtFirstSignature(site, signer: signer, envelope: envelope, path: path, replica: replica, pins: pins, trust: trust)
                }
            }
            guard let key = try pins.currentKey(of: statement.replica), statement.isSigned(by: key),
                trust.principal(for: key, namespace: BundleCodec.signatureNamespace) != nil
            else {
                ignored += 1
                continue
            }
            believed.append(statement)
        }
        return (believed, ignored == 0 ? [] : ["\(path): ignored \(ignored) statement(s) not signed by their replica's key"])
    }

    /// Keeps the newest believed statement of each replica for relaying, and records what it
    /// says as that replica's acknowledgement.
    static func recordAcknowledgements(_ statements: [AcknowledgementStatement], envelope: BundleEnvelope, replica: Replica) throws {
        let pins = try KeyPins(replica)
        for statement in statements {
            try pins.store(statement)
            let name = envelope.sites.first { $0.id == statement.replica }?.name ?? ""
            try replica.recordAcknowledgement(of: statement.replica, name: name, knowledge: statement.knowledge)
            if statement.countersFolded > 0 {
                try replica.recordCountersFolded(
                    of: statement.replica, folded: statement.countersFolded, at: statement.knowledge[statement.replica])
            }
        }
    }

    /// This replica's own acknowledgement statement, as bundles carry it, signed anew for
    /// what it holds now: its mailbox acknowledgement files carry it too, so that a replica
    /// with nothing to send still has its word relayed (docs/BUNDLE_FORMAT.md,
    /// "Acknowledgement statements"). `key` is one ``prepareToSign(replica:key:)`` checked
    /// against the replica's key chain, in this sync or a quiet one with the same key pins.
    public static func ownStatement(of replica: Replica, signedWith key: SigningKey) throws -> AcknowledgementStatement {
        try signOwnStatement(replica: replica, key: key)
    }

    /// Keeps, to relay, a statement a mailbox acknowledgement file of `knowledgeID` carried,
    /// when it is that replica's and newer than the one held. The file's signature, by the
    /// replica's current key (``checkAcknowledgementFile(of:name:signedBy:birth:replica:)``),
    /// covers it, so a key the replica moved from cannot bring one here (a bundle's statements
    /// are believed only by that key too); its own signature is what every receiver of a
    /// bundle that relays it checks.
    public static func keepStatement(_ statement: AcknowledgementStatement, of knowledgeID: String, replica: Replica) throws {
        guard statement.replica == knowledgeID, statement.replica != replica.knowledgeID else { return }
        try KeyPins(replica).store(statement)
    }

    /// The statements an export carries: every replica's latest (this one's included, so
    /// that relays can pass it on), but the receiver's own and those of `leaving` (replicas
    /// that read the same mailbox and say it there themselves); none of retired replicas.
    static func carriedStatements(of replica: Replica, except leaving: Set<String>) throws -> [AcknowledgementStatement] {
        let retired = try replica.retiredPeerIDs()
        return try KeyPins(replica).acknowledgementStatements().values
            .filter { !leaving.contains($0.replica) && !retired.contains($0.replica) }
            .sorted { $0.replica < $1.replica }
    }

    /// For a mailbox acknowledgement file of `knowledgeID`, signed by `key` (already
    /// verified against allowed_signers): nil when that is the replica's current key (bound
    /// now, by the rules of a first signature, if it had none), else why it is not believed.
    /// `birth`: the replica's birth as the file gives it (``ReplicaIdentity``).
    public static func checkAcknowledgementFile(
        of knowledgeID: String, name: String, signedBy key: SSHPublicKey, birth: [UInt8] = [], replica: Replica
    ) throws -> String? {
        let pins = try KeyPins(replica)
        let chain = try pins.chain(of: knowledgeID)
        if chain.isEmpty {
            if ReplicaIdentity.isKeyBound(knowledgeID) && !ReplicaIdentity.isBound(knowledgeID, to: key, birth: birth) {
                return "signed by key \(key.fingerprint), from which \(label(name, knowledgeID))'s knowledge ID was not made"
            }
            if let reason = try refusal(toBind: key, to: knowledgeID, birth: birth, owners: try pins.owners(of: key)) {
                return reason
            }
            try pins.bindFirst(key, to: knowledgeID, name: name.isEmpty ? nil : name, birth: birth)
            return nil
        }
        let current = chain.last { $0.untilSeq == nil }?.key
        return current == key
            ? nil
            : "signed by key \(key.fingerprint), but \(label(name, knowledgeID)) signs with key \(current?.fingerprint ?? "?")"
    }

    /// The fingerprint of a stored key line, as `ssh-keygen -l` shows it.
    public static func fingerprint(_ line: String) -> String {
        (try? SSHPublicKey(openSSHLine: line))?.fingerprint ?? displayText(line)
    }

    static func label(_ name: String, _ id: String) -> String {
        displayText(name.isEmpty ? id : "\(name) (\(id))")
    }

    private static func siteLabel(_ envelope: BundleEnvelope, _ site: Int) -> String {
        label(envelope.sites[site].name, envelope.sites[site].id)
    }
}

extension Replica {
    /// A replica's name and knowledge ID as this one knows them, for messages.
    func siteLabelForMessages(_ knowledgeID: String) throws -> String {
        KeyBinding.label(try siteName(of: knowledgeID), knowledgeID)
    }
}

extension KeyBinding {
    /// The keys `export --for` encrypts to for `reader` (`name`: as the user gave it): its
    /// pinned key, and no other once any replica has a scope, so that no file widens a scope.
    /// A retired reader, or one whose key left `allowed_signers`, gets nothing. Returns the
    /// keys and, when they are every trusted key, a note saying so.
    /// `choosingKeys` false (`--encrypt-to`, `--no-encrypt`): only the refusals apply.
    public static func exportRecipients(
        for reader: String, name: String, replica: Replica, trust: AllowedSigners, choosingKeys: Bool = true
    ) throws -> (keys: [SSHPublicKey], note: String?) {
        let path = replica.path
        if try replica.retiredPeerIDs().contains(reader) {
            throw ChangeLogError(.forbidden, "\(path): \(name) is retired here; refusing to write a bundle for it")
        }
        let trust = try Self.trust(trust, replica: replica)
        if let pinned = try currentKey(of: reader, replica: replica) {
            guard trust.principal(for: pinned, namespace: BundleCodec.signatureNamespace) != nil else {
                throw ChangeLogError(
                    .forbidden,
                    "\(path): \(name)'s key \(pinned.fingerprint) is no longer in allowed_signers; refusing to write a bundle for it")
            }
            return ([pinned], nil)
        }
        guard choosingKeys else { return ([], nil) }
        if try replica.adminRules().hasScopes {
            throw ChangeLogError(
                .forbidden,
                "\(path): \(name) has no key pinned here, and with scopes a bundle is encrypted only to its reader's own key; give --encrypt-to with its .pub, or sync with it once through a mailbox"
            )
        }
        let keys = try encryptionKeys(for: [reader], replica: replica, trust: trust)
        guard !keys.isEmpty else {
            throw ChangeLogError(
                .forbidden,
                "\(path): no key to encrypt for \(name) (none pinned, none in allowed_signers); give --encrypt-to KEY.pub or --no-encrypt")
        }
        return (keys, "\(name) has no key pinned here yet: encrypting to every trusted key (\(keys.count)); --encrypt-to KEY.pub names its key")
    }

    /// The keys a bundle for `readers` is encrypted to (docs/BUNDLE_FORMAT.md, "Encryption"):
    /// each reader's current pinned key; while any reader has none pinned yet, or no reader
    /// is known at all (a mailbox's first bundle, for whoever comes), every key `trust`
    /// allows to sign bundles, so that it can read the bundle all the same.
    /// `signedAcknowledgements`: the key that signed each reader's latest verified mailbox
    /// acknowledgement, used for a reader with no key pinned. `trust` is followed through
    /// recorded key moves first. `unmetReaders`: a mailbox may gain readers this replica has
    /// not met, so its bundle also goes to every trusted key pinned to no replica here
    /// (whoever comes next reads it at once, as before bundles were encrypted), never to a
    /// key of a replica met elsewhere that does not read this mailbox. `onlyPinned`: the
    /// readers' own keys and nothing else (under scopes, docs/SCOPES.md).
    public static func encryptionKeys(
        for readers: Set<String>, replica: Replica, trust: AllowedSigners, signedAcknowledgements: [String: SSHPublicKey] = [:],
        unmetReaders: Bool = false, onlyPinned: Bool = false
    ) throws -> [SSHPublicKey] {
        let pins = try KeyPins(replica)
        var keys: [SSHPublicKey] = []
        var unpinned = readers.subtracting([replica.knowledgeID]).isEmpty
        for reader in readers.sorted() where reader != replica.knowledgeID {
            if let key = try pins.currentKey(of: reader) ?? signedAcknowledgements[reader] {
                keys.append(key)
            } else {
                unpinned = true
            }
        }
        if (unpinned || unmetReaders) && !onlyPinned {
            let trust = try Self.trust(trust, replica: replica)
            for key in trust.entries.map(\.key) where trust.principal(for: key, namespace: BundleCodec.signatureNamespace) != nil {
                if try unpinned || pins.owners(of: key).isEmpty { keys.append(key) }
            }
        }
        var seen: Set<SSHPublicKey> = []
        return keys.filter { seen.insert($0).inserted }
    }
}

extension AllowedSigners {
    /// Every key with its first principal, for naming a key known only by a digest of it.
    public func keysAndPrincipals() -> [(SSHPublicKey, String)] {
        entries.map { ($0.key, $0.principals.first ?? "") }
    }

    /// This file plus the new key of every move whose old key it trusts, under the old
    /// key's entry (principal, namespaces, validity), following chains of moves.
    public func following(_ moves: [(from: SSHPublicKey, to: SSHPublicKey)]) -> AllowedSigners {
        // Asked once per segment an import reads: with no move, nothing to follow.
        guard !moves.isEmpty else { return self }
        var movesFrom: [SSHPublicKey: [SSHPublicKey]] = [:]
        for move in moves { movesFrom[move.from, default: []].append(move.to) }
        var entriesOf: [SSHPublicKey: [Entry]] = [:]
        for entry in entries { entriesOf[entry.key, default: []].append(entry) }
        var result = self
        // Each key is followed once, and one already present gains nothing, so this is
        // linear in entries plus moves, whatever order the moves come in.
        var pending = Array(entriesOf.keys)[...]
        while let key = pending.popFirst() {
            for to in movesFrom[key] ?? [] where entriesOf[to] == nil {
                let inherited = entriesOf[key, default: []].map { entry in
                    var entry = entry
                    entry.key = to
                    return entry
                }
                result.entries += inherited
                entriesOf[to] = inherited
                pending.append(to)
            }
        }
        return result
    }
}
