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
        static let configuration = CommandConfiguration(
            abstract: "Rebuild triggers after a schema migration and capture writes no trigger saw.",
            discussion: """
                Before a migration that drops a column or rebuilds a table, run `sqsync refresh DB --before-migration`: \
                it takes the triggers off (SQLite refuses to drop a column a trigger names) and keeps a copy of the \
                tracked values. After the migration, `sqsync refresh DB` puts them back, follows renamed tables and \
                columns, and captures every insert, delete and update made in between.
                """)

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica.") var db: String
        @Flag(name: .customLong("before-migration"), help: "Take the triggers off for a migration; run refresh again after it.")
        var beforeMigration = false

        func run() throws {
            let replica = try Replica(path: db)
            if beforeMigration {
                let tables = try replica.prepareMigration()
                if global.json {
                    global.emitJSON(["prepared": tables])
                } else {
                    global.say(
                        "took the triggers off \(counted(tables.count, "table")); migrate, then run `sqsync refresh \(db)`")
                }
                return
            }
            let result = try replica.refresh()
            if global.json {
                global.emitJSON([
                    "refreshed": result.tables, "renamed_tables": result.renamedTables,
                    "renamed_columns": result.renamedColumns, "dropped_columns": result.droppedColumns,
                    "captured": [
                        "inserts": result.capturedInserts, "deletes": result.capturedDeletes,
                        "updates": result.capturedUpdates,
                    ],
                ])
                return
            }
            var lines = ["rebuilt triggers for \(counted(result.tables.count, "table"))"]
            for (old, new) in result.renamedTables.sorted(by: { $0.key < $1.key }) { lines.append("table \(old) is now \(new)") }
            for (old, new) in result.renamedColumns.sorted(by: { $0.key < $1.key }) {
                lines.append("column \(old) is now \(new)")
            }
            for column in result.droppedColumns { lines.append("column \(column) was dropped; peers' changes to it are ignored") }
            let captured = result.capturedInserts + result.capturedDeletes + result.capturedUpdates
            if captured > 0 {
                lines.append(
                    "captured writes made while no trigger ran: \(counted(result.capturedInserts, "insert")), \(counted(result.capturedDeletes, "delete")), \(counted(result.capturedUpdates, "update"))"
                )
            }
            global.say(lines.joined(separator: "\n"))
        }
    }

    struct Doctor: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check that triggers match the schema and the metadata is consistent.")

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica.") var db: String

        func run() throws {
            let replica = try Replica(path: db)
            var problems = try replica.doctor()
            if try replica.isMigrating() {
                problems.append("a migration is in progress (refresh --before-migration took the triggers off); run `sqsync refresh \(db)` when it is done")
            }
            for writes in try replica.uncapturedWrites() {
                problems.append(
                    "table \(writes.table) has writes no trigger captured (\(counted(writes.inserts, "insert")), \(counted(writes.deletes, "delete")), \(counted(writes.updates, "update"))); run `sqsync refresh \(db)` to capture them"
                )
            }
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
