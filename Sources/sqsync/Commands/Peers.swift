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
                                "silent": peer.succeededBy != nil, "succeeded_by": peer.succeededBy as Any,
                            ]
                        }
                    ])
                } else if peers.isEmpty {
                    global.say("no peers yet")
                } else {
                    global.printResult(
                        peers.map { peer in
                            "\(peer.name.isEmpty ? "-" : peer.name) \(peer.knowledgeID)\(peer.retired ? " (retired)" : "") acknowledged \(peer.acknowledged.description.isEmpty ? "nothing" : peer.acknowledged.description), last heard \(peer.lastHeard ?? "never"), key \(peer.signingKey.map(KeyBinding.fingerprint) ?? "not pinned yet")\(peer.schemaVersion.map { ", schema version \($0)" } ?? "")\(silence(of: peer, in: peers))"
                        }.joined(separator: "\n"))
                }
            }

            private func silence(of peer: Peer, in peers: [Peer]) -> String {
                guard let successor = peer.succeededBy else { return "" }
                let name = peers.first { $0.knowledgeID == successor }.map { displayText($0.name) } ?? successor
                return "; silent since, while its key speaks for \(name) (\(successor)): if it was made again, release it with `sqsync peers retire \(db) \(peer.knowledgeID)`"
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
}
