import ChangeLog
import Foundation

/// Binds every replica to the one key it signs with (docs/KEYS.md).
///
/// `allowed_signers` says which keys may sign at all; it does not say which replica a key
/// speaks for, so one stolen trusted key could otherwise sign bundles "from" any replica,
/// acknowledgements included, and make peers purge deletions that replica never saw. Here
/// the first validly signed bundle, statement or acknowledgement file seen from a replica
/// pins its key; a key is pinned to one replica only; a pin moves only through a key move
/// signed by the pinned key; and what a bundle says on behalf of a replica other than its
/// sender is believed only from a statement that replica signed itself.
public enum KeyBinding {
    // MARK: This replica's own key

    /// Before this replica signs anything: `key` must be its own (pinned at the first export),
    /// not one pinned to another replica it knows (a clone still using its source's key), nor
    /// one it rotated away from. Then signs a fresh acknowledgement statement when its
    /// knowledge changed since the last one, for its bundles to carry.
    public static func prepareToSign(replica: Replica, key: SigningKey) throws {
        try replica.fold()
        try replica.database.inTransaction {
            try checkOwn(replica: replica, key: key)
            let knowledge = try replica.knowledge()
            let countersFolded = try replica.countersFolded()
            let stored = try KeyPins(replica).acknowledgementStatements()[replica.knowledgeID]
            if let stored, let statement = try? SignedStatement(encoded: stored.statement),
                statement.signer == key.publicKey, statement.countersFolded == countersFolded,
                case .acknowledgement(_, _, let signed) = statement.claim, signed == knowledge
            {
                return
            }
            let counter = (stored?.counter ?? 0) + 1
            let statement = try SignedStatement.acknowledgement(
                replica: replica.knowledgeID, name: try replica.siteName(of: replica.knowledgeID), counter: counter,
                knowledge: knowledge, countersFolded: countersFolded, key: key)
            try KeyPins(replica).storeAcknowledgementStatement(
                of: replica.knowledgeID, counter: counter, statement: statement.encoded)
        }
    }

    private static func checkOwn(replica: Replica, key: SigningKey) throws {
        let me = replica.knowledgeID
        let line = key.publicKey.openSSHLine
        if let other = try KeyPins(replica).replica(pinnedTo: line, except: me) {
            throw ChangeLogError(
                .identityClash,
                "\(replica.path): key \(key.publicKey.fingerprint) is bound to replica \(label(other.name, other.id)); give this replica its own key (sqsync keygen) and add its line to allowed_signers on its peers"
            )
        }
        if let move = try KeyPins(replica).keyMove(from: line) {
            throw ChangeLogError(
                .identityClash,
                "\(replica.path): key \(key.publicKey.fingerprint) was rotated away from (to \(fingerprint(move.to))); sign with the new key"
            )
        }
        guard let pinned = try KeyPins(replica).pinnedKey(of: me) else {
            try KeyPins(replica).pin(key: line, of: me, name: nil)
            return
        }
        guard pinned == line else {
            throw ChangeLogError(
                .identityClash,
                "\(replica.path): this replica signs with key \(fingerprint(pinned)), not \(key.publicKey.fingerprint); give --key its own key, or move it with `sqsync keygen --rotate \(replica.path)`"
            )
        }
    }

    /// Moves this replica to a new key: records the move signed by the old key (bundles
    /// carry it, and peers that pinned the old key follow it) and signs from now on with
    /// `newKey` only.
    public static func rotate(replica: Replica, from oldKey: SigningKey, to newKey: SigningKey) throws {
        try replica.database.inTransaction {
            try checkOwn(replica: replica, key: oldKey)
            let move = try SignedStatement.keyMove(replica: replica.knowledgeID, from: oldKey, to: newKey.publicKey)
            try KeyPins(replica).storeKeyMove(
                from: oldKey.publicKey.openSSHLine, replica: replica.knowledgeID, to: newKey.publicKey.openSSHLine,
                statement: move.encoded)
            try KeyPins(replica).pin(key: newKey.publicKey.openSSHLine, of: replica.knowledgeID, name: nil)
        }
        try prepareToSign(replica: replica, key: newKey)
    }

