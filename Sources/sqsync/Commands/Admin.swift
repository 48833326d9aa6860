import ArgumentParser
import Bundle
import ChangeLog
import FoundationEssentials
import Glibc

/// What `label`, `scope`, `grant` and `revoke` share: they sign an admin statement with an
/// admin key and apply it here; bundles carry it to every other replica (docs/SCOPES.md).
enum AdminCommand {
    /// Signs `act` with the command's key, refusing (exit 1) a key that `allowed_signers`
    /// does not allow the namespace `sqsync-admin`, and applies it to the replica, with
    /// `afterwards` in the same transaction.
    static func issue(_ act: AdminAct, replica: Replica, global: GlobalOptions, afterwards: () throws -> Void = {}) throws {
        let key = try global.signingKey()
        let trust = try global.trustedSigners()
        guard trust.principal(for: key.publicKey, namespace: SignedAdminStatement.namespace) != nil else {
            throw Failure.raise(
                "\(global.keyPath): key \(key.publicKey.fingerprint) is not an admin key; its line in \(global.trustPath) must allow namespace \(SignedAdminStatement.namespace) (namespaces=\"sqsync,sqsync-admin\")"
            )
        }
        guard act.isWellFormed else {
            throw Failure.raise(
                "\(replica.path): names and labels cannot hold control characters, and a label is one expression over the row's own columns",
                exitCode: 2)
        }
        // Statements replay in the order they were issued: never before one held here.
        let issued = max(ClockBound.now, (try replica.adminStatements().map(\.issued).max() ?? 0) + 1)
        let statement = try SignedAdminStatement.sign(act, key: key, issued: issued)
        try replica.database.inTransaction {
            try replica.issueAdminStatement(statement.stored)
            try afterwards()
        }
    }

    /// A replica named on the command line (this one, a peer by name or ID, or a knowledge ID
    /// not met yet), as its knowledge ID.
    static func knowledgeID(of name: String, in replica: Replica) throws -> String {
        let ownName = try replica.siteName(of: replica.knowledgeID)
        if name.lowercased() == replica.knowledgeID || name == ownName {
            return replica.knowledgeID
        }
        if let peer = try? replica.peer(named: name) { return peer.knowledgeID }
        guard let id = UUID(uuidString: name) else {
            throw Failure.raise("\(replica.path): no replica named \(name) (see `sqsync peers \(replica.path)`), and not a knowledge ID")
        }
        return id.uuidString.lowercased()
    }

    /// "name (ID)" when the replica's name is known here.
    static func label(_ id: String, in replica: Replica) throws -> String {
        let name = try replica.siteName(of: id)
        return name.isEmpty ? id : "\(name) (\(id))"
    }

    static func rules(of replica: Replica) throws -> AdminRules { try replica.adminRules() }
}
