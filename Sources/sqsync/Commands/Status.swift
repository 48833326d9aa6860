import ArgumentParser
import Bundle
import ChangeLog
import Transport

extension SQSync {
    struct Status: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Identity, tracked tables, what each peer has not acknowledged, held bundles, tombstones.")

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica.") var db: String

        func run() throws {
            let replica = try Replica(path: db)
            let folded = try replica.foldUnlessBusy()
            if !folded { global.say(GlobalOptions.notFolded(db)) }
            let status = try replica.status(folding: false)
            let held = try BundleExchange.heldBundles(of: replica)
            let gaps = try BundleExchange.gaps(of: replica)
            // What the admin statements say of this replica (docs/SCOPES.md).
            let rules = try replica.adminRules()
            let scope = rules.scope(of: replica.knowledgeID)
            let grants = rules.grants[replica.knowledgeID].map { byTable in
                byTable.keys.sorted().flatMap { table in
                    byTable[table]!.map { "\(table) \($0.operations)" + ($0.labels.isEmpty ? "" : " on \($0.labels.joined(separator: ", "))") }
                }
            }
            let untracked = try replica.untrackedTablesWithPrimaryKey()
            let untrusted = try Mailbox.untrustedBundlesWaiting(of: replica)
            let withheld = try replica.withheldValues(cap: BundleLimits.maxValueBytes)
            if global.json {
                global.emitJSON([
                    "knowledge_id": status.knowledgeID, "name": status.name, "knowledge": status.knowledge.seqs,
                    "schema_version": status.schemaVersion, "pending_not_folded": !folded,
                    "tables": status.trackedTables.map { ["name": $0.name, "rows": $0.rows] },
                    "local_changes": status.localChanges, "tombstones": status.tombstones, "conflicts": status.conflicts,
                    "peers": status.peers.map { lag in
                        [
                            "knowledge_id": lag.peer.knowledgeID, "name": lag.peer.name, "unacknowledged": lag.unacknowledged,
                            "tombstones_held_back": lag.tombstonesHeldBack, "last_heard": lag.peer.lastHeard as Any,
                            "schema_version": lag.peer.schemaVersion as Any,
                            "key_fingerprint": lag.peer.signingKey.map(KeyBinding.fingerprint) as Any,
                        ]
                    },
                    "held": held.map { ["path": $0.path, "reason": $0.reason] }, "gaps": gaps.map(gapJSON),
                    "scope": scope as Any, "grants": grants as Any, "untracked": untracked, "untrusted_waiting": untrusted,
                    "withheld": withheld.map(withheldJSON),
                ])
                return
            }
            var lines = [
                "replica    \(status.name) (\(status.knowledgeID))",
                "knowledge  \(status.knowledge)",
                "schema     version \(status.schemaVersion) (PRAGMA user_version)",
                "tables     "
                    + (status.trackedTables.isEmpty
                        ? "none tracked"
                        : status.trackedTables.map { "\($0.name) (\(counted($0.rows, "row")))" }.joined(separator: ", ")),
                "changes    \(counted(status.localChanges, "local change")) recorded, \(counted(status.conflicts, "conflict")) logged",
            ]
            if !untracked.isEmpty {
                lines.insert(
                    "untracked  \(untracked.map(displayText).joined(separator: ", ")) (not synced; `sqsync track \(db) TABLE` to sync one)",
                    at: 4)
            }
            if let scope { lines.append("scope      labels \(scope.joined(separator: ", ")) (rows of other labels stay at other replicas)") }
            if let grants { lines.append("grants     " + (grants.isEmpty ? "none: this replica may change nothing" : grants.joined(separator: "; "))) }
            if status.peers.isEmpty {
                lines.append("peers      none yet")
            }
            for lag in status.peers {
                lines.append(
                    "peer       \(lag.peer.name.isEmpty ? lag.peer.knowledgeID : lag.peer.name) (\(lag.peer.knowledgeID)): \(counted(lag.unacknowledged, "local change")) not acknowledged, last heard \(lag.peer.lastHeard ?? "never"), key \(lag.peer.signingKey.map(KeyBinding.fingerprint) ?? "not pinned yet")\(lag.peer.schemaVersion.map { ", schema version \($0)" } ?? "")"
                )
            }
            let holders = status.peers.filter { $0.tombstonesHeldBack > 0 }.map {
                $0.peer.name.isEmpty ? $0.peer.knowledgeID : $0.peer.name
            }
            lines.append(
                "tombstones \(status.tombstones) waiting"
                    + (holders.isEmpty ? "" : ", held back by \(holders.joined(separator: ", "))"))
            for held in held { lines.append("held       \(held.path): \(held.reason)") }
            for waiting in untrusted { lines.append("untrusted  \(waiting)") }
            for value in withheld { lines.append("left out   \(describe(value))") }
            for gap in gaps { lines.append("gap        \(describe(gap))") }
            global.printResult(lines.joined(separator: "\n"))
        }
    }
}
