import FoundationEssentials
import Glibc

/// The `rclone` program, run once per operation: `SQSYNC_RCLONE` when set, else `rclone` on
/// `PATH` (Debian's package). Every run gets the same flags: no prompt for a config password,
/// one attempt (a sync that fails is simply run again), and the caller's timeout for connecting
/// and for any wait on the remote.
struct RcloneProgram {
    let executable: String
    private let commonArguments: [String]

    /// The most a listing may print (some 400,000 objects): whoever can write to the store
    /// can plant objects, and a listing is held in memory, decoded, several times over.
    static let maxListingBytes = 64 * 1024 * 1024

    init(timeoutSeconds: Int, environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        executable = try Self.locate(environment)
        let timeout = "\(max(1, timeoutSeconds))s"
        commonArguments = [
            "--quiet", "--ask-password=false", "--retries", "1", "--low-level-retries", "3", "--contimeout", timeout,
            "--timeout", timeout,
        ]
    }

    private static func locate(_ environment: [String: String]) throws -> String {
        if let chosen = environment["SQSYNC_RCLONE"], !chosen.isEmpty {
            guard FileManager.default.isExecutableFile(atPath: chosen) else {
                throw TransportError(.connection, "\(chosen): SQSYNC_RCLONE names no program that can be run")
            }
            return chosen
        }
        for folder in (environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
            let candidate = "\(folder)/rclone"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw TransportError(
            .connection, "rclone: not found on PATH; an rclone: mailbox needs it (apt-get install rclone)")
    }

    /// What one run printed and how it ended.
    struct Outcome {
        var status: Int32
        var output: Data
        /// The last line rclone printed on its standard error, without its date and level.
        var complaint: String
    }

    /// Runs `rclone <command> <flags> -- <operands>` and collects what it prints, up to
    /// `outputLimit` bytes; a run that prints more is stopped and fails.
    func run(_ command: String, flags: [String] = [], _ operands: [String], outputLimit: Int = maxListingBytes) throws
        -> Outcome
    {
        var output = Data()
        let outcome = try spawn(command, flags, operands) { chunk in
            output.append(chunk)
            return output.count <= outputLimit
        }
        guard output.count <= outputLimit else {
            throw TransportError(.io, "rclone \(command) printed more than \(outputLimit) bytes; stopped")
        }
        return Outcome(status: outcome.status, output: output, complaint: outcome.complaint)
    }

    /// Runs `rclone <command>` and hands what it prints to `consume`, chunk by chunk, until
    /// `consume` returns false (the run is then stopped) or the program ends. Its standard
    /// error is read in the same loop (the last 64 KiB kept), so a chatty child never blocks.
    func spawn(_ command: String, _ flags: [String], _ operands: [String], consume: (Data) throws -> Bool) throws -> (
        status: Int32, complaint: String
    ) {
        // `--` ends the flags: a path is never taken for one.
        let child = try ChildProcess(executable, [command] + commonArguments + flags + ["--"] + operands)
        var errors: [UInt8] = []
        var stopped = false
        do {
            try child.readUntilEnd { stream, chunk in
                guard stream == .output else {
                    errors += chunk
                    if errors.count > 65536 { errors.removeFirst(errors.count - 65536) }
                    return true
                }
                if try !consume(Data(chunk)) {
                    stopped = true
                    return false
                }
                return true
            }
        } catch {
            _ = child.stop()
            throw error
        }
        let status = stopped ? child.stop() : child.wait()
        return (stopped ? -1 : status, Self.lastComplaint(String(decoding: errors, as: UTF8.self)))
    }

    /// rclone's last log line, which says why it failed: `2026/11/27 18:35:24 Failed to …` →
    /// `Failed to …`. Control characters (names chosen by whoever wrote to the store) are dropped.
    static func lastComplaint(_ text: String) -> String {
        let lines = text.split(whereSeparator: \.isNewline).map(String.init).filter { !$0.isEmpty }
        guard var line = lines.last else { return "" }
        let parts = line.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        if parts.count == 3, parts[0].count == 10, parts[0].filter({ $0 == "/" }).count == 2 { line = String(parts[2]) }
        if line.hasPrefix("ERROR : ") { line.removeFirst("ERROR : ".count) }
        return String(String.UnicodeScalarView(line.unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7F }))
    }
}
