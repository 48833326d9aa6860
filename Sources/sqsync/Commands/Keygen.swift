import ArgumentParser
import Bundle
import Foundation

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

        func run() throws {
            let path = out ?? global.keyPath
            let principal =
                name ?? "\(ProcessInfo.processInfo.environment["USER"] ?? "sqsync")@\(ProcessInfo.processInfo.hostName)"
            let folder = URL(fileURLWithPath: path).deletingLastPathComponent().path
            try? FileManager.default.createDirectory(
                atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let key = SigningKey.generate(comment: principal)
            try key.write(privateKeyPath: path)
            let line = AllowedSigners.line(principal: principal, key: key.publicKey)
            if trustSelf { try AllowedSigners.append(line: line, toFileAt: global.trustPath) }
            if global.json {
                var object: [String: Any] = [
                    "private_key": path, "public_key": path + ".pub", "allowed_signers": line,
                    "fingerprint": key.publicKey.fingerprint,
                ]
                if trustSelf { object["trusted_in"] = global.trustPath }
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
