import Foundation
import TestSupport
import XCTest

/// `sqsync sync DB rclone:REMOTE:PATH` against a throwaway S3 server (`moto_server`, see
/// ``S3ServerFixture``), reached through the real `rclone` program configured by environment
/// variables only: replicas converging through a bucket, a sync killed half-way through an
/// upload, a planted object, a dead endpoint and malformed addresses.
final class SyncRcloneTests: XCTestCase {
    /// One server for the suite, started by its first test (Python takes a second or two to
    /// start it) and stopped after its last; each test has a bucket of its own.
    nonisolated(unsafe) private static var sharedServer: S3ServerFixture?
    private var server: S3ServerFixture!
    private var bucket = ""
    private var h: Harness!
    private var a = "", b = "", c = "", reference = ""
    private var target: String { "rclone:\(server.remoteName):\(bucket)/site" }

    private static let schema = "CREATE TABLE doc(id TEXT PRIMARY KEY, title TEXT, size INTEGER);"

    override func setUpWithError() throws {
        if Self.sharedServer == nil { Self.sharedServer = try S3ServerFixture() }
        server = Self.sharedServer
        bucket = "mailbox-" + UUID().uuidString.prefix(8).lowercased()
        h = try Harness()
        XCTAssertEqual(try rclone(["mkdir", "\(server.remoteName):\(bucket)"]).status, 0, "the bucket")
        a = try h.makeReplica("A", schema: Self.schema)
        b = try h.cloneReplica(a, as: "B")
        c = try h.cloneReplica(a, as: "C")
        reference = try h.makeReference("reference", schema: Self.schema)
    }

    override func tearDown() {
        h = nil
        server = nil
    }

    override class func tearDown() {
        sharedServer = nil
        super.tearDown()
    }

    private func sync(_ db: String, as name: String, _ extra: [String] = [], rclone: String? = nil) throws -> ProcessResult {
        var environment = server.rcloneEnvironment
        if let rclone { environment["SQSYNC_RCLONE"] = rclone }
        return try h.sqsync(["sync", db, target] + extra, key: name, environment: environment)
    }

