import ArgumentParser
import ChangeLog
import FoundationEssentials
import Glibc

extension MergePolicy: ExpressibleByArgument {}

extension SQSync {
    struct Policy: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the columns' merge policies, or set one.",
            discussion: """
                lww (the default): the last writer wins. counter: concurrent changes add up; every write, \
                from any client, counts as a delta (new minus old). max / min: the greatest / least value \
                written wins. Every replica must set the same policy: bundles from a replica that merges \
                a column differently are held until they agree. A new policy applies to changes from then on.
                """)

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica.") var db: String
        @Argument(help: "A tracked table.") var table: String?
        @Argument(help: "One of its columns, outside the primary key.") var column: String?
        @Argument(help: "lww, counter, max or min.") var policy: MergePolicy?

        func validate() throws {
            guard table == nil || (column != nil && policy != nil) else {
                throw ValidationError("give TABLE COLUMN POLICY to set a policy, or only DB to list them")
            }
        }

        func run() throws {
            let replica = try Replica(path: db)
            if let table, let column, let policy {
                let changed = try replica.setPolicy(policy, table: table, column: column)
                if global.json {
                    global.emitJSON(["table": table, "column": column, "policy": policy.rawValue, "changed": changed])
                } else {
                    global.say(
                        changed
                            ? "\(table).\(column) now merges as \(policy.rawValue), from the next change on; set the same on every replica"
                            : "\(table).\(column) already merges as \(policy.rawValue)")
                }
                return
            }
            let policies = try replica.policies()
            if global.json {
                global.emitJSON([
                    "policies": policies.map { ["table": $0.table, "column": $0.column, "policy": $0.policy.rawValue] }
                ])
            } else if policies.isEmpty {
                global.say("every column merges as lww (last writer wins)")
            } else {
                global.printResult(policies.map { "\($0.table).\($0.column) \($0.policy.rawValue)" }.joined(separator: "\n"))
            }
        }
    }
}
