import ArgumentParser
import ChangeLog
import Foundation

extension SQSync {
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
}
