import ArgumentParser
import Bundle
import ChangeLog
import FoundationEssentials
import Glibc

extension SQSync {
    struct Init: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create sqsync's tables and this replica's identity (harmless to run again).",
            discussion: """
                With a key (--key, $SQSYNC_KEY, or ~/.config/sqsync/id_ed25519, when it exists), the \
                replica's knowledge ID is made from that key, so no other key can ever speak for it; \
                the replica then signs with that key (or keys it moves to with `keygen --rotate`). \
                Each replica also gets a birth of its own, so one key may make several replicas (two \
                databases on one laptop, a replica made again after a lost disk), each with its own \
                identity. Without a key it gets a random ID, bound to the first key it signs with.
                """)

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The SQLite database file (it must exist unless --create is given).") var db: String
        @Option(name: .long, help: "A human name for this replica (default: the file name).") var name: String?
        @Flag(name: .long, help: "Create the database file if it does not exist (a mistyped path is refused otherwise).")
        var create = false

        func run() throws {
            if !create && !FileManager.default.fileExists(atPath: db) {
                throw Failure.raise("\(db): no such file; to make a new, empty replica there, run `sqsync init \(db) --create`")
            }
            let key = FileManager.default.fileExists(atPath: global.keyPath) ? try global.signingKey() : nil
            // A birth of its own: one key may make several replicas, each its own identity.
            let birth = ReplicaIdentity.newBirth()
            let id = key.map { ReplicaIdentity.knowledgeID(for: $0.publicKey, birth: birth) }
            let (replica, created) = try Replica.initialize(path: db, name: name, knowledgeID: id)
            if created, let key { try KeyBinding.bindOwnIdentity(replica: replica, key: key.publicKey, birth: birth) }
            // Found in another file than its own, and init run on it: moved, not copied.
            let moved = try !created && replica.copiedAt() != nil
            if moved { try replica.confirmMoved() }
            if global.json {
                global.emitJSON([
                    "knowledge_id": replica.knowledgeID, "name": displayText(replica.name), "created": created,
                    "key_bound": ReplicaIdentity.isKeyBound(replica.knowledgeID), "moved": moved,
                ])
            } else if created {
                global.say(
                    "initialized \(db) as replica \(displayText(replica.name)) (\(replica.knowledgeID))"
                        + (key.map { ", its identity made from key \($0.publicKey.fingerprint)" }
                            ?? "; no key at \(global.keyPath): its identity is bound to the first key it signs with"))
                global.say(
                    "\(db) now uses SQLite's write-ahead log (journal_mode WAL), so the app reads while sqsync writes: keep its -wal and -shm files with it")
            } else if moved {
                global.say("\(db) is replica \(displayText(replica.name)) (\(replica.knowledgeID)), moved here from another file")
            } else {
                global.say("\(db) is already replica \(displayText(replica.name)) (\(replica.knowledgeID))")
            }
        }
    }
}
