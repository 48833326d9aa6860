import Foundation
import TestSupport
import XCTest

/// The result of running a process.
struct ProcessResult {
    var status: Int32
    var stdout: String
    var stderr: String
}

/// Runs the built `sqsync` binary and outside tools against real files in a temporary folder.
///
/// Each test gets a `Harness` with its own folder, a signing key per replica name and one
/// shared `allowed_signers` file that trusts them all.
final class Harness {
    let directory: URL
    private(set) var trustFile: String

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqsync-e2e-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        trustFile = directory.appendingPathComponent("allowed_signers").path
        _ = FileManager.default.createFile(atPath: trustFile, contents: Data())
    }

    /// A harness over a folder made by an earlier one (restored from a copy in its place):
    /// its keys, `allowed_signers`, replicas and mailboxes as they were.
    init(adopting directory: URL) {
        self.directory = directory
        trustFile = directory.appendingPathComponent("allowed_signers").path
    }

    deinit { try? FileManager.default.removeItem(at: directory) }

    func path(_ name: String) -> String { directory.appendingPathComponent(name).path }

    /// A new empty folder in the test's directory, for a folder mailbox.
    func folder(_ name: String) throws -> String {
        let folder = path(name)
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        return folder
    }

    /// The built binary: beside the test bundle in `.build/<config>/`, or `$SQSYNC_BIN`.
    static var binary: String {
        if let override = ProcessInfo.processInfo.environment["SQSYNC_BIN"] { return override }
        // macOS: the .xctest bundle sits in the products folder. Linux: the test runner is a plain
        // executable in the products folder and `bundleURL` already names that folder.
        let bundleURL = Bundle(for: Harness.self).bundleURL
        var candidates = [bundleURL.deletingLastPathComponent(), bundleURL]
        if let executable = Bundle.main.executableURL { candidates.append(executable.deletingLastPathComponent()) }
        let paths = candidates.map { $0.appendingPathComponent("sqsync").path }
        return paths.first { FileManager.default.isExecutableFile(atPath: $0) } ?? paths[0]
    }

    /// Runs a program and waits for it; stdin is closed unless `input` is given.
    @discardableResult
    static func run(
        _ executable: String, _ arguments: [String], environment: [String: String] = [:],
        input: String? = nil, currentDirectory: String? = nil
    ) throws -> ProcessResult {
        var env = ProcessInfo.processInfo.environment
        env.merge(environment) { _, new in new }
        let ran = try spawnAndWait(
            executable, arguments, environment: env, input: input.map { Data($0.utf8) }, currentDirectory: currentDirectory)
        return ProcessResult(
            status: ran.status, stdout: String(decoding: ran.stdout, as: UTF8.self), stderr: String(decoding: ran.stderr, as: UTF8.self))
    }

    /// Runs `sqsync` with the harness's trust file (and `--key` for `replica` when given). Its
    /// home is the harness folder, so a key of the machine's user is never the default.
    @discardableResult
    func sqsync(
        _ arguments: [String], key replica: String? = nil, environment: [String: String] = [:],
        prefix: [String] = []
    ) throws -> ProcessResult {
        var args = arguments + ["--trust", trustFile]
        if let replica { args += ["--key", keyPath(replica)] }
        let environment = ["HOME": directory.path, "SQSYNC_KEY": path("no-default.key")].merging(environment) { _, given in given }
        if prefix.isEmpty { return try Self.run(Self.binary, args, environment: environment) }
        return try Self.run(prefix[0], Array(prefix.dropFirst()) + [Self.binary] + args, environment: environment)
    }

    /// Like ``sqsync(_:key:environment:prefix:)`` but fails the test unless it exits 0.
    @discardableResult
    func ok(
        _ arguments: [String], key replica: String? = nil, file: StaticString = #filePath, line: UInt = #line
    ) throws -> ProcessResult {
        let result = try sqsync(arguments, key: replica)
        XCTAssertEqual(
            result.status, 0, "sqsync \(arguments.joined(separator: " ")) failed: \(result.stderr)", file: file, line: line)
        return result
    }

    func keyPath(_ replica: String) -> String { path("\(replica).key") }

    /// Creates a key for `replica` and trusts it.
    func makeKey(_ replica: String) throws {
        let result = try sqsync(["keygen", "--out", keyPath(replica), "--name", replica])
        XCTAssertEqual(result.status, 0, result.stderr)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: trustFile))
        handle.seekToEndOfFile()
        handle.write(Data(result.stdout.utf8))
        try handle.close()
    }

    /// Creates database `<name>.db` with `schema`, a key, `init` and `track --all`.
    @discardableResult
    func makeReplica(_ name: String, schema: String, trackArguments: [String] = ["--all"], keyBound: Bool = true) throws -> String {
        let db = path("\(name).db")
        try sqlite(db, schema)
        try makeKey(name)
        try ok(["init", db, "--name", name], key: keyBound ? name : nil)
        try ok(["track", db] + trackArguments)
        return db
    }

    /// Clones `source` into `<name>.db` with its own key, from which its knowledge ID is made
    /// (`keyBound: false`: a random ID, bound to the first key it signs with, as replicas of
    /// sqsync 0.1 are).
    @discardableResult
    func cloneReplica(_ source: String, as name: String, keyBound: Bool = true) throws -> String {
        let db = path("\(name).db")
        try makeKey(name)
        try ok(["clone", source, db, "--name", name], key: keyBound ? name : nil)
        return db
    }

    /// Runs SQL through the `sqlite3` shell, the outside writer, and returns its output.
    @discardableResult
    func sqlite(_ db: String, _ sql: String, file: StaticString = #filePath, line: UInt = #line) throws -> String {
        let result = try Self.run("/usr/bin/sqlite3", ["-bail", db], input: sql)
        XCTAssertEqual(result.status, 0, "sqlite3 failed: \(result.stderr)", file: file, line: line)
        return result.stdout
    }

    /// A table's rows as text, ordered, for comparing replicas (quote() keeps types exact).
    func dump(_ db: String, table: String, orderBy: String) throws -> String {
        let columns = try sqlite(
            db, "SELECT group_concat('quote(\"' || name || '\")', ' || ''|'' || ') FROM pragma_table_info('\(table)');"
        )
        .trimmingCharacters(in: .whitespacesAndNewlines)
        return try sqlite(db, "SELECT \(columns) FROM \"\(table)\" ORDER BY \(orderBy);")
    }

    /// Exports from `db` into a new bundle file and returns its path.
    func export(_ db: String, as replica: String, extra: [String] = []) throws -> String {
        let file = path("\(replica)-\(UUID().uuidString.prefix(6)).sqsb")
        try ok(["export", db, "-o", file] + extra, key: replica)
        return file
    }

    /// Exports from `from` and imports into `to`.
    func send(_ from: (db: String, name: String), to: (db: String, name: String)) throws {
        let file = try export(from.db, as: from.name)
        try ok(["import", to.db, file], key: to.name)
    }
}

