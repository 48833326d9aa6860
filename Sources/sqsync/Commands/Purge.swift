import ArgumentParser
import Bundle
import ChangeLog

extension SQSync {
    struct Purge: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Drop deletion records that every live peer has acknowledged.")

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica.") var db: String
        @Flag(name: .long, help: "Report what would be dropped; change nothing.") var dryRun = false

        func run() throws {
            let result = try Replica(path: db).purge(dryRun: dryRun)
            let holders = result.heldBackBy.map { $0.name.isEmpty ? $0.knowledgeID : $0.name }
            if global.json {
                global.emitJSON([
                    "dry_run": dryRun, "tombstones_purged": result.tombstones, "held_back_by": holders,
                    "counter_entries_folded": result.counterEntries,
                ])
            } else {
                let folded = result.counterEntries == 0 ? "" : ", folded \(counted(result.counterEntries, "counter entry", "counter entries"))"
                global.say(
                    "\(dryRun ? "would purge" : "purged") \(counted(result.tombstones, "tombstone"))\(folded)"
                        + (holders.isEmpty ? "" : "; kept others for \(holders.joined(separator: ", "))"))
            }
        }
    }
}
