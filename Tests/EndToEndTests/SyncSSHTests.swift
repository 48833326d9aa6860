import Foundation
import TestSupport
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

/// `sqsync sync DB ssh://user@127.0.0.1:PORT/path` against a throwaway OpenSSH server (see
/// ``SSHServerFixture``): the mailbox over SFTP, host-key checking, and hosts that are dead or silent.
final class SyncSSHTests: XCTestCase {
    private var server: SSHServerFixture!
    private var h: Harness!
    private var a = "", b = "", reference = ""
    private var remote: String { server.remoteDirectory }
    private var target: String { server.url(path: remote) }

    private static let schema = "CREATE TABLE doc(id TEXT PRIMARY KEY, title TEXT, size INTEGER, body BLOB);"
    private static let seed = "INSERT INTO doc VALUES ('d0', 'seed', 1, x'00');"

    override func setUpWithError() throws {
        server = try SSHServerFixture()
        h = try Harness()
        a = try h.makeReplica("A", schema: Self.schema + Self.seed)
        b = try h.cloneReplica(a, as: "B")
        reference = try h.makeReference("reference", schema: Self.schema + Self.seed)
    }

    override func tearDown() {
        h = nil
        server = nil
    }

    private func ssh(knownHosts: String? = nil, _ extra: [String] = []) -> [String] {
        ["--ssh-key", server.clientKeyPath, "--known-hosts", knownHosts ?? server.knownHostsPath] + extra
    }

    private func write(_ db: String, _ statements: String..., file: StaticString = #filePath, line: UInt = #line) throws {
        try h.write(db, reference: reference, statements, file: file, line: line)
    }

    private func content(_ db: String) throws -> String { try h.dump(db, table: "doc", orderBy: "id") }