    @discardableResult
    private func syncOK(_ db: String, as name: String, file: StaticString = #filePath, line: UInt = #line) throws
        -> ProcessResult
    {
        let result = try sync(db, as: name)
        XCTAssertEqual(result.status, 0, "sync \(name): \(result.stderr)", file: file, line: line)
        return result
    }

    /// `rclone <arguments>` with the server's remote configured.
    @discardableResult
    private func rclone(_ arguments: [String]) throws -> ProcessResult {
        try Harness.run("/usr/bin/rclone", ["--quiet"] + arguments, environment: server.rcloneEnvironment)
    }

    /// Every object below the mailbox, as paths relative to it, with sizes.
    private func objects() throws -> [String: Int] {
        let listed = try rclone(["lsjson", "-R", "--files-only", "\(server.remoteName):\(bucket)/site"])
        guard listed.status == 0 else { return [:] }
        let entries = try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]] ?? []
        var result: [String: Int] = [:]
        for entry in entries { result[entry["Path"] as? String ?? ""] = entry["Size"] as? Int ?? 0 }
        return result
    }

    private func content(_ db: String) throws -> String { try h.dump(db, table: "doc", orderBy: "id") }

    // MARK: - Tests

    /// Three replicas write with the sqlite3 shell and converge through the bucket; bundles
    /// every reader holds leave it, and no unfinished upload is ever visible.
    func testThreeReplicasConvergeThroughAnS3Bucket() throws {
        try h.write(a, reference: reference, ["INSERT INTO doc VALUES ('a1', 'from A', 1)"])
        try h.write(b, reference: reference, ["INSERT INTO doc VALUES ('b1', 'from B', 2)"])
        try h.write(c, reference: reference, ["INSERT INTO doc VALUES ('c1', 'from C', 3)"])
        for _ in 0..<2 {
            for (db, name) in [(a, "A"), (b, "B"), (c, "C")] { try syncOK(db, as: name) }
        }
        let expected = try content(reference)
        for db in [a, b, c] { XCTAssertEqual(try content(db), expected) }

        try h.write(b, reference: reference, ["UPDATE doc SET title = 'edited at B' WHERE id = 'a1'", "DELETE FROM doc WHERE id = 'c1'"])
        let json = try sync(b, as: "B", ["--json"])
        XCTAssertEqual(json.status, 0, json.stderr)
        XCTAssertEqual(h.json(json)["target"] as? String, target)
        for _ in 0..<2 {
            for (db, name) in [(a, "A"), (c, "C"), (b, "B")] { try syncOK(db, as: name) }
        }
        for db in [a, b, c] { XCTAssertEqual(try content(db), try content(reference)) }

        let stored = try objects()
        XCTAssertFalse(stored.keys.contains { $0.contains(".tmp-") }, "\(stored.keys)")
        XCTAssertEqual(stored.keys.filter { $0.hasPrefix("sqsync/acks/") }.count, 3, "one acknowledgement per replica: \(stored.keys)")
        XCTAssertLessThanOrEqual(
            stored.keys.filter { $0.hasSuffix(".sqsb") }.count, 3, "bundles every reader holds are removed: \(stored.keys)")
    }

    /// Four replicas sync to one bucket at the same moment, round after round, while a fifth's
    /// syncs are killed part-way (SIGKILL after a random moment): every sync not killed exits
    /// 0, whatever the others removed or wrote meanwhile, and all end with the same rows.
    func testConcurrentSyncsOnOneBucketAllSucceedAndConverge() throws {
        let d = try h.cloneReplica(a, as: "D"), killed = try h.cloneReplica(a, as: "K")
        let sites = [(a, "A"), (b, "B"), (c, "C"), (d, "D")]
        for (db, name) in sites + [(killed, "K")] {
            try h.write(db, reference: reference, ["INSERT INTO doc VALUES ('\(name)1', 'from \(name)', 1)"])
        }
        let environment = ProcessInfo.processInfo.environment.merging(server.rcloneEnvironment) { _, new in new }
        let outcomes = Outcomes()
        var random = SplitMix64(seed: 56)
        for round in 0..<3 {
            try h.write(sites[round].0, reference: reference, ["INSERT INTO doc VALUES ('r\(round)', 'round \(round)', \(round))"])
            let killAfter = 0.1 + Double(random.next() % 900) / 1000
            let runs: [(name: String, words: [String])] =
                sites.map { (db, name) in (name, [Harness.binary, "sync", db, target, "--trust", h.trustFile, "--key", h.keyPath(name)]) }
                + [("K", ["/usr/bin/timeout", "-s", "KILL", "\(killAfter)", Harness.binary, "sync", killed, target, "--trust", h.trustFile, "--key", h.keyPath("K")])]
            DispatchQueue.concurrentPerform(iterations: runs.count) { index in
                let run = runs[index]
                let ran = try? spawnAndWait(run.words[0], Array(run.words.dropFirst()), environment: environment)
                outcomes.add(round: round, name: run.name, status: ran?.status ?? -1, stderr: ran.map { String(decoding: $0.stderr, as: UTF8.self) } ?? "")
            }
        }
        for outcome in outcomes.all where outcome.name != "K" {
            XCTAssertEqual(outcome.status, 0, "round \(outcome.round), \(outcome.name): \(outcome.stderr)")
        }
        for outcome in outcomes.all where outcome.name == "K" {
            // Killed by timeout(1): 124 or 137 from timeout, or SIGKILL (9) for the group.
            XCTAssertTrue([0, 9, 124, 137].contains(outcome.status), "killed or done, nothing else: \(outcome.status) \(outcome.stderr)")
        }
        // The killed replica's rows are in the reference: it syncs to its end once more, then
        // everyone takes turns until all agree (three turns at most).
        let expected = try content(reference)
        for _ in 0..<3 {
            for (db, name) in sites + [(killed, "K")] { try syncOK(db, as: name) }
            if try (sites + [(killed, "K")]).allSatisfy({ try content($0.0) == expected }) { break }
        }
        for (db, name) in sites + [(killed, "K")] { XCTAssertEqual(try content(db), expected, name) }
    }

    /// A sync killed after uploading its bundle under a temporary name, before giving it its
    /// final one, leaves nothing a reader takes; the next sync removes the leftover and the
    /// change arrives.
    func testASyncKilledMidUploadLeavesNothingHalfWritten() throws {
        try syncOK(a, as: "A")
        try syncOK(b, as: "B")
        try h.write(a, reference: reference, ["INSERT INTO doc VALUES ('late', 'after the kill', 9)"])
        let killer = h.path("rclone-killing-its-caller")
        try """
            #!/bin/sh
            # Kills sqsync instead of publishing a bundle: the upload stops after its temporary copy.
            for last; do :; done
            case "$1:$last" in moveto:*.sqsb) kill -9 $PPID; exit 1 ;; esac
            exec /usr/bin/rclone "$@"
            """.write(toFile: killer, atomically: true, encoding: .utf8)
        chmod(killer, 0o755)
        let killed = try sync(a, as: "A", rclone: killer)
        XCTAssertNotEqual(killed.status, 0, "the sync was to be killed: \(killed.stderr)")

        let aID = try h.knowledgeID(a)
        let left = try objects().keys.filter { $0.hasPrefix("sqsync/outbox/\(aID)/") }
        XCTAssertTrue(left.contains { $0.contains("/.tmp-\(aID)-") }, "the temporary upload is there: \(left)")
        let before = try syncOK(b, as: "B")
        XCTAssertFalse(try content(b).contains("late"), "nothing of the killed upload is read: \(before.stderr)")

        let again = try syncOK(a, as: "A")
        XCTAssertTrue(again.stderr.contains("1 unfinished upload of an earlier run removed"), again.stderr)
        try syncOK(b, as: "B")
        XCTAssertEqual(try content(b), try content(reference))
        XCTAssertFalse(try objects().keys.contains { $0.contains(".tmp-") })
    }

    /// Another cron job's sync removes a bundle between this sync's listing and its read (the
    /// wrapper deletes each bundle as `rclone cat` reads it, and fails as rclone does then):
    /// it counts as gone, as in a folder; the sync exits 0, and the next one takes the newer
    /// bundle (issue 56, item 5).
    func testABundleRemovedBetweenTheListingAndTheReadIsGoneNotAFailure() throws {
        try syncOK(a, as: "A")
        try syncOK(b, as: "B")
        try h.write(a, reference: reference, ["INSERT INTO doc VALUES ('raced', 'removed under the reader', 1)"])
        try syncOK(a, as: "A")
        let racer = h.path("rclone-racing-remover")
        try """
            #!/bin/sh
            # Another sync removes the bundle while this one reads it: after rclone's look at the
            # object, before its download, which S3 then answers with a 404 (rclone exits 1).
            for last; do :; done
            case "$1:$last" in
                cat:*.sqsb) /usr/bin/rclone --quiet deletefile "$last"
                            echo "ERROR : Failed to cat: operation error S3: GetObject, https response error StatusCode: 404" >&2
                            exit 1 ;;
            esac
            exec /usr/bin/rclone "$@"
            """.write(toFile: racer, atomically: true, encoding: .utf8)
        chmod(racer, 0o755)
        let raced = try sync(b, as: "B", rclone: racer)
        XCTAssertEqual(raced.status, 0, "a bundle gone since the listing is not a failure: \(raced.stderr)")
        XCTAssertFalse(raced.stderr.contains("failed"), raced.stderr)
        XCTAssertFalse(try content(b).contains("raced"), "the removed bundle was not read")
        try h.write(a, reference: reference, ["INSERT INTO doc VALUES ('after', 'a newer bundle', 2)"])
        try syncOK(a, as: "A")
        try syncOK(b, as: "B")
        XCTAssertEqual(try content(b), try content(reference), "the newer bundle carries what the removed one did")
    }

    /// A damaged object planted in the bucket under a bundle's name is refused once (exit 3,
    /// naming it by its rclone address), then left unread and counted.
    func testAPlantedObjectIsRefusedOnceThenLeftUnread() throws {
        try syncOK(a, as: "A")
        let planted = h.path("planted.sqsb")
        try Data(repeating: 0x5a, count: 300).write(to: URL(fileURLWithPath: planted))
        let name = "0badf00d-0000-4000-8000-000000000000_1-1_0badf00d.sqsb"
        let path = "sqsync/outbox/0badf00d-0000-4000-8000-000000000000/\(name)"
        XCTAssertEqual(try rclone(["copyto", planted, "\(server.remoteName):\(bucket)/site/\(path)"]).status, 0)

        let first = try sync(b, as: "B")
        XCTAssertEqual(first.status, 3, first.stderr)
        XCTAssertTrue(first.stderr.contains("\(target)/\(path)"), first.stderr)
        let second = try sync(b, as: "B", ["--json"])
        XCTAssertEqual(second.status, 0, second.stderr)
        XCTAssertEqual(h.json(second)["refused_before"] as? [String], [path], second.stdout)
        XCTAssertEqual(try content(b), try content(a))
    }

    /// Twenty damaged objects planted under bundle names, each in an outbox of its own, cost a
    /// first sync one rclone download for them all, not one process each; each is refused
    /// once, then left unread.
    func testManyPlantedObjectsCostOneDownload() throws {
        try syncOK(a, as: "A")
        let junk = h.path("junk.sqsb")
        try Data(repeating: 0x5a, count: 300).write(to: URL(fileURLWithPath: junk))
        let staging = h.path("staging")
        for index in 0..<20 {
            let sender = String(format: "0badf00d-0000-4000-8000-%012d", index)
            let folder = "\(staging)/sqsync/outbox/\(sender)"
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: junk, toPath: "\(folder)/\(sender)_1-1_0badf00d.sqsb")
        }
        XCTAssertEqual(try rclone(["copy", staging, "\(server.remoteName):\(bucket)/site"]).status, 0)
        let calls = h.path("rclone-calls")
        let counting = h.path("rclone-counting")
        try """
            #!/bin/sh
            echo "$1" >> '\(calls)'
            exec /usr/bin/rclone "$@"
            """.write(toFile: counting, atomically: true, encoding: .utf8)
        chmod(counting, 0o755)
        let first = try sync(b, as: "B", rclone: counting)
        XCTAssertEqual(first.status, 3, first.stderr)
        XCTAssertEqual(first.stderrLines.filter { $0.contains("0badf00d-0000-4000-8000") }.count, 20, first.stderr)
        let commands = try String(contentsOfFile: calls, encoding: .utf8).split(separator: "\n")
        XCTAssertLessThanOrEqual(commands.filter { $0 == "cat" }.count, 2, "\(commands)")
        XCTAssertEqual(commands.filter { $0 == "copy" }.count, 1, "\(commands)")
        let second = try sync(b, as: "B", ["--json"])
        XCTAssertEqual(second.status, 0, second.stderr)
        XCTAssertEqual((h.json(second)["refused_before"] as? [String])?.count, 20, second.stdout)
        XCTAssertEqual(try content(b), try content(a))
    }

    /// Objects planted to hide or block the mailbox change nothing: an object named like the
    /// mailbox's folder, objects named like a replica's outbox and acknowledgement folders, and
    /// a bundle name longer than any local file name.
    func testObjectsPlantedToHideOrBlockTheMailboxChangeNothing() throws {
        try h.write(a, reference: reference, ["INSERT INTO doc VALUES ('a1', 'before', 1)"])
        try syncOK(a, as: "A")
        let aID = try h.knowledgeID(a), bID = try h.knowledgeID(b)
        let junk = h.path("junk")
        try Data("junk".utf8).write(to: URL(fileURLWithPath: junk))
        let long = String(repeating: "l", count: 300) + ".sqsb"
        for object in ["sqsync", "sqsync/outbox/\(aID)", "sqsync/acks/\(aID)", "sqsync/outbox/\(bID)", "sqsync/outbox/\(aID)/\(long)"] {
            XCTAssertEqual(try rclone(["copyto", junk, "\(server.remoteName):\(bucket)/site/\(object)"]).status, 0, object)
        }
        try syncOK(b, as: "B")
        XCTAssertEqual(try content(b), try content(a), "the mailbox was read whole")
        try h.write(a, reference: reference, ["INSERT INTO doc VALUES ('a2', 'after', 2)"])
        try syncOK(a, as: "A")
        try syncOK(b, as: "B")
        XCTAssertEqual(try content(b), try content(reference))
    }

    /// An object named `BUNDLE/x` makes the bundle's name a prefix as well: readers still read
    /// the bundle (exit 0), and its writer goes on publishing, under another name when its
    /// next bundle's name is the one taken (issue 55, item 3).
    func testAPrefixPlantedOverABundleHidesNothing() throws {
        try h.write(a, reference: reference, ["INSERT INTO doc VALUES ('a1', 'before', 1)"])
        try syncOK(a, as: "A")
        let aID = try h.knowledgeID(a)
        let bundles = try objects().keys.filter { $0.hasPrefix("sqsync/outbox/\(aID)/") && $0.hasSuffix(".sqsb") }
        XCTAssertEqual(bundles.count, 1, "\(bundles)")
        let junk = h.path("junk")
        try Data("junk".utf8).write(to: URL(fileURLWithPath: junk))
        XCTAssertEqual(try rclone(["copyto", junk, "\(server.remoteName):\(bucket)/site/\(bundles[0])/x"]).status, 0)

        try syncOK(b, as: "B")
        XCTAssertEqual(try content(b), try content(a), "B read the bundle under the prefix")
        try syncOK(a, as: "A")
        try h.write(a, reference: reference, ["INSERT INTO doc VALUES ('a2', 'after', 2)"])
        try syncOK(a, as: "A")
        // C is new: its acknowledgement tells A what it lacks.
        for (db, name) in [(c, "C"), (a, "A"), (c, "C"), (b, "B")] { try syncOK(db, as: name) }
        XCTAssertEqual(try content(c), try content(reference))
        XCTAssertEqual(try content(b), try content(reference))
    }

    /// An endpoint nobody listens on: exit 1, one line naming the mailbox, the database untouched.
    func testADeadEndpointFailsWithOneLineAndChangesNothing() throws {
        try h.write(a, reference: reference, ["INSERT INTO doc VALUES ('a1', 'kept', 1)"])
        let before = try h.fullDump(a)
        var environment = server.rcloneEnvironment
        environment["RCLONE_CONFIG_\(server.remoteName.uppercased())_ENDPOINT"] = "http://127.0.0.1:\(try SSHServerFixture.freePort())"
        let result = try h.sqsync(["sync", a, target, "--timeout", "5"], key: "A", environment: environment)
        XCTAssertEqual(result.status, 1, result.stderr)
        XCTAssertEqual(result.stderrLines.count, 1, result.stderr)
        XCTAssertTrue(result.stderr.contains(target), result.stderr)
        XCTAssertEqual(try h.fullDump(a), before)
    }

    /// A mistyped bucket is refused, not created, with the command that makes it; a CA bundle
    /// set for other tools is named when rclone cannot use it.
    func testAMissingBucketIsRefusedAndACABundleIsNamed() throws {
        try h.write(a, reference: reference, ["INSERT INTO doc VALUES ('a1', 'kept', 1)"])
        let before = try h.fullDump(a)
        let typo = "rclone:\(server.remoteName):mailbx/site"
        let missing = try h.sqsync(["sync", a, typo], key: "A", environment: server.rcloneEnvironment)
        XCTAssertEqual(missing.status, 1, missing.stderr)
        XCTAssertEqual(missing.stderrLines.count, 1, missing.stderr)
        XCTAssertTrue(missing.stderr.contains("no such bucket or folder") && missing.stderr.contains("rclone mkdir '\(server.remoteName):mailbx/site'"), missing.stderr)
        let buckets = try rclone(["lsf", "--dirs-only", "\(server.remoteName):"]).stdout
        XCTAssertFalse(buckets.contains("mailbx"), "nothing created: \(buckets)")
        XCTAssertEqual(try h.fullDump(a), before)

        var environment = server.rcloneEnvironment
        let bundle = h.path("ca.pem")
        try "not a certificate\n".write(toFile: bundle, atomically: true, encoding: .utf8)
        environment["AWS_CA_BUNDLE"] = bundle
        let tls = try h.sqsync(["sync", a, target, "--timeout", "10"], key: "A", environment: environment)
        XCTAssertEqual(tls.status, 1, tls.stderr)
        XCTAssertEqual(tls.stderrLines.count, 1, tls.stderr)
        XCTAssertTrue(tls.stderr.contains("AWS_CA_BUNDLE is set to \(bundle)"), tls.stderr)
        XCTAssertEqual(try h.fullDump(a), before)
        XCTAssertEqual(try syncOK(a, as: "A").status, 0, "the bucket that exists works")
    }

    /// A bucket emptied behind the replica's back (or a prefix mistyped in a cron line after
    /// the first run) holds no mailbox now: refused as an unmounted stick is, nothing written;
    /// `--new-mailbox` starts one there on purpose.
    func testAnEmptiedMailboxIsRefusedNotRefilled() throws {
        try syncOK(a, as: "A")
        XCTAssertEqual(try rclone(["purge", "\(server.remoteName):\(bucket)/site"]).status, 0)
        try h.write(a, reference: reference, ["INSERT INTO doc VALUES ('a2', 'after', 2)"])
        let refused = try sync(a, as: "A")
        XCTAssertEqual(refused.status, 1, refused.stderr)
        XCTAssertTrue(refused.stderr.contains("synced with one here before") && refused.stderr.contains("--new-mailbox"), refused.stderr)
        XCTAssertEqual(try objects(), [:], "nothing written")
        XCTAssertEqual(try sync(a, as: "A", ["--new-mailbox"]).status, 0)
        try syncOK(b, as: "B")
        XCTAssertEqual(try content(b), try content(a))
    }

    func testMalformedAddressesAreUsageErrors() throws {
        for bad in ["rclone:no-remote-named", "rclone:--config=/etc/passwd:x"] {
            let result = try h.sqsync(["sync", a, bad], key: "A", environment: server.rcloneEnvironment)
            XCTAssertEqual(result.status, 2, "\(bad): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains("not a valid rclone: address"), result.stderr)
        }
    }
}

/// What each concurrent sync of a round ended with, gathered from several threads.
private final class Outcomes: @unchecked Sendable {
    struct Outcome {
        var round: Int
        var name: String
        var status: Int32
        var stderr: String
    }
    private let lock = NSLock()
    private var outcomes: [Outcome] = []

    func add(round: Int, name: String, status: Int32, stderr: String) {
        lock.lock()
        defer { lock.unlock() }
        outcomes.append(Outcome(round: round, name: name, status: status, stderr: stderr))
    }

    var all: [Outcome] {
        lock.lock()
        defer { lock.unlock() }
        return outcomes
    }
}
