import ArgumentParser
import Bundle
import ChangeLog

extension SQSync {
    struct Peers: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Known peers and their acknowledged knowledge; retire one for good.",
            subcommands: [List.self, Retire.self], defaultSubcommand: List.self)

        struct List: ParsableCommand {
            static let configuration = CommandConfiguration(commandName: "list", abstract: "List known peers.")

            @OptionGroup var global: GlobalOptions
            @Argument(help: "The replica.") var db: String

            func run() throws {
                let peers = try Replica(path: db).peers()
                if global.json {
                    global.emitJSON([
                        "peers": peers.map { peer in
                            [
                                "knowledge_id": peer.knowledgeID, "name": peer.name, "acknowledged": peer.acknowledged.seqs,
                                "last_heard": peer.lastHeard as Any, "retired": peer.retired,
                                "schema_version": peer.schemaVersion as Any,
                                "key_fingerprint": peer.signingKey.map(KeyBinding.fingerprint) as Any,
                            ]
                        }
                    ])
                } else if peers.isEmpty {
                    global.say("no peers yet")
                } else {
                    global.printResult(
                        peers.map { peer in
                            "\(peer.name.isEmpty ? "-" : peer.name) \(peer.knowledgeID)\(peer.retired ? " (retired)" : "") acknowledged \(peer.acknowledged.description.isEmpty ? "nothing" : peer.acknowledged.description), last heard \(peer.lastHeard ?? "never"), key \(peer.signingKey.map(KeyBinding.fingerprint) ?? "not pinned yet")\(peer.schemaVersion.map { ", schema version \($0)" } ?? "")"
                        }.joined(separator: "\n"))
                }
            }
        }

        struct Retire: ParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Retire a peer: it stops holding back purges and its bundles are refused.")

            @OptionGroup var global: GlobalOptions
            @Argument(help: "The replica.") var db: String
            @Argument(help: "The peer's name or knowledge ID.") var peer: String

            func run() throws {
                let retired = try Replica(path: db).retire(peer: peer)
                if global.json {
                    global.emitJSON(["retired": retired.knowledgeID, "name": retired.name])
                } else {
                    global.say("retired \(retired.name) (\(retired.knowledgeID))")
                }
            }
        }
    }

    struct Purge: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Drop deletion records that every live peer has acknowledged.")

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica.") var db: String
        @Flag(name: .long, help: "Report what would be dropped; change nothing.") var dryRun = false

        func run() throws {
            let result = try Replica(path: db).purge(dryRun: dryRun)
            let holders = result.heldBackBy.map { $0.name.isEmpty ? $0.knowledgeID : $0.name }
            if global.json {
                global.emitJSON([
                    "dry_run": dryRun, "tombstones_purged": result.tombstones, "held_back_by": holders,
                    "counter_entries_folded": result.counterEntries,
                ])
            } else {
                let folded = result.counterEntries == 0 ? "" : ", folded \(counted(result.counterEntries, "counter entry", "counter entries"))"
                global.say(
                    "\(dryRun ? "would purge" : "purged") \(counted(result.tombstones, "tombstone"))\(folded)"
                        + (holders.isEmpty ? "" : "; kept others for \(holders.joined(separator: ", "))"))
            }
        }
    }
}