    /// A known_hosts file in the harness folder with the given text.
    private func knownHostsFile(_ name: String, _ text: String) throws -> String {
        let path = h.path(name)
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// Asserts a refused connection: exit 1, one stderr line naming the host, nothing written anywhere.
    private func assertRefused(
        _ result: ProcessResult, host: String, before: String, mentioning extra: [String] = [],
        file: StaticString = #filePath, line: UInt = #line
    ) throws {
        XCTAssertEqual(result.status, 1, "stderr: \(result.stderr)", file: file, line: line)
        XCTAssertEqual(result.stderrLines.count, 1, "one line expected: \(result.stderr)", file: file, line: line)
        XCTAssertTrue(result.stderr.contains(host), "the message must name \(host): \(result.stderr)", file: file, line: line)
        for word in extra {
            XCTAssertTrue(
                result.stderr.contains(word), "the message should mention \(word): \(result.stderr)", file: file, line: line)
        }
        XCTAssertEqual(result.stdout, "", file: file, line: line)
        XCTAssertEqual(try h.fullDump(a), before, "the database changed although the host was refused", file: file, line: line)
    }

    // MARK: - Tests

    /// A mailbox file over SQSYNC_MAX_BUNDLE_BYTES is skipped, with a warning naming it, before
    /// it is downloaded; with the default cap the next sync takes it.
    func testAnOversizedMailboxFileIsSkippedBeforeDownload() throws {
        let noise = (0..<20_000).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        try write(a, "INSERT INTO doc VALUES ('big', 'large', 20000, x'\(noise)')")
        try h.syncOK(a, as: "A", target, ssh())
        let capped = try h.sqsync(
            ["sync", b, target] + ssh(["--json"]), key: "B", environment: ["SQSYNC_MAX_BUNDLE_BYTES": "4096"])
        XCTAssertEqual(capped.status, 0, capped.stderr)
        XCTAssertTrue(capped.stderr.contains("SQSYNC_MAX_BUNDLE_BYTES") && capped.stderr.contains(".sqsb"), capped.stderr)
        XCTAssertEqual(h.json(capped)["bundles_in"] as? Int, 0, capped.stdout)
        XCTAssertFalse(try content(b).contains("big"))
        try h.syncOK(b, as: "B", target, ssh())
        XCTAssertEqual(try content(b), try content(reference))
    }


    func testTwoReplicasSyncRoundsOverSSH() throws {
        try write(a, "INSERT INTO doc VALUES ('a1', 'from A', 10, x'a1')")
        try write(b, "INSERT INTO doc VALUES ('b1', 'from B', 20, NULL)")
        let first = try h.syncJSON(a, as: "A", target, ssh())
        XCTAssertEqual(first["target"] as? String, target, "\(first)")
        XCTAssertNotNil(first["bundle_out"] as? String, "A's first sync leaves a bundle: \(first)")
        let fromB = try h.syncJSON(b, as: "B", target, ssh())
        XCTAssertEqual(fromB["bundles_in"] as? Int, 1, "\(fromB)")
        XCTAssertEqual(fromB["changes_in"] as? Int, 1, "\(fromB)")
        try h.syncOK(a, as: "A", target, ssh(["-q"]))
        XCTAssertEqual(try content(a), try content(reference))
        XCTAssertEqual(try content(b), try content(reference))

        // Round 2: updates and a delete on both sides.
        try write(a, "UPDATE doc SET title = 'B''s doc, retitled by A' WHERE id = 'b1'", "DELETE FROM doc WHERE id = 'd0'")
        try write(b, "UPDATE doc SET size = 11 WHERE id = 'a1'", "INSERT INTO doc VALUES ('b2', 'ünïcødé', -1, x'')")
        let summary = try h.syncOK(b, as: "B", target, ssh())
        XCTAssertEqual(summary.stdout, "")
        XCTAssertEqual(summary.stderrLines.count, 1, "one summary line: \(summary.stderr)")
        XCTAssertTrue(summary.stderr.contains("127.0.0.1"), "the summary names the host: \(summary.stderr)")
        try h.syncOK(a, as: "A", target, ssh(["-q"]))
        try h.syncOK(b, as: "B", target, ssh(["-q"]))

        // Round 3: only A writes.
        try write(a, "INSERT INTO doc VALUES ('a2', 'late', 3, x'a2')")
        try h.syncOK(a, as: "A", target, ssh(["-q"]))
        let last = try h.syncJSON(b, as: "B", target, ssh())
        XCTAssertEqual(last["changes_in"] as? Int, 1, "\(last)")

        let expected = try content(reference)
        XCTAssertEqual(try content(a), expected, "A")
        XCTAssertEqual(try content(b), expected, "B")

        // The remote folder has the mailbox layout and nothing else.
        let (idA, idB) = (try h.knowledgeID(a), try h.knowledgeID(b))
        let folders = Set(foldersBelow(remote))
        for folder in [
            "sqsync", "sqsync/outbox", "sqsync/acks", "sqsync/outbox/\(idA)", "sqsync/outbox/\(idB)", "sqsync/acks/\(idA)",
            "sqsync/acks/\(idB)",
        ] {
            XCTAssertTrue(folders.contains(folder), "remote lacks \(folder): \(folders.sorted())")
        }
        XCTAssertEqual(folders.subtracting(["sqsync/keys"]).count, 7, "unexpected remote folders: \(folders.sorted())")
        for file in filesBelow(remote) {
            let name = (file as NSString).lastPathComponent
            if file.hasPrefix("sqsync/outbox/") {
                XCTAssertTrue(name.hasSuffix(".sqsb"), "not a bundle in an outbox: \(file)")
            } else if !isReadersKeyFile(file) {
                XCTAssertTrue(file.hasPrefix("sqsync/acks/") && name.hasSuffix(".ack"), "unexpected remote file: \(file)")
            }
            XCTAssertFalse(name.hasPrefix(".tmp-"), "temporary upload left behind: \(file)")
            XCTAssertFalse(name.contains(":"), file)
        }
        for (id, names) in outboxes(remote) {
            XCTAssertLessThanOrEqual(names.count, 1, "outbox \(id): \(names)")
        }
        for id in [idA, idB] {
            let acks = (try? FileManager.default.contentsOfDirectory(atPath: "\(remote)/sqsync/acks/\(id)")) ?? []
            XCTAssertEqual(acks.count, 1, "one acknowledgement per replica is enough: \(acks)")
        }
    }

    func testUnknownHostKeyIsRefusedUnlessAcceptedThenRecorded() throws {
        let knownHosts = try knownHostsFile("empty_known_hosts", "")
        let before = try h.fullDump(a)
        let refused = try h.sync(a, as: "A", target, ssh(knownHosts: knownHosts))
        try assertRefused(refused, host: "127.0.0.1", before: before, mentioning: ["--accept-new-host-key"])
        XCTAssertEqual(try String(contentsOfFile: knownHosts, encoding: .utf8), "", "a refused key must not be recorded")
        XCTAssertEqual(filesBelow(remote), [], "nothing may reach an unverified host")

        try h.syncOK(a, as: "A", target, ssh(knownHosts: knownHosts, ["--accept-new-host-key"]))
        let lines = try String(contentsOfFile: knownHosts, encoding: .utf8).split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, 1, "one known_hosts line recorded: \(lines)")
        let keyBlob = server.hostPublicKey.split(separator: " ").last.map(String.init) ?? "?"
        XCTAssertTrue(lines.first?.contains(keyBlob) == true, "the recorded line carries the server's key: \(lines)")
        XCTAssertTrue(
            lines.first?.hasPrefix("[127.0.0.1]:\(server.port) ") == true,
            "the recorded line names [127.0.0.1]:\(server.port): \(lines)")

        // From now on the key is known: no flag needed, and nothing more is recorded.
        try h.syncOK(a, as: "A", target, ssh(knownHosts: knownHosts))
        XCTAssertEqual(try String(contentsOfFile: knownHosts, encoding: .utf8).split(separator: "\n").count, 1)
        // OpenSSH's own tools read the line sqsync wrote.
        let found = try Harness.run("/usr/bin/ssh-keygen", ["-F", "[127.0.0.1]:\(server.port)", "-f", knownHosts])
        XCTAssertEqual(found.status, 0, "ssh-keygen -F does not find the recorded host: \(found.stdout) \(found.stderr)")
    }

