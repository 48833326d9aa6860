import Foundation
import TestSupport
import SQLiteDatabase
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

/// `sqsync sync` under stress: the per-database sync lock (exit code 4), and runs killed with
/// SIGKILL at random moments, after which the database, the metadata and the mailbox must be sound.
final class SyncRobustnessTests: XCTestCase {
    private var h: Harness!
    private var a = "", b = "", box = ""

    private static let schema = "CREATE TABLE t(id TEXT PRIMARY KEY, v TEXT, n INTEGER);"

    override func setUpWithError() throws {
        h = try Harness()
        a = try h.makeReplica("A", schema: Self.schema + "INSERT INTO t VALUES ('seed', 'seed', 0);")
        b = try h.cloneReplica(a, as: "B")
        box = h.path("shared")
        try FileManager.default.createDirectory(atPath: box, withIntermediateDirectories: true)
    }

    override func tearDown() { h = nil }

    private func content(_ db: String) throws -> String { try h.dump(db, table: "t", orderBy: "id") }

    /// Every file in the mailbox named like a bundle must be a whole, verifiable bundle.
    private func assertEveryBundleInspects(_ context: String, file: StaticString = #filePath, line: UInt = #line) throws {
        for path in filesBelow(box) where path.hasSuffix(".sqsb") {
            let result = try h.sqsync(["inspect", box + "/" + path])
            XCTAssertEqual(
                result.status, 0, "\(context): \(path) is named like a bundle but fails inspect: \(result.stderr)", file: file,
                line: line)
        }
    }

    // MARK: - A medium that refuses writes

