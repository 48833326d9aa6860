import ArgumentParser
import ChangeLog
import SQLiteDatabase
import FoundationEssentials
import Glibc

extension SQSync {
    struct Conflicts: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show the changes that lost a conflict, and child rows orphaned by a concurrent delete.")

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica.") var db: String
        @Flag(name: .long, help: "Empty the conflict log after showing it.") var clear = false

        func run() throws {
            let replica = try Replica(path: db)
            let conflicts = try replica.conflicts()
            let orphans = try replica.orphans()
            let names = try replica.replicaNames()
            func named(_ id: String?) -> String {
                guard let id, !id.isEmpty else { return "" }
                return names[id].map { "\(displayText($0)) (\(id))" } ?? id
            }
            if global.json {
                global.emitJSON([
                    "conflicts": conflicts.map { conflict in
                        var entry = conflict.mapValues(Self.jsonValue)
                        entry["key"] = conflict["pk"]?.stringValue.flatMap(Replica.conflictKey).map { $0.map(Self.jsonValue) } ?? JSONNull()
                        entry["lost_site_name"] = conflict["lost_site"]?.stringValue.flatMap { names[$0] } ?? JSONNull()
                        entry["won_site_name"] = conflict["won_site"]?.stringValue.flatMap { names[$0] } ?? JSONNull()
                        return entry
                    },
                    "orphans": orphans.map {
                        [
                            "table": $0.table, "rowid": $0.rowid.map { $0 as Any } ?? JSONNull(), "parent": $0.parent,
                            "key": $0.key.map { $0 as Any } ?? JSONNull(), "reference": $0.reference.map { $0 as Any } ?? JSONNull(),
                        ]
                    },
                ])
            } else {
                var lines: [String] = []
                for conflict in conflicts {
                    let column = conflict["column_name"]?.stringValue.map { ".\($0)" } ?? ""
                    let loser = named(conflict["lost_site"]?.stringValue)
                    let lost =
                        if let row = conflict["lost_row"]?.stringValue {
                            "lost \(displayShortened(row)) from \(loser)"
                        } else if conflict["lost_value_known"] == .integer(0) {
                            "lost what \(loser) wrote (not known here: its insert carried the value that won)"
                        } else {
                            "lost \(displayValue(conflict["lost_value"] ?? .null)) from \(loser)"
                        }
                    var kept = ""
                    if let won = conflict["won_value"], conflict["column_name"]?.stringValue != nil,
                        let winner = conflict["won_site"]?.stringValue, !winner.isEmpty
                    {
                        kept = "; kept \(displayValue(won)) from \(named(winner))"
                    }
                    lines.append(
                        "\(conflict["recorded_at"]?.stringValue ?? "") \(conflict["kind"]?.stringValue ?? ""): \(conflict["table_name"]?.stringValue ?? "")\(column) key \(displayShortened(conflict["pk"]?.stringValue ?? "")): \(lost)\(kept)"
                    )
                }
                for orphan in orphans {
                    lines.append(
                        "orphan: \(orphan.table) row \(orphan.key.map { "(\($0))" } ?? "?") refers to a missing \(orphan.parent) row\(orphan.reference.map { " (\($0)); delete it, or give it a parent that exists" } ?? "")"
                    )
                }
                if lines.isEmpty { global.say("no conflicts") } else { global.printResult(lines.joined(separator: "\n")) }
            }
            if clear {
                let removed = try replica.clearConflicts()
                global.say("cleared \(counted(removed, "conflict"))")
            }
        }

        static func jsonValue(_ value: SQLValue) -> Any {
            switch value {
            case .null: return JSONNull()
            case .integer(let v): return v
            case .real(let v): return v
            case .text(let v): return v
            case .blob(let v): return ["blob": hexString(v)]
            }
        }
    }
}
