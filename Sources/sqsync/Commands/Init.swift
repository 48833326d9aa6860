import ArgumentParser
import ChangeLog

extension SQSync {
    struct Init: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create sqsync's tables and this replica's identity (harmless to run again).")

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The SQLite database file (created if missing).") var db: String
        @Option(name: .long, help: "A human name for this replica (default: the file name).") var name: String?

        func run() throws {
            let (replica, created) = try Replica.initialize(path: db, name: name)
            if global.json {
                global.emitJSON(["knowledge_id": replica.knowledgeID, "name": replica.name, "created": created])
            } else {
                global.say(
                    created
                        ? "initialized \(db) as replica \(replica.name) (\(replica.knowledgeID))"
                        : "\(db) is already replica \(replica.name) (\(replica.knowledgeID))")
            }
        }
    }
}
