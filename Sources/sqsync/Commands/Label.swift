import ArgumentParser
import Bundle
import ChangeLog
import FoundationEssentials
import Glibc

extension SQSync {
    struct Label: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Give a table a label (an admin statement), or list the labels.",
            discussion: """
                EXPR is an SQL expression over the row's own columns, such as region or 'team:' || team_id; \
                its value, as text, is the row's label. A replica receives a row when its scope holds the \
                row's label; a table without a label goes to every replica. An empty EXPR removes the label. \
                Needs an admin key (namespaces="sqsync,sqsync-admin" in allowed_signers).
                """)

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica.") var db: String
        @Argument(help: "A tracked table.") var table: String?
        @Argument(help: "An SQL expression over the table's columns.") var expression: String?

        func validate() throws {
            if table != nil && expression == nil { throw ValidationError("give TABLE EXPR to label a table, or only DB to list the labels") }
        }

        func run() throws {
            let replica = try Replica(path: db)
            guard let table, let expression else {
                let labels = try AdminCommand.rules(of: replica).labels
                if global.json {
                    global.emitJSON(["labels": labels.keys.sorted().map { ["table": $0, "expression": labels[$0]!] }])
                } else if labels.isEmpty {
                    global.say("no table has a label: every replica receives every row")
                } else {
                    global.printResult(labels.keys.sorted().map { "\($0) \(labels[$0]!)" }.joined(separator: "\n"))
                }
                return
            }
            try replica.checkLabel(expression, of: table)
            let previous = try AdminCommand.rules(of: replica).labels[table]
            // Rows whose label the new expression changes start new lives here, so that readers
            // of their new labels receive them whole with the next export (docs/SCOPES.md).
            var resent = 0
            try AdminCommand.issue(.label(table: table, expression: expression), replica: replica, global: global) {
                if let previous, !expression.isEmpty, previous != expression {
                    resent = try replica.startNewLives(ofRowsRelabelledFrom: previous, in: table)
                }
            }
            if global.json {
                global.emitJSON(["table": table, "expression": expression, "rows_resent": resent])
            } else {
                global.say(
                    (expression.isEmpty
                        ? "\(table) has no label now: every replica receives its rows"
                        : "\(table) is labelled by \(expression); every replica follows once the statement reaches it")
                        + (resent > 0 ? "; \(resent) rows whose label it changes go to their readers with the next sync" : ""))
            }
        }
    }
}
