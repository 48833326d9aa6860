import ArgumentParser
import ChangeLog
import FoundationEssentials
import Glibc

extension SQSync {
    struct Untrack: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove capture triggers and sqsync's metadata for tables; their rows stay.")

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica.") var db: String
        @Argument(help: "Tables to stop tracking.") var tables: [String]

        func run() throws {
            let replica = try Replica(path: db)
            try replica.untrack(tables)
            if global.json {
                global.emitJSON(["untracked": tables])
            } else {
                global.say("untracked \(tables.joined(separator: ", "))")
            }
        }
    }
}
