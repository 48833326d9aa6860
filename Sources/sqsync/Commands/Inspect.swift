import ArgumentParser
import Bundle
import ChangeLog
import FoundationEssentials
import Glibc
import Transport

extension SQSync {
    struct Inspect: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show a bundle's verification, signer, header and counts; extract its payload and signature.",
            discussion: """
                The verification result comes first; text taken from the bundle (names) is shown \
                with control characters escaped. Records are counted only in segments whose \
                origin's signature checks.
                """)

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The bundle file.") var file: String
        @Option(name: .long, help: ArgumentHelp("Write the signed payload (the envelope) here.", valueName: "OUT")) var payload:
            String?
        @Option(name: .long, help: ArgumentHelp("Write the detached SSH signature here.", valueName: "OUT")) var signature:
            String?

        func run() throws {
            let reader: BundleReader
            var recipientText: [String] = []
            do {
                let key = FileManager.default.fileExists(atPath: global.keyPath) ? try global.signingKey() : nil
                recipientText = describe(try AgeFile.recipients(ofFile: file), key: key)
                reader = try BundleReader(
                    path: file, trust: nil, decryptingWith: key, readersKeys: Mailbox.readersKeys(besideBundleAt: file, with: key))
            } catch let error as BundleError where error.kind == .notAddressed {
                // Encrypted for others: who it is for (by a header nothing has authenticated,
                // since only a recipient can) is all there is to show.
                if global.json {
                    global.emitJSON([
                        "path": file, "encrypted": true, "recipients": recipientText, "verified": false,
                        "verification": error.description,
                    ])
                } else {
                    global.printResult(
                        (["encrypted  to \(counted(recipientText.count, "key")) (as its unauthenticated header says); cannot read it here: \(error.description)"]
                            + recipientText.map { "recipient  \($0)" }).joined(separator: "\n"))
                }
                return
            } catch let error as BundleError {
                if global.json {
                    global.emitJSON(["path": file, "verified": false, "verification": error.description])
                } else {
                    global.printResult("verified   no: \(error.description)")
                }
                throw ExitCode(Failure.rejectedBundle)
            }
            if let payload {
                try? FileManager.default.removeItem(atPath: payload)
                try reader.extractPayload(to: payload)
            }
            if let signature {
                try Data(reader.signature.armored.utf8).write(to: URL(fileURLWithPath: signature))
            }
            let envelope = reader.envelope
            let signer = reader.signature.publicKey
            let verification: (ok: Bool, text: String)
            do {
                let trust = try global.trustedSigners()
                let moves = envelope.moves.filter(\.isValid).map { ($0.from, $0.to) }
                if let principal = trust.following(moves).principal(for: signer, namespace: "sqsync") {
                    verification = (true, "good signature by \(displayText(principal))")
                } else {
                    verification = (false, "signed by \(signer.fingerprint), a key allowed_signers does not trust")
                }
            } catch {
                verification = (false, "\(error)")
            }
            let segments = try BundleInspection.segments(of: reader)
            let sender = envelope.sender
            var totals: [String: [String: Int]] = [:]
            for segment in segments {
                for (table, operations) in segment.counts {
                    for (operation, count) in operations { totals[table, default: [:]][operation, default: 0] += count }
                }
            }
            if global.json {
                global.emitJSON([
                    "path": file, "verified": verification.ok, "verification": verification.text,
                    "encrypted": reader.isEncrypted, "recipients": recipientText,
                    "signer_key": signer.fingerprint, "format_version": Int(envelope.formatVersion), "bytes": reader.fileSize,
                    "admin_statements": BundleInspection.adminStatements(of: reader),
                    "sender": sender.id, "sender_name": sender.name, "created_ms": envelope.createdAt,
                    "knowledge": Dictionary(uniqueKeysWithValues: envelope.sites.map { ($0.id, $0.knowledge) }),
                    "base": Dictionary(uniqueKeysWithValues: envelope.sites.map { ($0.id, $0.base) }),
                    "tables": totals,
                    "segments": segments.map { segment in
                        [
                            "origin": segment.origin, "origin_name": segment.originName, "first": segment.base + 1,
                            "last": segment.last, "origin_signature": segment.signatureText, "tables": segment.counts,
                            "scope": segment.scope.map { $0.map(displayText) } as Any, "admin_statements": segment.adminStatements,
                        ] as [String: Any]
                    },
                ])
                if !verification.ok { throw ExitCode(Failure.rejectedBundle) }
                return
            }
            var lines = [
                "verified   \(verification.ok ? "yes" : "no"): \(verification.text)",
                "signer     \(signer.fingerprint)",
                "bundle     \(file) (format \(envelope.formatVersion), \(counted(reader.fileSize, "byte")))",
                "sender     \(displayText(sender.name)) (\(sender.id)), seq \(envelope.senderSeq)",
                "created    \(Date(timeIntervalSince1970: Double(envelope.createdAt) / 1000))",
                "knowledge  \(Knowledge(Dictionary(uniqueKeysWithValues: envelope.sites.map { ($0.id, $0.knowledge) })))",
                "base       \(Knowledge(Dictionary(uniqueKeysWithValues: envelope.sites.map { ($0.id, $0.base) })))",
            ]
            if reader.isEncrypted {
                lines.insert("encrypted  to \(counted(recipientText.count, "key")): decrypted with this replica's key", at: 1)
                lines.insert(contentsOf: recipientText.map { "recipient  \($0)" }, at: 2)
            }
            lines += BundleInspection.adminStatements(of: reader).map { "admin      \($0)" }
            for segment in segments {
                let cut = segment.scope.map { ", for labels \($0.map(displayText).joined(separator: ", "))" } ?? ""
                lines.append(
                    "changes    of \(displayText(segment.originName)) (\(segment.origin)) \(segment.base + 1)-\(segment.last)\(cut): origin signature \(segment.signatureText)"
                )
                for (table, operations) in segment.counts.sorted(by: { $0.key < $1.key }) {
                    lines.append(
                        "table      \(displayText(table)): \(operations["inserts"] ?? 0) inserts, \(operations["updates"] ?? 0) updates, \(operations["deletes"] ?? 0) deletes"
                    )
                }
            }
            global.printResult(lines.joined(separator: "\n"))
            if !verification.ok { throw ExitCode(Failure.rejectedBundle) }
        }

        /// Each recipient by the fingerprint and principal of the trusted key whose tag it names
        /// (a stanza names its key only by a 4-byte tag), or by the tag alone.
        private func describe(_ recipients: [AgeFile.Recipient], key: SigningKey?) -> [String] {
            var known: [(SSHPublicKey, String)] = []
            if let trust = try? global.trustedSigners() { known += trust.keysAndPrincipals() }
            if let key { known.append((key.publicKey, "this replica's key")) }
            // The stanza naming a mailbox's readers' key is not a recipient of its own.
            return recipients.filter { $0.type != "sqsync-readers" }.map { recipient in
                if recipient.type == "X25519" { return "a mailbox's readers' key (X25519; docs/BUNDLE_FORMAT.md)" }
                guard recipient.type == "ssh-ed25519" else { return "a recipient of type \(displayText(recipient.type))" }
                if let match = known.first(where: { AgeFile.tag(of: $0.0) == recipient.tag }) {
                    return "\(match.0.fingerprint) (\(displayText(match.1)))"
                }
                return "an ssh-ed25519 key unknown here (tag \(hexString(recipient.tag)))"
            }
        }
    }
}
