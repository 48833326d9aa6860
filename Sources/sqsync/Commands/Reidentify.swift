import ArgumentParser
import Bundle
import ChangeLog
import FoundationEssentials
import Glibc

extension SQSync {
    struct Reidentify: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Give a file copied with cp (or restored from a backup) an identity of its own.",
            discussion: """
                A copy shares its original's identity: each would lose the other's changes, so a copy \
                sends nothing until it is given its own. Its rows stay; what it wrote since it parted \
                from the original (or, when that is not known, what no peer acknowledged) becomes the \
                new identity's changes, and the original becomes a peer. --key names the key it signs \
                with from now on (its own, or the original's: one key may speak for several replicas). \
                It takes --name, or the file's name, or (restored in place, where that is the old \
                name) the old name with the new ID's first characters: peers then tell the two apart.
                """)

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The copied replica.") var db: String
        @Option(help: "The new replica's name (default: the file's name, unless that is the old one).") var name: String?

        func run() throws {
            let replica = try Replica(path: db)
            let key = try global.signingKey()
            let birth = ReplicaIdentity.newBirth()
            let id = ReplicaIdentity.knowledgeID(for: key.publicKey, birth: birth)
            let result = try replica.reidentify(as: id, name: name)
            try KeyBinding.bindOwnIdentity(replica: replica, key: key.publicKey, birth: birth)
            if global.json {
                global.emitJSON([
                    "knowledge_id": id, "previous_knowledge_id": result.previousKnowledgeID,
                    "shared_through": result.sharedThrough, "changes_taken": result.changesTaken,
                ])
            } else {
                global.say(
                    "\(db) is now replica \(displayText(replica.name)) (\(id)), its identity made from key \(key.publicKey.fingerprint); \(counted(result.changesTaken, "write")) made since it parted from \(result.previousKnowledgeID) (after its change \(result.sharedThrough)) are its own now, and sync with its next run"
                )
            }
        }
    }
}
