import ArgumentParser
import Bundle
import ChangeLog
import FoundationEssentials
import Glibc

extension SQSync {
    struct Keygen: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create an Ed25519 key pair for signing bundles, and print its allowed_signers line.")

        @OptionGroup var global: GlobalOptions

        @Option(
            name: .long,
            help: ArgumentHelp(
                "Where to write the private key (.pub goes beside it). Default: the --key path.", valueName: "FILE"))
        var out: String?

        @Option(name: .long, help: "The signer's name in allowed_signers (default: user@host).")
        var name: String?

        @Flag(
            name: .long,
            help: ArgumentHelp(
                "Also add the key's line to the --trust file (default ~/.config/sqsync/allowed_signers), creating it."))
        var trustSelf = false

        @Flag(
            name: .long,
            help: ArgumentHelp(
                "Print (and with --trust-self add) a line that also allows the namespace sqsync-admin: an admin key, which signs label, scope, grant and revoke where the line is added."
            ))
        var admin = false

        @Option(
            name: .long,
            help: ArgumentHelp(
                "Move this replica to the new key: the move is signed with its current key (--key) and carried in its bundles, so peers follow it.",
                valueName: "DB"))
        var rotate: String?

        func validate() throws {
            if rotate != nil {
                guard let out else { throw ValidationError("--rotate needs --out FILE for the new key") }
                if URL(fileURLWithPath: out).standardized.path == URL(fileURLWithPath: global.keyPath).standardized.path {
                    throw ValidationError("--out must name a new file: --key \(global.keyPath) is the key being replaced")
                }
            }
        }

        func run() throws {
            let path = out ?? global.keyPath
            let oldKey = try rotate.map { _ in try global.signingKey() }
            let replica = try rotate.map { try Replica(path: $0) }
            let principal =
                name ?? "\(ProcessInfo.processInfo.environment["USER"] ?? "sqsync")@\(ProcessInfo.processInfo.hostName)"
            let folder = URL(fileURLWithPath: path).deletingLastPathComponent().path
            try? FileManager.default.createDirectory(
                atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let key = SigningKey.generate(comment: principal)
            try key.write(privateKeyPath: path)
            if let replica, let oldKey {
                try KeyBinding.rotate(replica: replica, from: oldKey, to: key)
                global.say(
                    "\(replica.path) now signs with \(key.publicKey.fingerprint) (was \(oldKey.publicKey.fingerprint)); use --key \(path) from now on. Peers that trust the old key follow the move from its next bundle"
                )
            }
            let line = AllowedSigners.line(
                principal: principal, key: key.publicKey,
                namespace: admin ? "sqsync,\(SignedAdminStatement.namespace)" : "sqsync")
            if trustSelf { try AllowedSigners.append(line: line, toFileAt: global.trustPath) }
            if global.json {
                var object: [String: Any] = [
                    "private_key": path, "public_key": path + ".pub", "allowed_signers": line,
                    "fingerprint": key.publicKey.fingerprint,
                ]
                if trustSelf { object["trusted_in"] = global.trustPath }
                if let oldKey { object["rotated_from"] = oldKey.publicKey.fingerprint }
                global.emitJSON(object)
            } else if trustSelf {
                global.say(
                    "wrote \(path) and \(path).pub and added this line to \(global.trustPath); "
                        + "add it to allowed_signers on every other replica that should trust it:")
                print(line)
            } else {
                global.say(
                    "wrote \(path) and \(path).pub; add this line to allowed_signers on every replica that should trust it:")
                print(line)
            }
        }
    }
}
