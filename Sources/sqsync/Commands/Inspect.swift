import ArgumentParser
import Bundle
import ChangeLog
import Foundation

extension SQSync {
    struct Inspect: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show a bundle's header, counts, signer and verification; extract its payload and signature.")

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The bundle file.") var file: String
        @Option(name: .long, help: ArgumentHelp("Write the signed payload here.", valueName: "OUT")) var payload: String?
        @Option(name: .long, help: ArgumentHelp("Write the detached SSH signature here.", valueName: "OUT")) var signature:
            String?

        func run() throws {
            let reader = try BundleReader(path: file)
            if let payload {
                try? FileManager.default.removeItem(atPath: payload)
                try reader.extractPayload(to: payload)
            }
            if let signature {
                try Data(reader.signature.armored.utf8).write(to: URL(fileURLWithPath: signature))
            }
            let verification: (ok: Bool, text: String)
            do {
                let trust = try global.trustedSigners()
                verification = (true, "good signature by \(try reader.verify(trust: trust))")
            } catch {
                verification = (false, "\(error)")
            }
            var counts: [String: [String: Int]] = [:]
            // Records are inflated only once the signature holds: never for an unverified file.
            if verification.ok {
                try reader.forEachChange { change in
                let table = reader.header.tables[change.table].name
                let operation = change.isDelete ? "deletes" : (change.rowStamp != nil ? "inserts" : "updates")
                counts[table, default: [:]][operation, default: 0] += 1
                }
            }
            let header = reader.header
            if global.json {
                global.emitJSON([
                    "path": file, "format_version": Int(reader.version), "sender": header.sender, "sender_name": header.senderName,
                    "created_ms": reader.createdAt, "bytes": reader.fileSize,
                    "knowledge": Dictionary(uniqueKeysWithValues: zip(header.sites, header.knowledge)),
                    "base": Dictionary(uniqueKeysWithValues: zip(header.sites, header.base)),
                    "tables": counts, "signer_key": reader.signature.publicKey.fingerprint,
                    "verified": verification.ok, "verification": verification.text,
                ])
            } else {
                var lines = [
                    "bundle     \(file) (format \(reader.version), \(counted(reader.fileSize, "byte")))",
                    "sender     \(header.senderName) (\(header.sender)), seq \(header.senderSeq)",
                    "created    \(Date(timeIntervalSince1970: Double(reader.createdAt) / 1000))",
                    "knowledge  \(Knowledge(Dictionary(uniqueKeysWithValues: zip(header.sites, header.knowledge))))",
                    "base       \(Knowledge(Dictionary(uniqueKeysWithValues: zip(header.sites, header.base))))",
                ]
                for (table, operations) in counts.sorted(by: { $0.key < $1.key }) {
                    lines.append(
                        "table      \(table): \(operations["inserts"] ?? 0) inserts, \(operations["updates"] ?? 0) updates, \(operations["deletes"] ?? 0) deletes"
                    )
                }
                lines.append("signer     \(reader.signature.publicKey.fingerprint)")
                lines.append("verified   \(verification.ok ? "yes" : "no"): \(verification.text)")
                global.printResult(lines.joined(separator: "\n"))
            }
            if !verification.ok { throw ExitCode(Failure.rejectedBundle) }
        }
    }
}