    /// The statements an export carries: every replica's latest acknowledgement statement
    /// (but the receiver's own, when it is known) and every key move, as they were signed;
    /// none of retired replicas.
    static func carriedStatements(of replica: Replica, except receiver: String?) throws -> [[UInt8]] {
        let retired = try replica.retiredPeerIDs()
        return try KeyPins(replica).keyMoves().filter { !retired.contains($0.replica) }.map(\.statement)
            + KeyPins(replica).acknowledgementStatements().filter { $0.key != receiver && !retired.contains($0.key) }
            .sorted { $0.key < $1.key }.map(\.value.statement)
    }

    // MARK: Bundles and statements from others

    /// `trust` plus the keys that valid key moves in `statements` (or held by `replica`)
    /// lead to from a trusted key, under the old key's principal: a rotated key is trusted
    /// as long as the key it came from is, so removing that one from allowed_signers
    /// revokes both.
    public static func trust(_ trust: AllowedSigners, following statements: [[UInt8]], replica: Replica?) -> AllowedSigners {
        var moves: [(replica: String, from: SSHPublicKey, to: SSHPublicKey)] = statements.compactMap { bytes in
            guard let statement = try? SignedStatement(encoded: bytes), case .keyMove(let from, let to) = statement.claim
            else { return nil }
            return (statement.replica, from, to)
        }
        for move in (try? replica.map(KeyPins.init)?.keyMoves()) ?? [] {
            if let from = try? SSHPublicKey(openSSHLine: move.from), let to = try? SSHPublicKey(openSSHLine: move.to) {
                moves.append((move.replica, from, to))
            }
        }
        // A key bound to one replica cannot hand trust to a key for another.
        let honest = moves.filter { move in
            guard let replica else { return true }
            return (try? KeyPins(replica).replica(pinnedTo: move.from.openSSHLine, except: move.replica)) == nil
        }
        return trust.following(honest.map { ($0.from, $0.to) })
    }

    /// Checks, inside the import transaction, that the bundle's signer is its sender's key,
    /// after following the key moves it carries; pins the key of a sender seen for the first
    /// time; then believes the acknowledgement statements signed by their replica's key.
    /// Throws ``BundleError`` (`untrusted`) when the signer speaks for another replica.
    static func admit(
        header: ChangeSetHeader, signer: SSHPublicKey, path: String, replica: Replica, trust: AllowedSigners
    ) throws -> [String] {
        let statements = header.statements.compactMap { try? SignedStatement(encoded: $0) }
        var ignored = header.statements.count - statements.count
        try followKeyMoves(statements, replica: replica, trust: trust)
        let sender = header.sender
        let line = signer.openSSHLine
        if let pinned = try KeyPins(replica).pinnedKey(of: sender) {
            guard pinned == line else {
                throw BundleError(
                    .untrusted,
                    "\(path): the bundle claims to come from \(label(header.senderName, sender)), which signs with key \(fingerprint(pinned)), but it is signed by key \(signer.fingerprint); refusing it"
                )
            }
        } else if let reason = try refusalToPin(line, for: sender, replica: replica) {
            throw BundleError(.untrusted, "\(path): the bundle claims to come from \(label(header.senderName, sender)), but \(reason); refusing it")
        } else if sender != replica.knowledgeID {
            try KeyPins(replica).pin(key: line, of: sender, name: header.senderName)
        }
        let retired = try replica.retiredPeerIDs()
        for statement in statements {
            guard case .acknowledgement(let name, let counter, let knowledge) = statement.claim,
                statement.replica != replica.knowledgeID, !retired.contains(statement.replica)
            else { continue }
            guard try accept(statement.signer, for: statement.replica, name: name, replica: replica, trust: trust)
            else {
                ignored += 1
                continue
            }
            try KeyPins(replica).storeAcknowledgementStatement(of: statement.replica, counter: counter, statement: statement.encoded)
            try replica.recordAcknowledgement(of: statement.replica, name: name, knowledge: knowledge)
            if statement.countersFolded > 0 {
                try replica.recordCountersFolded(
                    of: statement.replica, folded: statement.countersFolded, at: knowledge[statement.replica])
            }
        }
        return ignored == 0 ? [] : ["\(path): ignored \(ignored) statement(s) not signed by their replica's key"]
    }

