import ArgumentParser
import ChangeLog
import Foundation

extension SQSync {
    struct Clone: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Copy a live replica to a new file with a new identity (safe while apps write).")

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica to copy.") var source: String
        @Argument(help: "The new file.") var destination: String
        @Option(name: .long, help: "A name for the new replica.") var name: String?

        func run() throws {
            let replica = try Replica(path: source)
            let copy = try replica.clone(to: destination, name: name)
            if global.json {
                global.emitJSON(["knowledge_id": copy.knowledgeID, "name": copy.name, "path": destination])
            } else {
                global.say("cloned \(source) to \(destination) as replica \(copy.name) (\(copy.knowledgeID))")
            }
        }
    }
}