    func testChangedHostKeyIsRefusedEvenWithAcceptNewHostKey() throws {
        let other = try SSHServerFixture.makeKeyPair(in: URL(fileURLWithPath: h.directory.path), named: "impostor_host")
        let text = "[127.0.0.1]:\(server.port) \(other.publicKey)\n"
        let knownHosts = try knownHostsFile("changed_known_hosts", text)
        let before = try h.fullDump(a)
        for extra in [[], ["--accept-new-host-key"]] {
            let result = try h.sync(a, as: "A", target, ssh(knownHosts: knownHosts, extra))
            try assertRefused(result, host: "127.0.0.1", before: before)
            XCTAssertEqual(try String(contentsOfFile: knownHosts, encoding: .utf8), text, "known_hosts must be left alone")
        }
        XCTAssertEqual(filesBelow(remote), [], "nothing may reach a host whose key changed")
    }

    func testSilentHostFailsWithinTheTimeout() throws {
        let (fd, port) = try SSHServerFixture.listeningSocket()
        defer { close(fd) }
        let silent = "ssh://\(server.userName)@127.0.0.1:\(port)/srv/mailbox"
        let before = try h.fullDump(a)
        let start = Date()
        let result = try h.sync(a, as: "A", silent, ssh(["--timeout", "2"]))
        let elapsed = Date().timeIntervalSince(start)
        XCTAssertLessThan(elapsed, 5, "--timeout 2 against a silent host took \(elapsed) s")
        XCTAssertGreaterThanOrEqual(elapsed, 1.5, "gave up before the timeout (\(elapsed) s): \(result.stderr)")
        try assertRefused(result, host: "127.0.0.1:\(port)", before: before)
    }

