import ArgumentParser
import Bundle
import ChangeLog
import FoundationEssentials
import Glibc

extension SQSync {
    struct Export: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write one signed bundle with the changes a peer lacks (default: every change).")

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica.") var db: String
        @Option(name: .shortAndLong, help: ArgumentHelp("The bundle file to write.", valueName: "FILE")) var output: String?
        @Option(name: .long, help: ArgumentHelp("Write into this folder under a generated name.", valueName: "DIR")) var to:
            String?
        @Option(
            name: .customLong("for"),
            help: ArgumentHelp(
                "Only what this peer (name or knowledge ID) has not acknowledged; everything for a knowledge ID never heard of.",
                valueName: "PEER"))
        var peer: String?
        @Option(name: .long, help: ArgumentHelp("Only what this knowledge lacks (ID:SEQ,ID:SEQ…).", valueName: "KNOWLEDGE"))
        var since: String?
        @Option(
            name: .long, parsing: .upToNextOption,
            help: ArgumentHelp("Encrypt to these readers' public keys (.pub files or allowed_signers lines).", valueName: "KEY.pub"))
        var encryptTo: [String] = []
        @Flag(name: .long, help: "Leave the bundle in the clear (with --for it is encrypted to that peer's key by default).")
        var noEncrypt = false

        func validate() throws {
            if noEncrypt && !encryptTo.isEmpty { throw ValidationError("--no-encrypt and --encrypt-to cannot be used together") }
            if (output == nil) == (to == nil) { throw ValidationError("give exactly one of -o FILE and --to DIR") }
            if peer != nil && since != nil { throw ValidationError("--for and --since cannot be used together") }
            if let since {
                do { _ = try Knowledge(parsing: since) } catch { throw ValidationError("\(error)") }
            }
        }

        func run() throws {
            let replica = try Replica(path: db)
            let key = try global.signingKey()
            var base = Knowledge()
            var receiver: String?
            if let peer {
                base = try acknowledged(by: peer, replica: replica)
                receiver = (try? replica.peer(named: peer))?.knowledgeID
            }
            if let since { base = try Knowledge(parsing: since) }
            if let to {
                guard isFolder(to) == true else {
                    throw Failure.raise("\(to): no such directory")
                }
            }
            var recipients = try encryptTo.map(Self.recipientKey)
            if let peer {
                // A retired reader, or one whose key left allowed_signers, gets nothing, however encrypted.
                let chosen = try KeyBinding.exportRecipients(
                    for: receiver ?? peer.lowercased(), name: peer, replica: replica, trust: try global.trustedSigners(),
                    choosingKeys: recipients.isEmpty && !noEncrypt)
                if recipients.isEmpty && !noEncrypt {
                    recipients = chosen.keys
                    if let note = chosen.note { global.say(note) }
                }
            }
            // A scoped peer gets only the rows of its labels (docs/SCOPES.md), and so does a
            // replica made with a scoped replica's key.
            let scope = try peer.flatMap { try KeyBinding.adminRules(of: replica).scope(of: receiver ?? $0.lowercased()) }
            let result = try global.showingProgress(of: replica, db) {
                try BundleExchange.export(
                    replica: replica, since: base, key: key, to: to ?? output!, intoDirectory: to != nil, receiver: receiver,
                    encryptTo: recipients, scope: scope, checkpoints: since == nil)
            }
            for value in result.withheld {
                writeStandardError("sqsync: warning: \(describe(value))\n")
            }
            if global.json {
                global.emitJSON([
                    "path": result.path, "rows": result.rows, "bytes": result.bytes,
                    "withheld": result.withheld.map(withheldJSON),
                    "encrypted_to": recipients.map(\.fingerprint),
                    "knowledge": Dictionary(uniqueKeysWithValues: result.envelope.sites.map { ($0.id, $0.knowledge) }),
                ])
            } else {
                global.say(
                    "wrote \(result.path): \(counted(result.rows, "row")) changed, \(counted(result.bytes, "byte"))"
                        + (recipients.isEmpty
                            ? ", in the clear (anyone who reads the file reads the rows; --encrypt-to KEY.pub or --for PEER encrypts it)"
                            : ", encrypted to \(counted(recipients.count, "key"))"))
            }
        }

        /// The key in a `.pub` file, or in the first `ssh-ed25519` line of a file such as
        /// allowed_signers.
        static func recipientKey(_ path: String) throws -> SSHPublicKey {
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw Failure.raise("\(path): cannot read the key to encrypt to")
            }
            guard let line = text.split(whereSeparator: \.isNewline).first(where: { $0.contains("ssh-ed25519 ") }),
                let start = line.firstRange(of: "ssh-ed25519 ")?.lowerBound
            else { throw Failure.raise("\(path): no ssh-ed25519 public key to encrypt to") }
            do {
                return try SSHPublicKey(openSSHLine: String(line[start...]))
            } catch {
                throw Failure.raise("\(path): not an ssh-ed25519 public key (\(error))")
            }
        }

        /// What `peer` acknowledged. A peer known by name or ID (met directly, relayed, or
        /// through a mailbox acknowledgement) has its acknowledgement; a well-formed knowledge ID
        /// never heard of gets everything, so a first bundle can be made for a new site.
        private func acknowledged(by peer: String, replica: Replica) throws -> Knowledge {
            do {
                return try replica.peer(named: peer).acknowledged
            } catch is ChangeLogError where UUID(uuidString: peer) != nil {
                global.say("\(peer) has acknowledged nothing yet: exporting every change")
                return Knowledge()
            }
        }
    }
}
