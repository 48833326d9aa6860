import ArgumentParser
import ChangeLog
import FoundationEssentials
import Glibc

extension SQSync {
    struct Track: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Install capture triggers; rows already there become this replica's changes.")

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica.") var db: String
        @Argument(help: "Tables to track.") var tables: [String] = []
        @Flag(name: .long, help: "Track every table in the database.") var all = false
        @Flag(name: .long, help: "Allow INTEGER PRIMARY KEY tables (only if replicas never hand out the same keys).")
        var allowIntegerPk = false

        func validate() throws {
            if all == !tables.isEmpty {
                throw ValidationError("give either table names or --all")
            }
        }

        func run() throws {
            let replica = try Replica(path: db)
            var names = tables
            var leftOut: [ChangeLogError] = []
            if all { (names, leftOut) = try replica.trackableTables() }
            let captured = try global.showingProgress(of: replica, db) { try replica.track(names, allowIntegerPrimaryKey: allowIntegerPk) }
            for refusal in leftOut { writeStandardError("sqsync: warning: not tracked: \(refusal.description)\n") }
            if global.json {
                global.emitJSON([
                    "tracked": captured.map { ["table": $0.table, "rows_captured": $0.rows] },
                    "not_tracked": leftOut.map(\.description),
                ])
            } else {
                for entry in captured { global.say("tracking \(entry.table) (\(counted(entry.rows, "existing row")) captured)") }
            }
        }
    }
}
