import ArgumentParser
import ChangeLog
import SQLiteDatabase
import FoundationEssentials
import Glibc

@main
struct SQSync: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sqsync",
        abstract: "Keep copies of a SQLite database in step without a server.",
        discussion: """
            Exit codes: 0 success (including nothing to do), 1 failure, 2 usage error, \
            3 a bundle was rejected, 4 another sqsync holds the database's sync lock, \
            5 the database stayed busy (an app's write transaction outlasted SQSYNC_BUSY_TIMEOUT, \
            5 s by default): nothing changed, safe to retry.
            """,
        version: sqsyncVersion,
        subcommands: [
            Keygen.self, Init.self, Track.self, Untrack.self, Status.self, Export.self, Import.self,
            Sync.self, Peers.self, Purge.self, Policy.self, Conflicts.self, Inspect.self, Doctor.self, Refresh.self, Clone.self, Why.self,
            Label.self, Scope.self, Grant.self, Revoke.self, Reidentify.self,
        ])

    /// Runs the command and maps every failure to one stderr line and the spec's exit codes;
    /// ArgumentParser's own usage errors (64) become 2. Global options may come first.
    static func main() {
        Database.leaveOutMemoryStatistics()
        let commands = configuration.subcommands.map { $0._commandName }
        if let usage = CommandSuggestion.usageError(
            for: Array(CommandLine.arguments.dropFirst()), commands: commands, usage: helpMessage())
        {
            writeStandardError(usage + "\n")
            Glibc.exit(2)
        }
        do {
            var command = try parseAsRoot(
                GlobalOptionsPlacement.reordered(Array(CommandLine.arguments.dropFirst()), root: SQSync.self))
            try command.run()
        } catch let exit as ExitCode {
            Glibc.exit(exit.rawValue)
        } catch {
            let code = exitCode(for: error)
            if code == .success {
                print(fullMessage(for: error))
                Glibc.exit(0)
            }
            if let failure = Failure(error) {
                writeStandardError("sqsync: " + failure.message + "\n")
                Glibc.exit(failure.exitCode)
            }
            let message = fullMessage(for: error)
            writeStandardError(message + "\n")
            Glibc.exit(code == .validationFailure ? 2 : code.rawValue)
        }
    }
}
