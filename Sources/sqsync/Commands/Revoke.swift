import ArgumentParser
import Bundle
import ChangeLog
import FoundationEssentials
import Glibc

extension SQSync {
    struct Revoke: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Take operations back from a replica's grants on a table (an admin statement).",
            discussion: """
                Without OPS, every operation. A replica named by a revoke stays restricted to what its \
                grants allow, even when none is left. Needs an admin key.
                """)

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica.") var db: String
        @Argument(help: "The replica (name or knowledge ID).") var replicaName: String
        @Argument(help: "A table.") var table: String
        @Argument(help: "insert, update, delete: a comma list (default: all).") var operations: String?

        func validate() throws {
            if let operations, GrantOperations(list: operations) == nil {
                throw ValidationError("OPS is a comma list of insert, update, delete, not \(operations)")
            }
        }

        func run() throws {
            let replica = try Replica(path: db)
            let id = try AdminCommand.knowledgeID(of: replicaName, in: replica)
            let revoked = operations.flatMap(GrantOperations.init(list:)) ?? .all
            try AdminCommand.issue(.revoke(replica: id, table: table, operations: revoked), replica: replica, global: global)
            if global.json {
                global.emitJSON(["replica": id, "table": table, "revoked": revoked.description])
            } else {
                global.say("\(try AdminCommand.label(id, in: replica)) may no longer \(revoked) on \(table)")
            }
        }
    }
}
