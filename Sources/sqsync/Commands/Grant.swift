import ArgumentParser
import Bundle
import ChangeLog
import FoundationEssentials
import Glibc

extension SQSync {
    struct Grant: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Let a replica change a table (an admin statement), or list the grants.",
            discussion: """
                OPS is a comma list of insert, update, delete; --label limits the grant to rows with those \
                labels. A replica with no grant may change everything; one with any grant (or revoke) only \
                what its grants allow: its own writes fail in the writer, and its changes that arrive \
                otherwise are applied nowhere and listed by `sqsync conflicts`. Needs an admin key.
                """)

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica.") var db: String
        @Argument(help: "The replica granted (name or knowledge ID).") var replicaName: String?
        @Argument(help: "A table.") var table: String?
        @Argument(help: "insert, update, delete: a comma list.") var operations: String?
        @Option(name: .customLong("label"), parsing: .upToNextOption, help: "Only rows with these labels.") var labels: [String] = []

        func validate() throws {
            if replicaName != nil && (table == nil || operations == nil) {
                throw ValidationError("give REPLICA TABLE OPS to grant, or only DB to list the grants")
            }
            if let operations, GrantOperations(list: operations) == nil {
                throw ValidationError("OPS is a comma list of insert, update, delete, not \(operations)")
            }
        }

        func run() throws {
            let replica = try Replica(path: db)
            guard let replicaName, let table, let operations, let granted = GrantOperations(list: operations) else {
                try list(try AdminCommand.rules(of: replica), replica: replica)
                return
            }
            let id = try AdminCommand.knowledgeID(of: replicaName, in: replica)
            try AdminCommand.issue(
                .grant(replica: id, table: table, operations: granted, labels: labels), replica: replica, global: global)
            if global.json {
                global.emitJSON(["replica": id, "table": table, "operations": granted.description, "labels": labels])
            } else {
                global.say(
                    "\(try AdminCommand.label(id, in: replica)) may \(granted) on \(table)"
                        + (labels.isEmpty ? "" : " with labels \(labels.joined(separator: ", "))"))
            }
        }

        private func list(_ rules: AdminRules, replica: Replica) throws {
            var lines: [String] = []
            var entries: [[String: Any]] = []
            for id in rules.grants.keys.sorted() {
                let byTable = rules.grants[id]!
                let held = byTable.keys.sorted().flatMap { table in byTable[table]!.map { (table, $0) } }
                if held.isEmpty { lines.append("\(try AdminCommand.label(id, in: replica)) may change nothing") }
                for (table, grant) in held {
                    lines.append(
                        "\(try AdminCommand.label(id, in: replica)) \(table) \(grant.operations)"
                            + (grant.labels.isEmpty ? "" : " labels \(grant.labels.joined(separator: " "))"))
                    entries.append([
                        "replica": id, "name": try replica.siteName(of: id), "table": table,
                        "operations": grant.operations.description, "labels": grant.labels,
                    ])
                }
            }
            if global.json {
                global.emitJSON(["grants": entries, "restricted": rules.grants.keys.sorted()])
            } else if lines.isEmpty {
                global.say("no grants: every replica may change everything")
            } else {
                global.printResult(lines.joined(separator: "\n"))
            }
        }
    }
}