    /// The server accepts the login, then stops answering (its session processes are frozen with
    /// SIGSTOP) before A has uploaded its large bundle: the run must fail within the timeout with
    /// one line naming the host, leave nothing a reader would take for a bundle, and the next run
    /// must finish the job.
    func testHostThatHangsMidSyncFailsWithinTimeoutAndNextRunRecovers() throws {
        try h.syncOK(a, as: "A", target, ssh(["-q"]))
        try h.syncOK(b, as: "B", target, ssh(["-q"]))
        try h.sqlite(
            a,
            """
            WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 20000)
            INSERT INTO doc SELECT printf('big%05d', i), hex(randomblob(8)), i, randomblob(16) FROM c;
            """)
        let contentBefore = try content(a)

        // sqsync makes its scratch folder beside the database once it is logged in.
        let dbURL = URL(fileURLWithPath: a)
        let scratch = dbURL.deletingLastPathComponent().path + "/." + dbURL.lastPathComponent + "-sqsync-tmp"
        let args = ["sync", a, target, "--trust", h.trustFile, "--key", h.keyPath("A"), "--timeout", "2"] + ssh()
        let child = try SpawnedChild(Harness.binary, args, stdout: h.path("hang.out"), stderr: h.path("hang.err"))
        let start = Date()
        var paused = false
        while Date().timeIntervalSince(start) < 10, child.poll() == nil {
            if !foldersBelow(scratch).isEmpty || !filesBelow(scratch).isEmpty {
                server.pauseSessions()
                paused = true
                break
            }
            usleep(500)
        }
        XCTAssertTrue(paused, "the sync finished or never logged in before the server could be frozen")
        var status: Int32? = nil
        while status == nil, Date().timeIntervalSince(start) < 15 {
            status = child.poll()
            if status == nil { usleep(20_000) }
        }
        let elapsed = Date().timeIntervalSince(start)
        if status == nil {
            kill(child.pid, SIGKILL)
            child.wait()
        }
        server.resumeSessions()
        let stderr = (try? String(contentsOfFile: h.path("hang.err"), encoding: .utf8)) ?? ""
        print(
            "SyncSSHTests: frozen server: exit \(status.map(String.init) ?? "none") after \(String(format: "%.1f", elapsed)) s: \(stderr.trimmingCharacters(in: .whitespacesAndNewlines))"
        )
        XCTAssertEqual(status, 1, "a sync against a frozen server must fail (exit 1), not hang: \(stderr)")
        XCTAssertLessThan(elapsed, 8, "--timeout 2 against a server that stopped answering took \(elapsed) s")
        let lines = stderr.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
        XCTAssertEqual(lines.count, 1, "one line: \(stderr)")
        XCTAssertTrue(stderr.contains("127.0.0.1"), "the message names the host: \(stderr)")
        XCTAssertEqual(try content(a), contentBefore, "the failed run changed A's data")
        XCTAssertEqual(try h.sqlite(a, "PRAGMA integrity_check;"), "ok\n")

        // Nothing half-written is taken for a bundle, and the next runs finish the job.
        for path in filesBelow(remote) where path.hasSuffix(".sqsb") {
            let inspected = try h.sqsync(["inspect", remote + "/" + path])
            XCTAssertEqual(
                inspected.status, 0, "\(path) on the server is named like a bundle but is not one: \(inspected.stderr)")
        }
        try h.syncOK(a, as: "A", target, ssh(["-q"]))
        let intoB = try h.syncJSON(b, as: "B", target, ssh())
        XCTAssertEqual(intoB["changes_in"] as? Int, 20000, "\(intoB)")
        XCTAssertEqual(try content(b), try content(a))
    }

    func testClosedPortFailsNamingTheHost() throws {
        let port = try SSHServerFixture.freePort()
        let dead = "ssh://\(server.userName)@127.0.0.1:\(port)/srv/mailbox"
        let before = try h.fullDump(a)
        let start = Date()
        let result = try h.sync(a, as: "A", dead, ssh())
        XCTAssertLessThan(Date().timeIntervalSince(start), 5)
        try assertRefused(result, host: "127.0.0.1:\(port)", before: before)
    }

    /// A mistyped folder on the server is refused, as a mistyped local folder is: exit 1, one
    /// line naming the address and the host, nothing created there.
    func testAMistypedRemoteFolderIsRefusedNotCreated() throws {
        let mistyped = remote + "/mailbxo"
        let before = try h.fullDump(a)
        let result = try h.sync(a, as: "A", server.url(path: mistyped), ssh())
        try assertRefused(result, host: "127.0.0.1", before: before, mentioning: ["no such folder", "-p \(server.port) \(server.userName)@127.0.0.1 mkdir -p '\(mistyped)'"])
        XCTAssertFalse(FileManager.default.fileExists(atPath: mistyped))
    }
}
