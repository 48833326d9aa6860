import ArgumentParser
import Bundle
import ChangeLog
import FoundationEssentials
import Glibc

extension SQSync {
    struct Scope: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Set which labels a replica receives (an admin statement), or list the scopes.",
            discussion: """
                A replica without a scope receives every row, unless `--default none` says otherwise for \
                every replica no statement scopes. Rows that leave a replica's scope are removed \
                there (its own changes once its peers have them); rows that enter it arrive whole, with the \
                next change to them (docs/SCOPES.md). Needs an admin key.
                """)

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica.") var db: String
        @Argument(help: "The replica to scope (name or knowledge ID).") var replicaName: String?
        @Argument(help: "The labels it receives.") var labels: [String] = []
        @Flag(name: .long, help: "It receives every row.") var all = false
        @Option(
            name: .customLong("default"),
            help: "What a replica no statement scopes receives: all (every row, the default) or none (no labelled row).")
        var defaultScope: String?

        func validate() throws {
            if let defaultScope {
                guard ["all", "none"].contains(defaultScope) else { throw ValidationError("--default takes all or none") }
                guard replicaName == nil, labels.isEmpty, !all else {
                    throw ValidationError("--default sets the scope of every replica no statement scopes: give it alone")
                }
                return
            }
            if replicaName != nil && labels.isEmpty == !all {
                throw ValidationError("give REPLICA LABEL... or REPLICA --all to set a scope, or only DB to list them")
            }
            if replicaName == nil && (all || !labels.isEmpty) { throw ValidationError("name the replica first") }
        }

        func run() throws {
            let replica = try Replica(path: db)
            if let defaultScope { return try setDefault(defaultScope == "all" ? nil : [], replica: replica) }
            guard let replicaName else {
                let rules = try AdminCommand.rules(of: replica)
                let scopes = rules.scopes
                if global.json {
                    global.emitJSON([
                        "scopes": try scopes.keys.sorted().map {
                            ["replica": $0, "name": try replica.siteName(of: $0), "labels": scopes[$0]!] as [String: Any]
                        },
                        "default": rules.defaultScope == nil ? "all" : "none",
                    ])
                } else if !rules.hasScopes {
                    global.say("no replica has a scope: every replica receives every row")
                } else {
                    let lines = try scopes.keys.sorted().map { "\(try AdminCommand.label($0, in: replica)) \(scopes[$0]!.joined(separator: " "))" }
                    let defaultLine = rules.defaultScope == nil ? [] : ["every other replica: no labelled row (--default none)"]
                    global.printResult((lines + defaultLine).joined(separator: "\n"))
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
                global.emitJSON(["replica": id, "labels": all ? JSONNull() as Any : labels, "rows_resent": resent])
            } else {
                global.say(
                    "\(try AdminCommand.label(id, in: replica)) receives \(all ? "every row" : "labels " + labels.joined(separator: ", "))"
                        + (resent > 0 ? "; \(resent) rows of its new labels go to it with the next sync" : ""))
            }
        }

        /// `--default`: `nil` every row, `[]` no labelled row. The replica where it runs must
        /// not fall under a default of none itself (it would drop every labelled row it holds);
        /// a default that grows again resends the labelled rows held here.
        private func setDefault(_ labels: [String]?, replica: Replica) throws {
            let before = try AdminCommand.rules(of: replica)
            if labels != nil && before.scopes[replica.knowledgeID] == nil && !before.everyRow.contains(replica.knowledgeID) {
                throw Failure.raise(
                    "\(db): with --default none this replica would receive no labelled row itself; give it a scope first (sqsync scope \(db) \(replica.knowledgeID) --all)"
                )
            }
            var resent = 0
            try AdminCommand.issue(.scope(replica: AdminRules.everyOtherReplica, labels: labels), replica: replica, global: global) {
                if let previous = before.defaultScope, labels == nil {
                    resent = try replica.startNewLives(outside: previous, inside: nil)
                }
            }
            // Peers no statement scopes drop their labelled rows when the statement reaches them.
            let emptied =
                labels == nil
                ? []
                : try replica.peers().filter { !$0.retired && before.scopes[$0.knowledgeID] == nil && !before.everyRow.contains($0.knowledgeID) }
                    .map { $0.name.isEmpty ? $0.knowledgeID : $0.name }
            if global.json {
                global.emitJSON(["default": labels == nil ? "all" : "none", "rows_resent": resent, "unscoped_peers": emptied])
            } else {
                global.say(
                    "every replica no statement scopes receives \(labels == nil ? "every row" : "no labelled row")"
                        + (resent > 0 ? "; \(resent) rows go to them with the next sync" : ""))
                if !emptied.isEmpty {
                    global.say(
                        "note: \(emptied.joined(separator: ", ")) have no scope of their own and will keep no labelled row; give each one that should hold every row `sqsync scope \(db) NAME --all`"
                    )
                }
            }
        }
    }
}
