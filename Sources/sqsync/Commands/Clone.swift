import ArgumentParser
import Bundle
import ChangeLog
import Transport
import Foundation

extension SQSync {
    struct Clone: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Copy a live replica to a new file with a new identity (safe while apps write).",
            discussion: """
                --key names the new replica's own key (its private key, or just its `.pub` file): \
                its knowledge ID is made from it, so no other key can ever speak for it. Without a key of its own (none given, or the source's), \
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
            if FileManager.default.fileExists(atPath: global.keyPath) {
                let key = try global.publicKey()
                let sourceKey = try KeyBinding.currentKey(of: replica.knowledgeID, replica: replica)
                let keyID = ReplicaIdentity.knowledgeID(for: key)
                if key == sourceKey || keyID == replica.knowledgeID {
                    if global.key != nil {
                        throw Failure.raise("\(global.keyPath) is \(source)'s own key; give the clone a key of its own (sqsync keygen)")
                    }
                } else {
                    id = keyID
                }
            }
            let copy = try replica.clone(to: destination, name: name, knowledgeID: id, emptying: Mailbox.perFileTables)
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
