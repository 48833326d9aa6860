import ArgumentParser
import ChangeLog
import Foundation

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
            let names = all ? try replica.userTableNames() : tables
            let captured = try replica.track(names, allowIntegerPrimaryKey: allowIntegerPk)
            if global.json {
                global.emitJSON(["tracked": captured.map { ["table": $0.table, "rows_captured": $0.rows] }])
            } else {
                for entry in captured { global.say("tracking \(entry.table) (\(counted(entry.rows, "existing row")) captured)") }
            }
        }
    }

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

    struct Refresh: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Rebuild triggers after a schema migration.")

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica.") var db: String

        func run() throws {
            let replica = try Replica(path: db)
            let tables = try replica.refresh()
            if global.json {
                global.emitJSON(["refreshed": tables])
            } else {
                global.say("rebuilt triggers for \(counted(tables.count, "table"))")
            }
        }
    }

    struct Doctor: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check that triggers match the schema and the metadata is consistent.")

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica.") var db: String

        func run() throws {
            let replica = try Replica(path: db)
            let problems = try replica.doctor()
            if global.json {
                global.emitJSON(["ok": problems.isEmpty, "problems": problems])
            } else if problems.isEmpty {
                global.say("\(db): ok")
            } else {
                for problem in problems {
                    FileHandle.standardError.write(("sqsync: \(db): " + problem + "\n").data(using: .utf8)!)
                }
            }
            if !problems.isEmpty { throw ExitCode(Failure.failed) }
        }
    }

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
