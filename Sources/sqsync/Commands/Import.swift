import ArgumentParser
import Bundle
import ChangeLog
import FoundationEssentials
import Glibc
import Transport

extension SQSync {
    struct Import: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Verify and merge bundles, in any order; one transaction per bundle.",
            discussion: """
                Every file is tried on its own: a bad one is reported (one line naming it) and the \
                others are still applied. Exit 3 if any file was rejected (not a bundle, damaged, \
                badly signed, untrusted), else 1 if any could not be applied. Files in a folder that \
                are not bundles (*.sqsb) are listed as skipped.
                """)

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica.") var db: String
        @Argument(help: "Bundle files, or folders of bundles.") var bundles: [String]
        @Flag(name: .long, help: "Report per table what would change and conflict; change nothing.") var dryRun = false

        /// What became of one file named on the command line or found in a folder.
        private enum Outcome {
            case imported(ImportResult)
            case skipped(path: String, reason: String)
            case failed(path: String, message: String, exitCode: Int32)
        }

        func run() throws {
            let replica = try Replica(path: db)
            try replica.refuseWhileMigrating("import")
            let trust = try global.trustedSigners()
            var files: [String] = []
            var outcomes: [Outcome] = []
            for path in bundles {
                let folder = isFolder(path)
                if folder == nil {
                    outcomes.append(.failed(path: path, message: "\(path): no such file", exitCode: Failure.failed))
                } else if folder == true {
                    for name in try FileManager.default.contentsOfDirectory(atPath: path).sorted() {
                        if BundleExchange.isBundleFileName(name) {
                            files.append(path + "/" + name)
                        } else {
                            outcomes.append(.skipped(path: path + "/" + name, reason: "not a bundle (*.sqsb)"))
                        }
                    }
                } else {
                    files.append(path)
                }
            }
            if !dryRun {
                outcomes += try BundleExchange.retryHeld(replica: replica, trust: trust).map(Outcome.imported)
            }
            // Encrypted bundles are decrypted with this replica's key, read only when one comes.
            var key: SigningKey?
            for file in files {
                if key == nil, AgeFile.isEncrypted(path: file) { key = try global.signingKey() }
                outcomes.append(try importing(file, into: replica, trust: trust, key: key))
            }
            // What these files brought (admin statements, a peer's migration) may release
            // bundles held before them.
            if !dryRun && !files.isEmpty {
                outcomes += try BundleExchange.retryHeld(replica: replica, trust: trust).map(Outcome.imported)
            }
            report(outcomes, numberedTwice: dryRun ? [] : try replica.standingNumberedTwice())
            let codes = outcomes.compactMap { outcome -> Int32? in
                if case .failed(_, _, let code) = outcome { return code }
                return nil
            }
            let signedAsThisReplica = outcomes.contains { outcome in
                if case .imported(let result) = outcome { return !result.summary.signedAsThisReplica.isEmpty }
                return false
            }
            if codes.contains(Failure.rejectedBundle) || signedAsThisReplica { throw ExitCode(Failure.rejectedBundle) }
            if let code = codes.first { throw ExitCode(code) }
        }

        /// One bundle; a failure that concerns only this file is returned, not thrown, so the
        /// other files are still applied.
        private func importing(_ file: String, into replica: Replica, trust: AllowedSigners, key: SigningKey?) throws -> Outcome {
            do {
                return .imported(
                    try global.showingProgress(of: replica, replica.path) {
                        try BundleExchange.importBundle(
                            path: file, into: replica, trust: trust, decryptingWith: key,
                            readersKeys: Mailbox.readersKeys(besideBundleAt: file, with: key), dryRun: dryRun)
                    })
            } catch let error as BundleError {
                return failure(file, error)
            } catch let error as ChangeLogError {
                return failure(file, error)
            }
        }

        private func failure(_ file: String, _ error: Error) -> Outcome {
            let failure = Failure(error) ?? Failure(message: "\(error)", exitCode: Failure.failed)
            let message = failure.message.contains(file) ? failure.message : "\(file): \(failure.message)"
            return .failed(path: file, message: message, exitCode: failure.exitCode)
        }

        private func report(_ outcomes: [Outcome], numberedTwice: [String]) {
            for case .failed(_, let message, _) in outcomes {
                writeStandardError("sqsync: \(message)\n")
            }
            for standing in numberedTwice { writeStandardError("sqsync: warning: \(db): \(standing)\n") }
            for case .imported(let result) in outcomes {
                for refused in result.summary.signedAsThisReplica { writeStandardError("sqsync: \(result.path): \(refused)\n") }
            }
            if global.json {
                global.emitJSON(["dry_run": dryRun, "bundles": outcomes.map(jsonObject)])
                return
            }
            for outcome in outcomes {
                switch outcome {
                case .skipped(let path, let reason):
                    global.say("skipped \(path): \(reason)")
                case .failed:
                    continue
                case .imported(let result):
                    say(result)
                }
            }
        }

        private func say(_ result: ImportResult) {
            for warning in result.warnings { global.say("warning: \(warning)") }
            switch result.outcome {
            case .held(let reason):
                global.say("held \(result.path): \(reason.message)")
            case .ownBundle:
                global.say("nothing new in \(result.path): this replica wrote it")

            case .applied:
                let verb = dryRun ? "would apply" : "applied"
                global.say(
                    "\(verb) \(result.path) from \(displayText(result.senderName)) (signed by \(displayText(result.signer))): \(counted(result.summary.changes, "row")) changed, \(counted(result.summary.conflicts, "conflict"))"
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

        /// One entry of `bundles` in the JSON output (docs/JSON_OUTPUT.md).
        private func jsonObject(_ outcome: Outcome) -> [String: Any] {
            switch outcome {
            case .skipped(let path, let reason):
                return ["path": path, "status": "skipped", "reason": reason]
            case .failed(let path, let message, let code):
                return ["path": path, "status": code == Failure.rejectedBundle ? "rejected" : "failed", "reason": message]
            case .imported(let result):
                var object: [String: Any] = [
                    "path": result.path, "sender": result.sender, "signer": result.signer, "warnings": result.warnings,
                    "superseded": result.superseded,
                ]
                object.merge(result.summary.jsonObject) { a, _ in a }
                switch result.outcome {
                case .applied: object["status"] = dryRun ? "would_apply" : "applied"
                case .ownBundle: object["status"] = "own"
                case .held(let reason):
                    object["status"] = "held"
                    object["held"] = reason.message
                }
                return object
            }
        }
    }
}
