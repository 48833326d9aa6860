import ArgumentParser
import ChangeLog
import FoundationEssentials
import Glibc
import SQLiteDatabase

extension SQSync {
    struct Doctor: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check that triggers match the schema and the metadata is consistent.")

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica.") var db: String

        func run() throws {
            let replica = try Replica(path: db)
            let folded = try replica.foldUnlessBusy()
            if !folded { global.say(GlobalOptions.notFolded(db)) }
            var problems = try replica.doctor(folding: false)
            if try replica.isMigrating() {
                problems.append("a migration is in progress (refresh --before-migration took the triggers off); run `sqsync refresh \(db)` when it is done")
            }
            // Finding writes no trigger captured writes (and rolls back): not while an app writes.
            var uncaptured: [UncapturedWrites] = []
            do {
                uncaptured = try replica.database.withoutWaiting { try replica.uncapturedWrites() }
            } catch let error as SQLiteError where error.isBusy {
                global.say("sqsync: note: \(db): writes no trigger captured were not looked for while an app holds a write transaction")
            }
            for writes in uncaptured {
                problems.append(
                    "table \(writes.table) has writes no trigger captured (\(counted(writes.inserts, "insert")), \(counted(writes.deletes, "delete")), \(counted(writes.updates, "update"))); run `sqsync refresh \(db)` to capture them"
                )
            }
            // Not a problem (a table may be local on purpose), but nothing else would say it does not sync.
            let untracked = try replica.untrackedTablesWithPrimaryKey()
            let note = untracked.isEmpty
                ? nil
                : "not tracked, so not synced: \(untracked.map(displayText).joined(separator: ", ")) (`sqsync track \(db) TABLE` to sync one)"
            if global.json {
                global.emitJSON(["ok": problems.isEmpty, "problems": problems, "untracked": untracked, "pending_not_folded": !folded])
            } else if problems.isEmpty {
                global.say("\(db): ok" + (note.map { "; \($0)" } ?? ""))
            } else {
                if let note { writeStandardError("sqsync: \(db): note: \(note)\n") }
                for problem in problems {
                    writeStandardError("sqsync: \(db): " + problem + "\n")
                }
            }
            if !problems.isEmpty { throw ExitCode(Failure.failed) }
        }
    }
}