// MARK: - Helpers added for the CLI end-to-end suites

extension Harness {
    /// The whole database as SQL text (`.dump`), sqsync's own `_sqsync_` tables included.
    func fullDump(_ db: String, file: StaticString = #filePath, line: UInt = #line) throws -> String {
        try sqlite(db, ".dump", file: file, line: line)
    }

    /// The bytes of a file and its `-wal` companion (empty when missing), for "nothing was touched" checks.
    func fileBytes(_ path: String) -> Data {
        var data = FileManager.default.contents(atPath: path) ?? Data()
        data.append(FileManager.default.contents(atPath: path + "-wal") ?? Data())
        return data
    }

    /// Parses `--json` output (one object on stdout).
    func json(_ result: ProcessResult, file: StaticString = #filePath, line: UInt = #line) -> [String: Any] {
        guard let object = try? JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any] else {
            XCTFail("not a JSON object on stdout: \(result.stdout) / stderr: \(result.stderr)", file: file, line: line)
            return [:]
        }
        return object
    }

    /// `sqsync ... --json`, failing the test unless it exits 0, parsed.
    func okJSON(
        _ arguments: [String], key replica: String? = nil, file: StaticString = #filePath, line: UInt = #line
    ) throws -> [String: Any] {
        let result = try ok(arguments + ["--json"], key: replica, file: file, line: line)
        return json(result, file: file, line: line)
    }

    /// The knowledge ID from `status --json`.
    func knowledgeID(_ db: String) throws -> String {
        try okJSON(["status", db])["knowledge_id"] as? String ?? ""
    }

    /// The entries of `conflicts --json`.
    func conflicts(_ db: String) throws -> [[String: Any]] {
        try okJSON(["conflicts", db])["conflicts"] as? [[String: Any]] ?? []
    }

    /// Runs SQL through `sqlite3` with a program in front of it (e.g. `faketime -f -1d`).
    @discardableResult
    func sqlite(
        _ db: String, _ sql: String, prefix: [String], file: StaticString = #filePath, line: UInt = #line
    ) throws -> String {
        guard let program = prefix.first else { return try sqlite(db, sql, file: file, line: line) }
        let result = try Self.run(program, Array(prefix.dropFirst()) + ["/usr/bin/sqlite3", "-bail", db], input: sql)
        XCTAssertEqual(
            result.status, 0, "\(prefix.joined(separator: " ")) sqlite3 failed: \(result.stderr)", file: file, line: line)
        return result.stdout
    }

    /// A copy of `source` in the harness folder under `name`.
    func copyFile(_ source: String, to name: String) throws -> String {
        let target = path(name)
        try? FileManager.default.removeItem(atPath: target)
        try FileManager.default.copyItem(atPath: source, toPath: target)
        return target
    }

    /// A copy of `source` that sqsync is told was only moved (`sqsync init` on it): a copy the
    /// check at open cannot see (a thief's, or an operator's mistaken word), so what the
    /// network does about it shows.
    func copyTakenForMoved(_ source: String, to name: String, file: StaticString = #filePath, line: UInt = #line) throws -> String {
        let target = try copyFile(source, to: name)
        try ok(["init", target], file: file, line: line)
        return target
    }
}

extension ProcessResult {
    /// Non-empty stderr lines.
    var stderrLines: [String] {
        stderr.split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
            .filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
    }
}
