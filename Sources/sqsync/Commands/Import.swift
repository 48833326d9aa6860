import ArgumentParser
import Bundle
import ChangeLog
import Foundation

extension SQSync {
    struct Import: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Verify and merge bundles, in any order; one transaction per bundle.")

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica.") var db: String
        @Argument(help: "Bundle files, or folders of bundles.") var bundles: [String]
        @Flag(name: .long, help: "Report per table what would change and conflict; change nothing.") var dryRun = false

        func run() throws {
            let replica = try Replica(path: db)
            let trust = try global.trustedSigners()
            var files: [String] = []
            for path in bundles {
                var isDirectory: ObjCBool = false
                guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
                    throw Failure.raise("\(path): no such file")
                }
                if isDirectory.boolValue {
                    let names = try FileManager.default.contentsOfDirectory(atPath: path).filter(BundleExchange.isBundleFileName)
                        .sorted()
                    files += names.map { path + "/" + $0 }
                } else {
                    files.append(path)
                }
            }
            var results: [ImportResult] = []
            if !dryRun { results += try BundleExchange.retryHeld(replica: replica, trust: trust) }
            for file in files {
                results.append(
                    try BundleExchange.importBundle(
                        path: file, into: replica, trust: trust, dryRun: dryRun, progress: global.progress("importing \(file)")))
                global.endProgress()
            }
            report(results)
        }

        private func report(_ results: [ImportResult]) {
            if global.json {
                global.emitJSON([
                    "dry_run": dryRun,
                    "bundles": results.map { result -> [String: Any] in
                        var object: [String: Any] = ["path": result.path, "sender": result.sender, "signer": result.signer]
                        object.merge(result.summary.jsonObject) { a, _ in a }
                        if case .held(let reason) = result.outcome { object["held"] = reason }
                        return object
                    },
                ])
                return
            }
            for result in results {
                if case .held(let reason) = result.outcome {
                    global.say("held \(result.path): \(reason)")
                    continue
                }
                let verb = dryRun ? "would apply" : "applied"
                global.say(
                    "\(verb) \(result.path) from \(result.senderName) (signed by \(result.signer)): \(result.summary.changes) rows changed, \(result.summary.conflicts) conflicts"
                )
                if dryRun {
                    for (table, counts) in result.summary.tables.sorted(by: { $0.key < $1.key }) {
                        global.printResult(
                            "\(table): \(counts.inserted) inserted, \(counts.updated) updated, \(counts.deleted) deleted, \(counts.conflicts) conflicts"
                        )
                    }
                }
            }
        }
    }
}
