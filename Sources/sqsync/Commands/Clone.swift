import ArgumentParser
import Bundle
import ChangeLog
import Transport
import FoundationEssentials
import Glibc

extension SQSync {
    struct Clone: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Copy a live replica to a new file with a new identity (safe while apps write).",
            discussion: """
                --key names the new replica's own key (its private key, or just its `.pub` file): \
                its knowledge ID is made from it, so no other key can ever speak for it (from it and a \
                birth of its own when that key already speaks for a replica known here, the source's \
                included). Without a key given (and a default key that is the source's), \
                the clone gets a random ID, bound to the first key it signs with. The source holds \
                back purges for the clone until the clone syncs or is retired.
                """)

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica to copy.") var source: String
        @Argument(help: "The new file.") var destination: String
        @Option(name: .long, help: "A name for the new replica.") var name: String?

        func run() throws {
            let replica = try Replica(path: source)
            var id: String?
            var identity: (key: SSHPublicKey, birth: [UInt8])?
            if FileManager.default.fileExists(atPath: global.keyPath) {
                let key = try global.publicKey()
                let sourceKey = try KeyBinding.currentKey(of: replica.knowledgeID, replica: replica)
                let sourcesOwn = key == sourceKey || ReplicaIdentity.isBound(replica.knowledgeID, to: key)
                // The default key, when it is the source's, was not chosen for the clone: a
                // random ID, bound at its first signature, as before.
                if !sourcesOwn || global.key != nil {
                    // A key no replica known here uses makes the ID of the key alone, which an
                    // admin can name in statements before the clone exists; a key that already
                    // speaks for a replica (the source's, given on purpose) gets a birth of its
                    // own: one key, several replicas.
                    let birth = try sourcesOwn || KeyBinding.speaksForAReplica(key, replica: replica) ? ReplicaIdentity.newBirth() : []
                    id = ReplicaIdentity.knowledgeID(for: key, birth: birth)
                    identity = (key, birth)
                }
            }
            let copy = try global.showingProgress(of: replica, destination) {
                try replica.clone(to: destination, name: name, knowledgeID: id, emptying: Mailbox.perFileTables)
            }
            if let identity { try KeyBinding.bindOwnIdentity(replica: copy, key: identity.key, birth: identity.birth) }
            if global.json {
                global.emitJSON([
                    "knowledge_id": copy.knowledgeID, "name": displayText(copy.name), "path": destination,
                    "key_bound": id != nil,
                ])
            } else {
                global.say(
                    "cloned \(source) to \(destination) as replica \(displayText(copy.name)) (\(copy.knowledgeID))"
                        + (id == nil ? "; it has no key of its own yet: its identity is bound to the first key it signs with" : ""))
                // The source now counts the clone as a peer: purges there wait for it.
                global.say(
                    "\(source) keeps deletions for \(displayText(copy.name)) until it syncs; if the clone is thrown away, run `sqsync peers retire \(source) \(copy.knowledgeID)`"
                )
            }
        }
    }
}
