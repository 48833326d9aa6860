import ArgumentParser
import Bundle
import ChangeLog
import Foundation

extension SQSync {
    struct Scope: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Set which labels a replica receives (an admin statement), or list the scopes.",
            discussion: """
                A replica without a scope receives every row. Rows that leave a replica's scope are removed \
                there (its own changes once its peers have them); rows that enter it arrive whole, with the \
                next change to them (docs/SCOPES.md). Needs an admin key.
                """)

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica.") var db: String
        @Argument(help: "The replica to scope (name or knowledge ID).") var replicaName: String?
        @Argument(help: "The labels it receives.") var labels: [String] = []
        @Flag(name: .long, help: "It receives every row.") var all = false

        func validate() throws {
            if replicaName != nil && labels.isEmpty == !all {
                throw ValidationError("give REPLICA LABEL... or REPLICA --all to set a scope, or only DB to list them")
            }
            if replicaName == nil && (all || !labels.isEmpty) { throw ValidationError("name the replica first") }
        }

        func run() throws {
            let replica = try Replica(path: db)
            guard let replicaName else {
                let scopes = try AdminCommand.rules(of: replica).scopes
                if global.json {
                    global.emitJSON([
                        "scopes": try scopes.keys.sorted().map {
                            ["replica": $0, "name": try replica.siteName(of: $0), "labels": scopes[$0]!] as [String: Any]
                        }
                    ])
                } else if scopes.isEmpty {
                    global.say("no replica has a scope: every replica receives every row")
                } else {
                    global.printResult(
                        try scopes.keys.sorted().map { "\(try AdminCommand.label($0, in: replica)) \(scopes[$0]!.joined(separator: " "))" }
                            .joined(separator: "\n"))
                }
                return
            }
            let id = try AdminCommand.knowledgeID(of: replicaName, in: replica)
            let before = try AdminCommand.rules(of: replica).scope(of: id)
            // Rows of labels the replica did not receive before start new lives here, so
            // they reach it whole with the next export (docs/SCOPES.md).
            var resent = 0
            try AdminCommand.issue(.scope(replica: id, labels: all ? nil : labels), replica: replica, global: global) {
                if let before, all || !Set(labels).isSubset(of: Set(before)) {
                    resent = try replica.startNewLives(outside: before, inside: all ? nil : labels)
                }
            }
            if global.json {
                global.emitJSON(["replica": id, "labels": all ? NSNull() as Any : labels, "rows_resent": resent])
            } else {
                global.say(
                    "\(try AdminCommand.label(id, in: replica)) receives \(all ? "every row" : "labels " + labels.joined(separator: ", "))"
                        + (resent > 0 ? "; \(resent) rows of its new labels go to it with the next sync" : ""))
            }
        }
    }
}
