import ArgumentParser
import ChangeLog
import FoundationEssentials
import Glibc
import SQLiteDatabase

extension SQSync {
    struct Why: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "One row's history: alive or deleted, who wrote each column and when, and its conflicts.",
            discussion: """
                Give the primary key's values in key order, as text; each is read as its column's type \
                reads it. Pending writes are folded first. Times are the writers' hybrid logical clocks, \
                in UTC: their wall clocks, unless a peer's clock ran ahead.
                """)

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica.") var db: String
        @Argument(help: "A tracked table.") var table: String
        @Argument(help: "The row's primary-key values, in key order.") var key: [String]

        func run() throws {
            let replica = try Replica(path: db)
            let folded = try replica.foldUnlessBusy()
            if !folded { global.say(GlobalOptions.notFolded(db)) }
            guard let history = try replica.history(table: table, key: key, folding: false) else {
                let shown = key.map { "'\($0)'" }.joined(separator: ", ")
                throw Failure.raise(
                    "\(db): no history of \(displayText(table)) key \(displayText(shown)): the row was never seen here, or was deleted and purged"
                )
            }
            if global.json {
                global.emitJSON(Self.json(history).merging(["pending_not_folded": !folded]) { first, _ in first })
            } else {
                global.printResult(Self.text(history))
            }
        }

        static func json(_ history: RowHistory) -> [String: Any] {
            [
                "table": history.table,
                "key": Dictionary(history.key.map { ($0.column, Conflicts.jsonValue($0.value)) }) { first, _ in first },
                "causal_length": history.causalLength, "alive": history.isAlive, "life": json(history.life),
                "columns": history.columns.map { column in
                    [
                        "column": column.name, "value": Conflicts.jsonValue(column.value), "policy": column.policy.rawValue,
                        "written_by": json(column.writtenBy),
                    ] as [String: Any]
                },
                "conflicts": history.conflicts.map { conflict in
                    [
                        "recorded_at": conflict.recordedAt, "kind": conflict.kind, "column": conflict.column as Any,
                        "lost_value": Conflicts.jsonValue(conflict.lostValue ?? .null), "lost_value_known": conflict.lostValue != nil,
                        "lost_row": conflict.lostRow as Any, "won_value": conflict.wonValue.map(Conflicts.jsonValue) as Any,
                        "lost_by": conflict.lostBy, "lost_by_name": conflict.lostByName, "lost_time": time(conflict.lostHLC), "won_by": conflict.wonBy as Any,
                        "won_time": conflict.wonHLC.map(time) as Any,
                    ] as [String: Any]
                },
            ]
        }

        private static func json(_ change: RowHistory.Change) -> [String: Any] {
            [
                "replica": change.name, "knowledge_id": change.knowledgeID, "seq": change.seq, "hlc": change.hlc,
                "time": time(change.hlc), "local": change.isLocal,
            ]
        }

        static func text(_ history: RowHistory) -> String {
            let key = history.key.map { "\($0.column) = \(displayValue($0.value))" }.joined(separator: ", ")
            let lives = (history.causalLength + 1) / 2
            var lines = ["\(history.table) (\(key))"]
            if history.isAlive {
                lines.append(
                    "  alive (causal length \(history.causalLength): life \(lives)), inserted by \(describe(history.life))")
            } else {
                lines.append(
                    "  deleted (causal length \(history.causalLength): after \(counted(Int(lives), "life", "lives"))), by \(describe(history.life))"
                )
            }
            let width = history.columns.map { $0.name.count }.max() ?? 0
            for column in history.columns {
                let name = displayText(column.name) + String(repeating: " ", count: max(0, max(width, 1) - column.name.count))
                let policy = column.policy == .lww ? "" : " [\(column.policy.rawValue)]"
                lines.append("  \(name) = \(displayValue(column.value))\(policy)  written by \(describe(column.writtenBy))")
            }
            if history.conflicts.isEmpty {
                lines.append("  no conflicts recorded")
            } else {
                lines.append("  conflicts:")
                for conflict in history.conflicts {
                    let lost = conflict.lostValue.map { displayValue($0) } ?? "a value not known here (its insert carried the one that won)"
                    let kept = conflict.wonValue.map { " (kept \(displayValue($0)))" } ?? ""
                    let what = conflict.column.map { "\(displayText($0)) lost \(lost)\(kept)" }
                        ?? "the row lost \(displayText(conflict.lostRow ?? ""))"
                    lines.append(
                        "    \(conflict.recordedAt) \(conflict.kind): \(what), written by \(conflict.lostByName.isEmpty ? conflict.lostBy : "\(displayText(conflict.lostByName)) (\(conflict.lostBy))") at \(time(conflict.lostHLC))"
                    )
                }
            }
            return lines.joined(separator: "\n")
        }

        private static func describe(_ change: RowHistory.Change) -> String {
            let who = (change.name.isEmpty ? "replica" : displayText(change.name)) + (change.isLocal ? ", this replica," : "")
            return "\(who) (\(change.knowledgeID)), change \(change.seq) at \(time(change.hlc))"
        }

        private static func time(_ hlc: Int64) -> String {
            Date.ISO8601FormatStyle(includingFractionalSeconds: true).format(Date(timeIntervalSince1970: Double(hlc) / 1000))
        }
    }
}
