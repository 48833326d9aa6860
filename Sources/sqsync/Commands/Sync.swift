import ArgumentParser
import Bundle
import ChangeLog
import FoundationEssentials
import Glibc
import Transport

extension SQSync {
    struct Sync: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Import what is new in a mailbox (folder, USB stick, ssh:// or rclone:), then leave what its readers lack.")

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica.") var db: String
        @Argument(help: "A folder, ssh://[user@]host[:port]/path, or rclone:REMOTE:PATH (any rclone remote).")
        var target: String
        @Option(
            name: .long,
            help: ArgumentHelp("Known-hosts file for ssh:// targets (default ~/.ssh/known_hosts).", valueName: "FILE"))
        var knownHosts: String?
        @Flag(name: .long, help: "Trust and record the key of an SSH host not seen before.") var acceptNewHostKey = false
        @Option(
            name: .long,
            help: ArgumentHelp("Private key for SSH login (default: ssh-agent, then ~/.ssh/id_*).", valueName: "FILE"))
        var sshKey: String?
        @Option(name: .long, help: "Seconds allowed for connecting and for each transfer (ssh:// and rclone:).")
        var timeout: Int = 30
        @Flag(
            name: .long,
            help: "Leave this replica's bundle in the clear (by default it is encrypted to the mailbox's readers' keys).")
        var noEncrypt = false
        @Flag(
            name: .long,
            help: "Start a new mailbox at a target this replica synced with before that holds none now (by default refused: a stick not mounted looks the same).")
        var newMailbox = false

        func validate() throws {
            if timeout <= 0 { throw ValidationError("--timeout must be a positive number of seconds") }
            if SSHTarget.isSSHURL(target) {
                do { _ = try SSHTarget(url: target) } catch { throw ValidationError("\(error)") }
            }
            if RcloneTarget.isRcloneURL(target) {
                do { _ = try RcloneTarget(url: target) } catch { throw ValidationError("\(error)") }
            } else if !SSHTarget.isSSHURL(target), let scheme = target.firstRange(of: "://").map({ target[..<$0.lowerBound] }),
                !scheme.isEmpty, scheme.allSatisfy({ $0.isLetter || $0.isNumber || "+-.".contains($0) })
            {
                throw ValidationError(
                    "\(target): \(scheme):// is not a target sqsync speaks: a folder, ssh://[user@]host[:port]/path, or rclone:REMOTE:PATH (rclone reaches FTP, WebDAV, S3 and more: docs/OBJECT-STORES.md)")
            }
        }

        func run() throws {
            let replica = try Replica(path: db)
            let key = try global.signingKey()
            let trust = try global.trustedSigners()
            let lock = try SyncLock(database: db)
            let transport: Transport
            if SSHTarget.isSSHURL(target) {
                let address = try SSHTarget(url: target)
                let sftp = try SFTPTransport(
                    target: address,
                    options: SSHOptions(
                        knownHostsFile: knownHosts, acceptNewHostKey: acceptNewHostKey, identityFile: sshKey,
                        timeoutSeconds: timeout))
                guard try sftp.rootIsFolder() else {
                    throw Failure.raise(
                        "\(sftp.displayName): no such folder on \(address.host) (create it first, e.g. ssh \(address.port == 22 ? "" : "-p \(address.port) ")\(address.user.map { "\($0)@" } ?? "")\(address.host) mkdir -p '\(address.path)')")
                }
                transport = sftp
            } else if RcloneTarget.isRcloneURL(target) {
                transport = try RcloneTransport(
                    target: try RcloneTarget(url: target), timeoutSeconds: timeout, listing: Mailbox.folder)
            } else {
                guard isFolder(target) == true else {
                    throw Failure.raise("\(target): no such directory (a sync target is a folder, ssh://host/path or rclone:REMOTE:PATH)")
                }
                transport = DirectoryTransport(root: target)
            }
            let report = try global.showingProgress(of: replica, db) {
                try Mailbox(transport: transport, encrypts: !noEncrypt, startsNewMailbox: newMailbox).sync(
                    replica: replica, key: key, trust: trust)
            }
            withExtendedLifetime(lock) {}
            emit(report, target: transport.displayName)
            // A bundle refused for its signer stays refused, and says so, until trust changes.
            if !report.rejected.isEmpty || !report.untrusted.isEmpty || !report.signedAsThisReplica.isEmpty {
                throw ExitCode(Failure.rejectedBundle)
            }
            if !report.refused.isEmpty { throw ExitCode(Failure.failed) }
        }

        /// One line of what waits after this sync, by kind, or nil when nothing does.
        private func waiting(_ report: SyncReport) -> String? {
            var waits: [String] = []
            if !report.untrusted.isEmpty {
                waits.append(
                    "\(counted(report.untrusted.count, "bundle")) signed by a key not trusted here (exit 3; `sqsync status \(db)` prints the allowed_signers line to add, to \(global.trustPath))")
            }
            if !report.stillHeld.isEmpty {
                waits.append("\(counted(report.stillHeld.count, "bundle")) held (a migration, admin statements or a label this replica lacks: `sqsync status \(db)` says which)")
            }
            if report.waitingForKey > 0 {
                waits.append("\(counted(report.waitingForKey, "bundle")) for a readers' key (it comes with its writer's next sync)")
            }
            return waits.isEmpty ? nil : waits.joined(separator: "; ")
        }

        private func emit(_ report: SyncReport, target: String) {
            let applied = report.imported.filter { $0.outcome == .applied }
            let held = report.imported.count - applied.count
            let changesIn = applied.reduce(0) { $0 + $1.summary.changes }
            let conflicts = applied.reduce(0) { $0 + $1.summary.conflicts }
            let movedOut = applied.reduce(0) { $0 + $1.summary.leftScope }
            for problem in report.rejected + report.refused {
                // Each reason names its file in the mailbox already.
                writeStandardError("sqsync: \(problem.reason)\n")
            }
            for warning in report.warnings + report.withheld.map(describe) + report.numberedTwice {
                writeStandardError("sqsync: warning: \(warning)\n")
            }
            for standing in report.signedAsThisReplica { writeStandardError("sqsync: \(db): \(standing)\n") }
            for note in report.notes { global.say("sqsync: note: \(note)") }
            for held in report.stillHeld { global.say("sqsync: held: \(held.path): \(held.reason)") }
            // Not already said by a refusal of this run: the untrusted signers' lines to add.
            let refusedNow = Set(report.rejected.map(\.reason))
            for untrusted in report.untrusted where !refusedNow.contains(untrusted) { global.say("sqsync: untrusted: \(untrusted)") }
            if let waits = waiting(report) {
                // Every run, under -q too, so that cron's mail shows what waits until it ends.
                writeStandardError("sqsync: \(db): waiting: \(waits) (docs/TROUBLESHOOTING.md, \"Waiting\")\n")
            }
            for gap in report.gaps { global.say("sqsync: note: \(describe(gap))") }
            if global.json {
                global.emitJSON([
                    "target": target, "bundles_in": applied.count, "changes_in": changesIn, "conflicts": conflicts,
                    "held": held, "rejected": report.rejected.map { ["name": $0.name, "reason": $0.reason] },
                    "refused": report.refused.map { ["name": $0.name, "reason": $0.reason] },
                    "bundle_out": report.exported.map { URL(fileURLWithPath: $0.path).lastPathComponent } as Any,
                    "rows_out": report.exported?.rows ?? 0, "removed": report.removed,
                    "leftovers_removed": report.leftoversRemoved, "warnings": report.warnings, "notes": report.notes,
                    "held_bundles": report.stillHeld.map { ["path": $0.path, "reason": $0.reason] },
                    "gaps": report.gaps.map(gapJSON), "refused_before": report.plantedSkipped.map(displayText),
                    "rows_left_scope": report.rowsLeftScope, "rows_moved_out": movedOut, "oversized": report.oversized, "untrusted": report.untrusted,
                    "withheld": report.withheld.map(withheldJSON), "signed_as_this_replica": report.signedAsThisReplica,
                    "numbered_twice": report.numberedTwice,
                    "waiting_for_key": report.waitingForKey, "for_other_readers": report.forOtherReaders,
                ])
            } else {
                let out = report.exported.map { "1 bundle out (\(counted($0.rows, "row")))" } ?? "nothing new out"
                var extras: [String] = []
                if report.rowsLeftScope > 0 { extras.append("\(counted(report.rowsLeftScope, "row")) that left this replica's scope removed") }
                let refusedNow = report.rejected.count + report.refused.count
                if refusedNow > 0 { extras.append("\(counted(refusedNow, "file")) refused") }
                if report.forOtherReaders > 0 {
                    extras.append("\(counted(report.forOtherReaders, "bundle")) for other readers left unread")
                }
                if report.oversized > 0 { extras.append("\(counted(report.oversized, "file")) too large left unread") }
                if !report.withheld.isEmpty { extras.append("\(counted(report.withheld.count, "value")) too large left out") }
                if report.removed > 0 { extras.append("\(counted(report.removed, "old bundle")) removed") }
                if report.leftoversRemoved > 0 {
                    extras.append("\(counted(report.leftoversRemoved, "unfinished upload")) of an earlier run removed")
                }
                if !report.plantedSkipped.isEmpty {
                    extras.append("\(counted(report.plantedSkipped.count, "file")) refused before left unread")
                }
                global.say(
                    "synced with \(target): \(counted(applied.count, "bundle")) in (\(counted(changesIn, "row")) changed, \(movedOut > 0 ? "\(counted(movedOut, "row")) moved out of this replica's scope, " : "")\(counted(conflicts, "conflict"))\(held > 0 ? ", \(held) held" : "")), \(out)\(extras.map { ", " + $0 }.joined())"
                )
            }
        }
    }
}
