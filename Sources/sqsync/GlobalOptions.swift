import ArgumentParser
import Bundle
import ChangeLog
import FoundationEssentials
import Glibc

/// Options every command takes (SPEC §3).
struct GlobalOptions: ParsableArguments {
    @Option(
        name: .long,
        help: ArgumentHelp(
            "This replica's Ed25519 private key, OpenSSH format (default: $SQSYNC_KEY, else ~/.config/sqsync/id_ed25519).",
            valueName: "FILE"))
    var key: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Trusted signers, OpenSSH allowed_signers format (default: $SQSYNC_TRUST, else ~/.config/sqsync/allowed_signers).",
            valueName: "FILE"))
    var trust: String?

    @Flag(name: .long, help: "Machine-readable output on stdout.")
    var json = false

    @Flag(name: [.short, .long], help: "Print nothing on success, results included (for cron); errors still go to stderr.")
    var quiet = false

    static var configDirectory: String {
        (ProcessInfo.processInfo.environment["HOME"] ?? FileManager.default.homeDirectoryForCurrentUser.path) + "/.config/sqsync"
    }

    /// `--key`, else `$SQSYNC_KEY`, else `~/.config/sqsync/id_ed25519`.
    var keyPath: String { key ?? Self.setting("SQSYNC_KEY") ?? Self.configDirectory + "/id_ed25519" }

    /// `--trust`, else `$SQSYNC_TRUST`, else `~/.config/sqsync/allowed_signers`.
    var trustPath: String { trust ?? Self.setting("SQSYNC_TRUST") ?? Self.configDirectory + "/allowed_signers" }

    /// An environment variable's value; set but empty counts as not set.
    private static func setting(_ name: String) -> String? {
        ProcessInfo.processInfo.environment[name].flatMap { $0.isEmpty ? nil : $0 }
    }

    func signingKey() throws -> SigningKey {
        guard FileManager.default.fileExists(atPath: keyPath) else {
            let given = key != nil ? "--key" : Self.setting("SQSYNC_KEY") != nil ? "SQSYNC_KEY" : nil
            guard let given else {
                throw Failure.raise("\(keyPath): no signing key; create one with `sqsync keygen` or pass --key")
            }
            // A path the user typed: most likely mistyped, so no key is suggested there.
            let folder = keyPath.contains("/") ? String(keyPath[..<keyPath.lastIndex(of: "/")!]) : ""
            let nearby = ((try? FileManager.default.contentsOfDirectory(atPath: folder.isEmpty ? "." : folder)) ?? [])
                .filter { $0.hasSuffix(".key") || $0.hasPrefix("id_ed25519") && !$0.hasSuffix(".pub") }.sorted().prefix(5)
            throw Failure.raise(
                "\(keyPath): no such key file (given by \(given))"
                    + (nearby.isEmpty ? "; check the path" : "; keys in that folder: \(nearby.map(displayText).joined(separator: ", "))"))
        }
        return try SigningKey.load(path: keyPath)
    }

    /// The public half of `--key`: the file may be a private key or its `.pub` line, so that
    /// `clone --key` can take the new site's public key without its secret.
    func publicKey() throws -> SSHPublicKey {
        let text = (try? String(contentsOfFile: keyPath, encoding: .utf8)) ?? ""
        if text.hasPrefix("ssh-") {
            do {
                return try SSHPublicKey(openSSHLine: text.trimmed)
            } catch {
                throw Failure.raise("\(keyPath): not an OpenSSH Ed25519 public key line (\(error))")
            }
        }
        return try signingKey().publicKey
    }

    func trustedSigners() throws -> AllowedSigners { try AllowedSigners.load(path: trustPath) }

    /// What a read-only command says when an app's write transaction kept it from folding the
    /// changes logged since the last fold: it answers at once, from what was folded before.
    static func notFolded(_ db: String) -> String {
        "sqsync: note: \(db): an app holds a write transaction, so changes logged since the last fold are not counted here yet (they are at the next command or sync)"
    }

    /// A human line on stderr, unless --quiet.
    func say(_ line: String) {
        guard !quiet else { return }
        writeStandardError(line + "\n")
    }

    /// Machine output: one JSON object on stdout. Readers must ignore fields they do not know.
    func emitJSON(_ object: [String: Any]) {
        writeStandardOutput(jsonText(object) + "\n")
    }

    /// Result text on stdout (used when the output *is* the result, e.g. status, conflicts).
    func printResult(_ text: String) {
        guard !quiet else { return }
        print(text)
    }

    /// Shows `replica`'s long work on stderr while `body` runs, when stderr is a terminal
    /// (``ProgressLine``); the line is cleared before `body`'s result is said.
    func showingProgress<T>(of replica: Replica, _ label: String, _ body: () throws -> T) rethrows -> T {
        guard let line = ProgressLine.make(label, global: self) else { return try body() }
        line.watch(replica)
        defer {
            replica.progress = nil
            line.end()
        }
        return try body()
    }
}

extension ApplySummary {
    var jsonObject: [String: Any] {
        [
            "changes": changes, "conflicts": conflicts, "knowledge_advanced": knowledgeAdvanced, "left_scope": leftScope,
            "tables": tables.mapValues { counts in
                [
                    "inserted": counts.inserted, "updated": counts.updated, "deleted": counts.deleted,
                    "unchanged": counts.unchanged, "conflicts": counts.conflicts, "left_scope": counts.leftScope,
                ]
            },
        ]
    }
}