    /// For a mailbox acknowledgement file of `knowledgeID`, signed by `key` (already
    /// verified against allowed_signers): nil when that is the replica's key (pinned now if
    /// it had none), else why the file is not believed.
    public static func checkAcknowledgementFile(
        of knowledgeID: String, name: String, signedBy key: SSHPublicKey, replica: Replica
    ) throws -> String? {
        let line = key.openSSHLine
        if let pinned = try KeyPins(replica).pinnedKey(of: knowledgeID) {
            return pinned == line
                ? nil
                : "signed by key \(key.fingerprint), but \(label(name, knowledgeID)) signs with key \(fingerprint(pinned))"
        }
        if let reason = try refusalToPin(line, for: knowledgeID, replica: replica) { return reason }
        try KeyPins(replica).pin(key: line, of: knowledgeID, name: name)
        return nil
    }

    /// Moves pins along valid key moves signed by the pinned key (repeatedly, for a chain),
    /// and keeps every move that leaves a trusted or pinned key, for relay.
    private static func followKeyMoves(_ statements: [SignedStatement], replica: Replica, trust: AllowedSigners) throws {
        var moved = true
        while moved {
            moved = false
            for statement in statements {
                guard case .keyMove(let from, let to) = statement.claim else { continue }
                let pinned = try KeyPins(replica).pinnedKey(of: statement.replica)
                let fromPinned = pinned == from.openSSHLine
                let boundElsewhere = try KeyPins(replica).replica(pinnedTo: from.openSSHLine, except: statement.replica) != nil
                let unboundAndTrusted =
                    pinned == nil && !boundElsewhere
                    && trust.principal(for: from, namespace: SignedStatement.namespace) != nil
                guard fromPinned || unboundAndTrusted else { continue }
                try KeyPins(replica).storeKeyMove(
                    from: from.openSSHLine, replica: statement.replica, to: to.openSSHLine, statement: statement.encoded)
                if fromPinned, try KeyPins(replica).replica(pinnedTo: to.openSSHLine, except: statement.replica) == nil {
                    try KeyPins(replica).pin(key: to.openSSHLine, of: statement.replica, name: nil)
                    moved = true
                }
            }
        }
    }

    /// Whether a statement signed by `key` may speak for `knowledgeID`: its pinned key, or,
    /// for a replica not pinned yet, a trusted key bound to no other replica (pinned now).
    private static func accept(
        _ key: SSHPublicKey, for knowledgeID: String, name: String, replica: Replica, trust: AllowedSigners
    ) throws -> Bool {
        let line = key.openSSHLine
        if let pinned = try KeyPins(replica).pinnedKey(of: knowledgeID) { return pinned == line }
        guard trust.principal(for: key, namespace: SignedStatement.namespace) != nil,
            try refusalToPin(line, for: knowledgeID, replica: replica) == nil
        else { return false }
        try KeyPins(replica).pin(key: line, of: knowledgeID, name: name)
        return true
    }

    /// Why `key` cannot become the key of `knowledgeID`, if it cannot.
    private static func refusalToPin(_ key: String, for knowledgeID: String, replica: Replica) throws -> String? {
        if let other = try KeyPins(replica).replica(pinnedTo: key, except: knowledgeID) {
            return "its key \(fingerprint(key)) is bound to replica \(label(other.name, other.id))"
        }
        if try KeyPins(replica).keyMove(from: key) != nil {
            return "its key \(fingerprint(key)) was rotated away from"
        }
        return nil
    }

    /// The fingerprint of a stored key line, as `ssh-keygen -l` shows it.
    public static func fingerprint(_ line: String) -> String {
        (try? SSHPublicKey(openSSHLine: line))?.fingerprint ?? line
    }

    static func label(_ name: String, _ id: String) -> String {
        name.isEmpty ? id : "\(name) (\(id))"
    }
}

extension AllowedSigners {
    /// This file plus the new key of every move whose old key it trusts, under the old
    /// key's entry (principal, namespaces, validity), following chains of moves.
    func following(_ moves: [(from: SSHPublicKey, to: SSHPublicKey)]) -> AllowedSigners {
        var result = self
        var added = true
        while added {
            added = false
            for move in moves where !result.entries.contains(where: { $0.key == move.to }) {
                for entry in result.entries where entry.key == move.from {
                    var inherited = entry
                    inherited.key = move.to
                    result.entries.append(inherited)
                    added = true
                }
            }
        }
        return result
    }
}
