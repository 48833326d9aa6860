import Foundation
import TestSupport
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

// Helpers shared by the `sqsync sync` end-to-end suites (folder, USB relay, SSH, robustness).

extension Harness {
    /// `sqsync sync DB TARGET [extra...]` with replica `name`'s key; does not judge the exit code.
    @discardableResult
    func sync(_ db: String, as name: String, _ target: String, _ extra: [String] = []) throws -> ProcessResult {
        try sqsync(["sync", db, target] + extra, key: name)
    }

    /// Like ``sync(_:as:_:_:)`` but fails the test unless it exits 0.
    @discardableResult
    func syncOK(
        _ db: String, as name: String, _ target: String, _ extra: [String] = [],
        file: StaticString = #filePath, line: UInt = #line
    ) throws -> ProcessResult {
        let result = try sync(db, as: name, target, extra)
        XCTAssertEqual(
            result.status, 0,
            "sqsync sync \(name) \(target) \(extra.joined(separator: " ")) exited \(result.status): \(result.stderr)",
            file: file, line: line)
        return result
    }

    /// `sqsync sync ... --json`, parsed (fails the test unless it exits 0).
    func syncJSON(
        _ db: String, as name: String, _ target: String, _ extra: [String] = [],
        file: StaticString = #filePath, line: UInt = #line
    ) throws -> [String: Any] {
        let result = try syncOK(db, as: name, target, extra + ["--json"], file: file, line: line)
        return json(result, file: file, line: line)
    }

    /// A plain SQLite database (no sqsync) that receives the same writes as the replicas: the expected content.
    func makeReference(_ name: String, schema: String) throws -> String {
        let db = path("\(name).db")
        try sqlite(db, schema)
        return db
    }
}

/// Folders below a folder, relative, sorted.
func foldersBelow(_ root: String) -> [String] {
    guard let enumerator = FileManager.default.enumerator(atPath: root) else { return [] }
    var folders: [String] = []
    while let relative = enumerator.nextObject() as? String {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: root + "/" + relative, isDirectory: &isDirectory), isDirectory.boolValue {
            folders.append(relative)
        }
    }
    return folders.sorted()
}

/// `<root>/sqsync/outbox/<id>/` → the names in it (every file, hidden ones too).
func outboxes(_ root: String) -> [String: [String]] {
    let base = root + "/sqsync/outbox"
    var result: [String: [String]] = [:]
    for id in (try? FileManager.default.contentsOfDirectory(atPath: base)) ?? [] {
        result[id] = ((try? FileManager.default.contentsOfDirectory(atPath: base + "/" + id)) ?? []).sorted()
    }
    return result
}

/// Every `.sqsb` in the mailbox's outboxes, as full paths, sorted.
/// A mailbox's readers' key (`sqsync/keys/<readers>-<key>.age`, past
/// `SQSYNC_MAX_DIRECT_RECIPIENTS` readers), by path below the mailbox.
func isReadersKeyFile(_ relative: String) -> Bool {
    relative.hasPrefix("sqsync/keys/") && relative.hasSuffix(".age") && relative.split(separator: "/").count == 3
}

func bundlesIn(_ root: String) -> [String] {
    outboxes(root).flatMap { id, names in names.filter { $0.hasSuffix(".sqsb") }.map { "\(root)/sqsync/outbox/\(id)/\($0)" } }
        .sorted()
}

/// Fails (CI) or skips (elsewhere) when an outside tool is missing.
func requireTools(_ tools: [String], install: String, file: StaticString = #filePath, line: UInt = #line) throws {
    let missing = tools.filter { !FileManager.default.isExecutableFile(atPath: $0) }
    guard !missing.isEmpty else { return }
    let message = "\(missing.joined(separator: ", ")) missing (\(install))"
    if ProcessInfo.processInfo.environment["CI"] != nil {
        XCTFail(message, file: file, line: line)
        throw FixtureError(message)
    }
    throw XCTSkip(message)
}

/// A child started with posix_spawn, so the test can signal it at a moment of its choosing.
struct SpawnedChild {
    let pid: pid_t

    /// Starts `executable` with stdin on /dev/null and stdout/stderr into the given files.
    /// `environment` entries are added to (or replace) this process's environment.
    init(_ executable: String, _ arguments: [String], stdout: String, stderr: String, environment: [String: String] = [:]) throws
    {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, stdout, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_addopen(&actions, 2, stderr, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var merged = ProcessInfo.processInfo.environment
        merged.merge(environment) { _, new in new }
        let envp = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { envp.forEach { free($0) } }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, executable, &actions, nil, argv, envp)
        guard result == 0 else { throw FixtureError("cannot start \(executable): error \(result)") }
        self.pid = pid
    }

    /// Waits for the child; its exit status, or 128 + the signal that ended it.
    @discardableResult
    func wait() -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            if errno != EINTR { return -1 }
        }
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }

    /// Nil while the child runs, else what ``wait()`` would return.
    func poll() -> Int32? {
        var status: Int32 = 0
        guard waitpid(pid, &status, WNOHANG) == pid else { return nil }
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }
}

extension Harness {
    /// Runs each statement through the `sqlite3` shell on a replica and on the reference, and
    /// checks both changed the same, non-zero number of rows, so a write aimed at a row the
    /// replica does not hold yet is caught as a test mistake instead of a false sync failure.
    func write(_ db: String, reference: String, _ statements: [String], file: StaticString = #filePath, line: UInt = #line) throws
    {
        for statement in statements {
            let sql = statement + ";\nSELECT changes();"
            let onReplica = try sqlite(db, sql, file: file, line: line)
            let onReference = try sqlite(reference, sql, file: file, line: line)
            XCTAssertEqual(
                onReplica, onReference, "`\(statement)` changed a different number of rows on \(db) than on the reference",
                file: file, line: line)
            XCTAssertNotEqual(onReplica, "0\n", "`\(statement)` changed nothing on \(db)", file: file, line: line)
        }
    }
}