    /// A mailbox that can be read but not written (a stick switched to read-only, a full one,
    /// a bucket whose credentials only read): the sync takes what is there, then fails with
    /// one line naming the mailbox, what it imported and kept, and that nothing was left. The
    /// medium here is rclone's local backend behind a program that refuses every write.
    func testAMailboxThatRefusesWritesSaysWhatWasImportedBeforeFailing() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/rclone") else {
            if ProcessInfo.processInfo.environment["CI"] != nil { return XCTFail("rclone is missing (apt-get install rclone)") }
            throw XCTSkip("rclone not installed")
        }
        let target = "rclone::local:\(box)"
        try h.sqlite(a, "INSERT INTO t VALUES ('a1', 'from A', 1);")
        try h.syncOK(a, as: "A", target)
        let readOnly = h.path("rclone-read-only")
        try """
            #!/bin/sh
            case "$1" in copyto|moveto|deletefile|mkdir)
                echo "2026/11/27 10:00:00 Failed to $1: open: read-only file system" >&2; exit 1 ;;
            esac
            exec /usr/bin/rclone "$@"
            """.write(toFile: readOnly, atomically: true, encoding: .utf8)
        chmod(readOnly, 0o755)
        let result = try h.sqsync(["sync", b, target], key: "B", environment: ["SQSYNC_RCLONE": readOnly])
        XCTAssertEqual(result.status, 1, result.stderr)
        XCTAssertEqual(result.stderrLines.count, 1, result.stderr)
        XCTAssertTrue(result.stderr.contains("\(target): cannot write to the mailbox"), result.stderr)
        XCTAssertTrue(result.stderr.contains("read-only file system"), result.stderr)
        XCTAssertTrue(result.stderr.contains("1 bundle (1 row changed) imported and kept; what this replica leaves for the others was not written"), result.stderr)
        XCTAssertEqual(try content(b), try content(a), "what was imported stays")
        try h.syncOK(b, as: "B", target)
    }

    // MARK: - Lock

    func testHeldLockExitsFourAtOnceAndReleasedLockSyncs() throws {
        try h.sqlite(a, "INSERT INTO t VALUES ('a1', 'from A', 1);")
        let lockPath = a + ".sqsync-lock"
        let fd = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        XCTAssertGreaterThanOrEqual(fd, 0, "cannot open \(lockPath)")
        XCTAssertEqual(flock(fd, LOCK_EX), 0, "cannot take \(lockPath)")
        var locked = true
        defer { if locked { flock(fd, LOCK_UN) }; close(fd) }

        let before = try h.fullDump(a)
        for extra in [[], ["--json"], ["-q"]] {
            let start = Date()
            let result = try h.sync(a, as: "A", box, extra)
            let elapsed = Date().timeIntervalSince(start)
            XCTAssertEqual(result.status, 4, "sync \(extra) while another process holds the lock: \(result.stderr)")
            XCTAssertLessThan(elapsed, 2, "a locked sync must give up at once, not wait (\(elapsed) s)")
            XCTAssertEqual(result.stderrLines.count, 1, "one line on stderr, even with \(extra): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains(a), "the message names the database: \(result.stderr)")
        }
        XCTAssertEqual(try h.fullDump(a), before, "a locked sync must not touch the database")
        XCTAssertEqual(filesBelow(box), [], "a locked sync must not touch the mailbox")

        flock(fd, LOCK_UN)
        locked = false
        let result = try h.syncOK(a, as: "A", box)
        XCTAssertEqual(result.stderrLines.count, 1, result.stderr)
        try h.syncOK(b, as: "B", box, ["-q"])
        XCTAssertEqual(try content(b), try content(a))
        XCTAssertEqual(try h.sqlite(b, "SELECT v FROM t WHERE id = 'a1';"), "from A\n")
    }

    func testLockOfOneDatabaseDoesNotBlockAnother() throws {
        let fd = open(b + ".sqsync-lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        XCTAssertEqual(flock(fd, LOCK_EX), 0)
        defer { flock(fd, LOCK_UN); close(fd) }
        try h.syncOK(a, as: "A", box, ["-q"])
        XCTAssertEqual(try h.sync(b, as: "B", box, ["-q"]).status, 4)
    }

    // MARK: - Two writers at once

    /// Cron jobs on three machines share one folder and fire at the same moment. Each run must
    /// succeed (a bundle replaced or cleared by its owner while another run lists the folder is
    /// simply gone, not an error), and every replica ends with every row.
    func testConcurrentSyncsOfThreeReplicasIntoOneFolder() throws {
        let c = try h.cloneReplica(a, as: "C")
        let sites = [(a, "A"), (b, "B"), (c, "C")]
        for (db, name) in sites { try h.syncOK(db, as: name, box, ["-q"]) }
        var failures: [String] = []
        let rounds = 8
        for round in 0..<rounds {
            for (db, name) in sites {
                try h.sqlite(
                    db,
                    """
                    WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 200)
                    INSERT INTO t SELECT printf('\(name)\(round)-%03d', i), 'x', i FROM c;
                    """)
            }
            let children = try sites.map { db, name in
                (
                    name,
                    try SpawnedChild(
                        Harness.binary, ["sync", db, box, "--trust", h.trustFile, "--key", h.keyPath(name), "-q"],
                        stdout: h.path("par-\(name).out"), stderr: h.path("par-\(name).err"))
                )
            }
            for (name, child) in children {
                let status = child.wait()
                if status != 0 {
                    let stderr = (try? String(contentsOfFile: h.path("par-\(name).err"), encoding: .utf8)) ?? ""
                    failures.append(
                        "round \(round) \(name): exit \(status): \(stderr.trimmingCharacters(in: .whitespacesAndNewlines))")
                }
            }
        }
        XCTAssertEqual(failures, [], "\(failures.count) of \(3 * rounds) concurrent syncs failed")
        for _ in 0..<2 {
            for (db, name) in sites { try h.syncOK(db, as: name, box, ["-q"]) }
        }
        let expected = "\(1 + 3 * rounds * 200)\n"
        for (db, name) in sites {
            XCTAssertEqual(try h.sqlite(db, "SELECT count(*) FROM t;"), expected, name)
        }
        XCTAssertEqual(try content(a), try content(b))
        XCTAssertEqual(try content(a), try content(c))
        try assertEveryBundleInspects("after concurrent syncs")
    }

    /// The same race made certain: reader R lists the folder, and before it reads Y's bundle, Y
    /// replaces that bundle with a newer one (R is paused with SIGSTOP to hold the moment, as a
    /// slow share or a busy machine would). R must go on without the vanished file.
    func testBundleReplacedWhileAnotherReplicaReadsTheFolder() throws {
        let c = try h.cloneReplica(a, as: "C")
        var sites = [(db: a, name: "A"), (db: b, name: "B"), (db: c, name: "C")]
        for site in sites { try h.syncOK(site.db, as: site.name, box, ["-q"]) }
        // Outboxes are read in name (knowledge ID) order: X's first, Y's last, R in between.
        let ids = try Dictionary(uniqueKeysWithValues: sites.map { ($0.name, try h.knowledgeID($0.db)) })
        sites.sort { ids[$0.name]! < ids[$1.name]! }
        let (x, r, y) = (sites[0], sites[1], sites[2])

        try h.sqlite(
            x.db,
            """
            WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 5000)
            INSERT INTO t SELECT printf('x%05d', i), 'from X', i FROM c;
            """)
        try h.syncOK(x.db, as: x.name, box, ["-q"])
        // Y leaves its bundle beside X's without having read X's, as two syncs at once do (a
        // sync that read X's would relay it and remove it): through a folder of its own, its
        // bundle then copied into the mailbox, as a stick mounted elsewhere carries it.
        try h.sqlite(y.db, "INSERT INTO t VALUES ('y1', 'from Y', 1);")
        let aside = h.path("aside")
        try FileManager.default.createDirectory(atPath: aside, withIntermediateDirectories: true)
        try h.syncOK(y.db, as: y.name, aside, ["-q"])
        let yBefore = try XCTUnwrap(outboxes(aside)[ids[y.name]!]?.first { $0.hasSuffix(".sqsb") }, "Y left no bundle")
        try FileManager.default.copyItem(
            atPath: aside + "/sqsync/outbox/\(ids[y.name]!)/\(yBefore)", toPath: box + "/sqsync/outbox/\(ids[y.name]!)/\(yBefore)")
        XCTAssertNotNil(outboxes(box)[ids[x.name]!]?.first { $0.hasSuffix(".sqsb") }, "X's bundle is gone; the race was not set up")
        try h.sqlite(y.db, "INSERT INTO t VALUES ('y2', 'from Y', 2);")

        // R starts; once it is copying X's bundle it has listed the folder: hold it there.
        // sync keeps its scratch copies in a folder beside the database.
        let dbURL = URL(fileURLWithPath: r.db)
        let scratch = dbURL.deletingLastPathComponent().path + "/." + dbURL.lastPathComponent + "-sqsync-tmp"
        let reader = try SpawnedChild(
            Harness.binary, ["sync", r.db, box, "--trust", h.trustFile, "--key", h.keyPath(r.name), "-q"],
            stdout: h.path("r.out"), stderr: h.path("r.err"))
        let deadline = Date().addingTimeInterval(10)
        var paused = false
        while Date() < deadline, reader.poll() == nil {
            if !filesBelow(scratch).isEmpty {
                kill(reader.pid, SIGSTOP)
                paused = true
                break
            }
            usleep(500)
        }
        XCTAssertTrue(paused, "R never started reading the folder (or finished first); the race was not set up")

        // Meanwhile Y syncs: its new bundle replaces the one R has listed.
        try h.syncOK(y.db, as: y.name, box, ["-q"])
        XCTAssertFalse(outboxes(box)[ids[y.name]!]?.contains(yBefore) ?? false, "Y kept \(yBefore); the race was not set up")

        kill(reader.pid, SIGCONT)
        let status = reader.wait()
        let stderr = (try? String(contentsOfFile: h.path("r.err"), encoding: .utf8)) ?? ""
        XCTAssertEqual(status, 0, "R's sync failed because a bundle it had listed was replaced: \(stderr)")

        for _ in 0..<2 {
            for site in [x, r, y] { try h.syncOK(site.db, as: site.name, box, ["-q"]) }
        }
        for site in [x, r, y] {
            XCTAssertEqual(try h.sqlite(site.db, "SELECT count(*) FROM t;"), "\(1 + 5000 + 2)\n", site.name)
        }
        XCTAssertEqual(try content(x.db), try content(r.db))
        XCTAssertEqual(try content(x.db), try content(y.db))
    }

    // MARK: - Kill

    func testSyncKilledAtRandomMomentsLeavesEverythingSound() throws {
        // Enough rows that a sync takes a good fraction of a second; both replicas start level.
        try h.sqlite(
            a,
            """
            WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 20000)
            INSERT INTO t SELECT printf('k%05d', i), hex(randomblob(12)), i FROM c;
            """)
        try h.syncOK(a, as: "A", box, ["-q"])
        try h.syncOK(b, as: "B", box, ["-q"])
        try h.syncOK(a, as: "A", box, ["-q"])
        XCTAssertEqual(try content(a), try content(b))
        var expectedRows = 1 + 20000
        var generator = SplitMix64(seed: 0x5157_0C0D_E2E5)
        var killed = 0, finished = 0
        var log: [String] = []
        for trial in 0..<8 {
            // Fresh work of a random size each time (a sync then takes ~50-300 ms), so the kills
            // land in different phases: numbering, import, export, upload, clean-up.
            let (db, name) = trial % 2 == 0 ? (b, "B") : (a, "A")
            let size = Int.random(in: 200...8000, using: &generator)
            if name == "A" {
                try h.sqlite(db, "UPDATE t SET n = n + 1 WHERE id LIKE 'k%' AND id <= printf('k%05d', \(size));")
            } else {
                try h.sqlite(
                    db,
                    """
                    UPDATE t SET v = 'B\(trial)' WHERE id LIKE 'k%' AND id <= printf('k%05d', \(size));
                    WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < \(size / 10))
                    INSERT INTO t SELECT printf('b\(trial)-%05d', i), 'from B', i FROM c;
                    """)
                expectedRows += size / 10
            }
            let delay = UInt32.random(in: 5_000...300_000, using: &generator)
            let child = try SpawnedChild(
                Harness.binary, ["sync", db, box, "--trust", h.trustFile, "--key", h.keyPath(name)],
                stdout: h.path("kill-\(trial).out"), stderr: h.path("kill-\(trial).err"))
            usleep(delay)
            let alreadyDone = child.poll()
            if alreadyDone == nil { kill(child.pid, SIGKILL) }
            let status = alreadyDone ?? child.wait()
            let stderr = (try? String(contentsOfFile: h.path("kill-\(trial).err"), encoding: .utf8)) ?? ""
            if status == 128 + SIGKILL {
                killed += 1
            } else {
                finished += 1
                XCTAssertEqual(status, 0, "trial \(trial): sync of \(name) finished before the kill but failed: \(stderr)")
            }
            log.append(
                "trial \(trial): \(name) (\(size) rows) after \(delay / 1000) ms → \(status == 128 + SIGKILL ? "killed" : "exit \(status)")"
            )

            for (checked, checkedName) in [(a, "A"), (b, "B")] {
                XCTAssertEqual(
                    try h.sqlite(checked, "PRAGMA integrity_check;"), "ok\n", "trial \(trial): \(checkedName) is damaged")
                let doctor = try h.sqsync(["doctor", checked], key: checkedName)
                XCTAssertEqual(doctor.status, 0, "trial \(trial): doctor \(checkedName): \(doctor.stdout) \(doctor.stderr)")
            }
            try assertEveryBundleInspects("trial \(trial) (\(log.last!))")
        }
        XCTAssertGreaterThan(killed, 0, "no run was killed mid-way; the test proves nothing: \(log)")

        // Normal syncs afterwards pick up where the killed ones stopped and converge.
        for (db, name) in [(a, "A"), (b, "B"), (a, "A"), (b, "B")] {
            try h.syncOK(db, as: name, box)
        }
        XCTAssertEqual(try content(a), try content(b), "A and B differ after the killed syncs: \(log)")
        XCTAssertEqual(try h.sqlite(a, "SELECT count(*) FROM t;"), "\(expectedRows)\n")
        try assertEveryBundleInspects("after the final syncs")
        for (checked, checkedName) in [(a, "A"), (b, "B")] {
            XCTAssertEqual(try h.sqlite(checked, "PRAGMA integrity_check;"), "ok\n")
            try h.ok(["doctor", checked], key: checkedName)
        }
        let leftovers = filesBelow(box).filter { ($0 as NSString).lastPathComponent.hasPrefix(".tmp-") }
        let scratchLeft = [a, b].filter { db in
            let url = URL(fileURLWithPath: db)
            return FileManager.default.fileExists(
                atPath: url.deletingLastPathComponent().path + "/." + url.lastPathComponent + "-sqsync-tmp")
        }
        XCTAssertTrue(scratchLeft.isEmpty, "a finished sync clears the scratch folders killed runs left: \(scratchLeft)")
        print(
            "SyncRobustnessTests: \(killed) killed, \(finished) finished; \(leftovers.count) temporary files left in the mailbox; \(log)"
        )
    }
}
