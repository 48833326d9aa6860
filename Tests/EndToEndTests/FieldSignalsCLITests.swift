import Foundation
import TestSupport
import XCTest

/// What a field worker or a cron job acts on (issue 56): no silent success.
final class FieldSignalsCLITests: XCTestCase {
    private var h: Harness!
    private var hq = "", site = ""

    override func setUpWithError() throws {
        h = try Harness()
        hq = try h.makeReplica("HQ", schema: "CREATE TABLE t(id TEXT PRIMARY KEY, v TEXT); INSERT INTO t VALUES ('1', 'one');")
        site = try h.cloneReplica(hq, as: "S1")
    }

    override func tearDown() { h = nil }

    private func entries(_ folder: String) -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
    }

    /// The stick is not mounted: its mount point is there, empty. A site that synced with it
    /// before is refused, naming the folder, that it held a mailbox, the mount and the flag;
    /// nothing is written. A first sync to another empty folder still works, and
    /// `--new-mailbox` starts one at the old place on purpose.
    func testAnUnmountedStickIsRefusedNotFilled() throws {
        let stick = try h.folder("media-usb")
        try h.syncOK(site, as: "S1", stick)
        XCTAssertEqual(entries(stick), ["sqsync"])
        try FileManager.default.moveItem(atPath: stick, toPath: h.path("stick-at-home"))
        try FileManager.default.createDirectory(atPath: stick, withIntermediateDirectories: false)
        try h.sqlite(site, "UPDATE t SET v = 'field edit' WHERE id = '1';")

        for run in 1...2 {
            let refused = try h.sync(site, as: "S1", stick)
            XCTAssertEqual(refused.status, 1, "run \(run): \(refused.stderr)")
            XCTAssertEqual(refused.stderrLines.count, 1, refused.stderr)
            for words in [stick, "synced with one here before", "mounted", "--new-mailbox", "nothing was written"] {
                XCTAssertTrue(refused.stderr.contains(words), "run \(run): \(words): \(refused.stderr)")
            }
            XCTAssertEqual(entries(stick), [], "run \(run): nothing written to the mount point")
        }

        let fresh = try h.folder("new-share")
        try h.syncOK(site, as: "S1", fresh)
        XCTAssertEqual(entries(fresh), ["sqsync"], "a first sync to an empty folder makes a mailbox")

        try h.syncOK(site, as: "S1", stick, ["--new-mailbox"])
        XCTAssertEqual(entries(stick), ["sqsync"])
        try h.syncOK(hq, as: "HQ", stick)
        XCTAssertEqual(try h.dump(hq, table: "t", orderBy: "id"), try h.dump(site, table: "t", orderBy: "id"))
    }

    /// Under -q a sync prints one line on every run while a bundle waits (here: held for a
    /// table this site does not track yet), and exits 0: it ends by itself once tracked.
    func testEveryQuietRunSaysWhatWaits() throws {
        let box = try h.folder("box")
        try h.syncOK(site, as: "S1", box)
        try h.sqlite(hq, "CREATE TABLE u(id TEXT PRIMARY KEY, w TEXT); INSERT INTO u VALUES ('x', 'new table');")
        try h.ok(["track", hq, "u"])
        try h.syncOK(hq, as: "HQ", box)
        for run in 1...3 {
            let result = try h.sync(site, as: "S1", box, ["-q"])
            XCTAssertEqual(result.status, 0, "run \(run): \(result.stderr)")
            XCTAssertEqual(result.stderrLines.count, 1, "run \(run): one line: \(result.stderr)")
            XCTAssertTrue(result.stderr.contains("waiting: 1 bundle held"), "run \(run): \(result.stderr)")
        }
        try h.sqlite(site, "CREATE TABLE u(id TEXT PRIMARY KEY, w TEXT);")
        try h.ok(["track", site, "u"])
        let settled = try h.sync(site, as: "S1", box, ["-q"])
        XCTAssertEqual(settled.status, 0, settled.stderr)
        XCTAssertEqual(settled.stderr, "", "nothing waits any more")
        XCTAssertEqual(try h.sqlite(site, "SELECT w FROM u;"), "new table\n")
    }

    /// An acknowledgement file that is refused is said once, not on every run; changed, it
    /// is read (and said) again.
    func testARefusedAcknowledgementIsSaidOnce() throws {
        let box = try h.folder("box")
        try h.syncOK(site, as: "S1", box)
        let folder = box + "/sqsync/acks/planted-reader"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try "not an acknowledgement\n".write(toFile: folder + "/00000000000000000001_00000000.ack", atomically: true, encoding: .utf8)
        let first = try h.syncOK(site, as: "S1", box)
        XCTAssertEqual(first.stderrLines.filter { $0.contains("planted-reader") }.count, 1, first.stderr)
        for run in 1...2 {
            let again = try h.syncOK(site, as: "S1", box)
            XCTAssertFalse(again.stderr.contains("planted-reader"), "run \(run): said once: \(again.stderr)")
        }
        try "not an acknowledgement either\n".write(
            toFile: folder + "/00000000000000000001_00000000.ack", atomically: true, encoding: .utf8)
        // A writer of the mailbox renews its mark; a planter does not (docs/PERFORMANCE.md).
        try h.syncOK(hq, as: "HQ", box)
        let changed = try h.syncOK(site, as: "S1", box)
        XCTAssertTrue(changed.stderr.contains("planted-reader"), changed.stderr)
    }

    /// An app (Python's sqlite3 module) holds a write transaction. The read-only commands
    /// answer at once and say what they could not count; `sync` waits SQSYNC_BUSY_TIMEOUT,
    /// then exits 5 saying a retry is safe, and the database is as it was.
    func testReadsNeverWaitForAWriterAndSyncSaysBusy() throws {
        let box = try h.folder("box")
        try h.syncOK(site, as: "S1", box)
        try h.sqlite(hq, "INSERT INTO t VALUES ('2', 'from hq');")
        let fromHQ = h.path("from-hq.sqsb")
        try h.ok(["export", hq, "-o", fromHQ], key: "HQ")
        try h.sqlite(site, "UPDATE t SET v = 'logged, not folded' WHERE id = '1';")
        let before = try h.fullDump(site)
        let ready = h.path("writer-ready")
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        writer.arguments = [
            "-c",
            """
            import sqlite3, time, sys
            c = sqlite3.connect(sys.argv[1], isolation_level=None)
            c.execute("BEGIN IMMEDIATE")
            c.execute("INSERT INTO t VALUES ('app', 'uncommitted')")
            open(sys.argv[2], 'w').close()
            time.sleep(60)
            """,
            site, ready,
        ]
        try writer.run()
        defer { writer.terminate(); writer.waitUntilExit() }
        let deadline = Date().addingTimeInterval(10)
        while !FileManager.default.fileExists(atPath: ready) && Date() < deadline { usleep(20_000) }
        XCTAssertTrue(FileManager.default.fileExists(atPath: ready), "the writer holds its transaction")

        for command in [["status", site], ["why", site, "t", "1"], ["doctor", site], ["peers", site], ["conflicts", site]] {
            let start = Date()
            let result = try h.sqsync(command)
            XCTAssertEqual(result.status, 0, "\(command): \(result.stderr)")
            XCTAssertLessThan(Date().timeIntervalSince(start), 2.5, "\(command) waited for the writer")
        }
        let status = try h.sqsync(["status", site, "--json"])
        XCTAssertEqual(h.json(status)["pending_not_folded"] as? Bool, true, status.stdout)
        XCTAssertTrue(status.stderr.contains("not counted here yet"), status.stderr)

        let start = Date()
        let busy = try h.sqsync(["sync", site, box], key: "S1", environment: ["SQSYNC_BUSY_TIMEOUT": "1"])
        XCTAssertEqual(busy.status, 5, busy.stderr)
        XCTAssertLessThan(Date().timeIntervalSince(start), 10, "bounded by SQSYNC_BUSY_TIMEOUT")
        for words in [site, "busy", "SQSYNC_BUSY_TIMEOUT (1 s)", "safe to retry"] {
            XCTAssertTrue(busy.stderr.contains(words), "\(words): \(busy.stderr)")
        }
        let notWritten = h.path("busy.sqsb")
        for command in [["export", site, "-o", notWritten], ["import", site, fromHQ]] {
            let waited = try h.sqsync(command, key: "S1", environment: ["SQSYNC_BUSY_TIMEOUT": "1"])
            XCTAssertEqual(waited.status, 5, "\(command): \(waited.stderr)")
            XCTAssertTrue(waited.stderr.contains("busy") && waited.stderr.contains("safe to retry"), waited.stderr)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: notWritten), "a busy export leaves no file")
        writer.terminate()
        writer.waitUntilExit()
        XCTAssertEqual(try h.fullDump(site), before, "nothing changed while busy")
        try h.syncOK(site, as: "S1", box)
        XCTAssertTrue(try h.ok(["status", site]).stderr.isEmpty)
    }

    /// A bundle signed by a key this site does not trust waits for a trust decision: every
    /// sync says so and exits 3. Retiring that replica is a decision too: its files are never
    /// read again, and the syncs go quiet (exit 0).
    func testAnUntrustedSignerWaitsUntilTrustedOrRetired() throws {
        let box = try h.folder("box")
        let stranger = h.path("stranger.key")
        let line = try h.ok(["keygen", "--out", stranger, "--name", "stranger"]).stdout
        try line.write(toFile: h.path("stranger-trust"), atomically: true, encoding: .utf8)
        let strangerDB = h.path("stranger.db")
        try h.ok(["clone", hq, strangerDB, "--name", "stranger", "--key", stranger])
        // HQ names the new replica in its bundle, so the site knows of it (and can retire it).
        try h.syncOK(hq, as: "HQ", box)
        try h.syncOK(site, as: "S1", box)
        try h.sqlite(strangerDB, "INSERT INTO t VALUES ('s', 'from a stranger');")
        let strangerSync = try Harness.run(
            Harness.binary, ["sync", strangerDB, box, "--key", stranger, "--trust", h.path("stranger-trust"), "--no-encrypt"],
            environment: ["HOME": h.path("")])
        XCTAssertEqual(strangerSync.status, 0, strangerSync.stderr)
        for run in 1...2 {
            let waiting = try h.sync(site, as: "S1", box, ["-q"])
            XCTAssertEqual(waiting.status, 3, "run \(run): \(waiting.stderr)")
            XCTAssertTrue(waiting.stderr.contains("waiting: 1 bundle signed by a key not trusted here"), "run \(run): \(waiting.stderr)")
        }
        let strangerID = try h.knowledgeID(strangerDB)
        try h.ok(["peers", "retire", site, strangerID])
        let retired = try h.sync(site, as: "S1", box, ["-q"])
        XCTAssertEqual(retired.status, 0, retired.stderr)
        XCTAssertEqual(retired.stderr, "", "a retired replica's files wait on nothing")
        XCTAssertFalse(try h.sqlite(site, "SELECT v FROM t;").contains("stranger"))
    }

    /// Smaller things a newcomer met: an unsupported scheme is named as such (a usage error,
    /// not "no such directory"), and `export -o` says when it wrote a bundle in the clear.
    func testAnUnsupportedSchemeAndAClearExportAreSaid() throws {
        let ftp = try h.sync(site, as: "S1", "ftp://depot.example.org/sqsync")
        XCTAssertEqual(ftp.status, 2, ftp.stderr)
        XCTAssertTrue(ftp.stderr.contains("ftp:// is not a target sqsync speaks"), ftp.stderr)
        XCTAssertFalse(ftp.stderr.contains("no such directory"), ftp.stderr)
        let clear = try h.ok(["export", site, "-o", h.path("clear.sqsb")], key: "S1")
        XCTAssertTrue(clear.stderr.contains("in the clear"), clear.stderr)
        let sealed = try h.ok(["export", site, "-o", h.path("sealed.sqsb"), "--encrypt-to", h.keyPath("HQ") + ".pub"], key: "S1")
        XCTAssertFalse(sealed.stderr.contains("in the clear"), sealed.stderr)
    }

    /// `sqsync` in a pseudo-terminal (Python's pty module), with no delay before progress:
    /// its terminal output, stdout and stderr as a user sees them.
    private func onATerminal(_ arguments: [String], key: String, extra: [String] = []) throws -> String {
        let script = "import os, pty, sys\nos.environ['SQSYNC_PROGRESS_DELAY'] = '0'\npty.spawn(sys.argv[1:])"
        let run = try Harness.run(
            "/usr/bin/python3",
            ["-c", script, Harness.binary] + arguments + extra + ["--trust", h.trustFile, "--key", h.keyPath(key)])
        XCTAssertEqual(run.status, 0, run.stderr)
        return run.stdout
    }

    /// Long work (tracking, cloning, exporting, importing, syncing) shows its step, a
    /// percentage and counts with their total on a terminal; nothing under -q, and nothing at
    /// all when stderr is a file or a pipe (cron).
    func testLongWorkShowsProgressWithTotalsOnATerminalOnly() throws {
        try h.sqlite(
            hq,
            "CREATE TABLE big(id INTEGER PRIMARY KEY, v TEXT); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 25000) INSERT INTO big SELECT i, 'v' || i FROM n;"
        )
        let tracked = try onATerminal(["track", hq, "big", "--allow-integer-pk"], key: "HQ")
        XCTAssertTrue(tracked.contains("recording writes ") && tracked.contains(" of 25,000 rows"), tracked)
        let exported = try onATerminal(["export", hq, "-o", h.path("big.sqsb")], key: "HQ")
        XCTAssertTrue(exported.contains("exporting ") && exported.contains(" of 25,001 rows"), exported)
        XCTAssertTrue(exported.contains("\u{1B}[K"), "the line is redrawn in place and cleared: \(exported.debugDescription)")
        try h.sqlite(site, "CREATE TABLE big(id INTEGER PRIMARY KEY, v TEXT);")
        try h.ok(["track", site, "big", "--allow-integer-pk"], key: "S1")
        let imported = try onATerminal(["import", site, h.path("big.sqsb")], key: "S1")
        XCTAssertTrue(imported.contains("importing big.sqsb ") && imported.contains(" of 25,"), imported)
        let cloned = try onATerminal(["clone", hq, h.path("copy.db"), "--name", "copy"], key: "HQ")
        XCTAssertTrue(cloned.contains("copying 100% (") && cloned.contains(" pages"), cloned)
        let box = try h.folder("box")
        try h.syncOK(hq, as: "HQ", box)
        let synced = try onATerminal(["sync", h.path("copy.db"), box], key: "HQ")
        XCTAssertTrue(synced.contains("synced with"), synced)

        let quiet = try onATerminal(["export", hq, "-o", h.path("quiet.sqsb")], key: "HQ", extra: ["-q"])
        XCTAssertFalse(quiet.contains("exporting"), quiet)
        let piped = try h.sqsync(["export", hq, "-o", h.path("piped.sqsb")], key: "HQ", environment: ["SQSYNC_PROGRESS_DELAY": "0"])
        XCTAssertEqual(piped.status, 0, piped.stderr)
        XCTAssertFalse(piped.stderr.contains("exporting") || piped.stderr.contains("\r"), piped.stderr)
    }
}
