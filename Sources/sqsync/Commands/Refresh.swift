import ArgumentParser
import ChangeLog
import FoundationEssentials
import Glibc

extension SQSync {
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
}
