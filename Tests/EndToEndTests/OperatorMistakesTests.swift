import Foundation
import TestSupport
import SQLiteDatabase
import XCTest

/// What operators do by habit or by mistake (cron on a quiet site, importing a whole stick,
/// options before the subcommand, a killed upload) gets the expected answer, through the
/// built binary: exit code, message and resulting data.
final class OperatorMistakesTests: XCTestCase {
    private var h: Harness!
    private var hq = "", site = "", box = ""

    private static let schema = """
        CREATE TABLE t(id TEXT PRIMARY KEY, v TEXT);
        INSERT INTO t VALUES ('1', 'one'), ('2', 'two');
        """

    override func setUpWithError() throws {
        h = try Harness()
        hq = try h.makeReplica("HQ", schema: Self.schema)
        site = try h.cloneReplica(hq, as: "S1")
        box = h.path("stick")
        try FileManager.default.createDirectory(atPath: box, withIntermediateDirectories: true)
    }

    override func tearDown() { h = nil }

    private func rows(_ db: String) throws -> String { try h.dump(db, table: "t", orderBy: "id") }

    /// Runs the binary with exactly these arguments (no options appended).
    private func run(_ arguments: [String]) throws -> ProcessResult {
        try Harness.run(Harness.binary, arguments)
    }

    // MARK: 1. a quiet site under cron

    func testReadOnlySiteSyncsTenTimesInARow() throws {
        for round in 1...10 {
            let result = try h.sync(site, as: "S1", box)
            XCTAssertEqual(result.status, 0, "round \(round): \(result.stderr)")
            XCTAssertFalse(result.stderr.contains("copy"), "round \(round): \(result.stderr)")
        }
        // HQ joins and writes; the quiet site keeps syncing without alarms and gets the change.
        try h.sqlite(hq, "UPDATE t SET v = 'from hq' WHERE id = '1';")
        for round in 1...3 {
            try h.syncOK(hq, as: "HQ", box)
            try h.syncOK(site, as: "S1", box, file: #filePath, line: #line)
            XCTAssertEqual(try rows(site), try rows(hq), "round \(round)")
        }
    }

    func testCopiedDatabaseIsStillDetectedThroughTheFolder() throws {
        try h.syncOK(site, as: "S1", box)
        try h.ok(["status", site])  // settle the WAL so the copy is the whole database
        let copy = try h.copyTakenForMoved(site, to: "S1-copy.db")
        try h.sqlite(copy, "INSERT INTO t VALUES ('c', 'made on the copy');")
        try h.syncOK(copy, as: "S1", box)
        let before = try h.fullDump(site)
        let result = try h.sync(site, as: "S1", box)
        XCTAssertEqual(result.status, 1, result.stderr)
        let alarm = try XCTUnwrap(result.stderrLines.first { $0.contains("written by another copy of this database") }, result.stderr)
        // One sentence after the file's path: what happened, then what to do.
        let sentence = alarm.components(separatedBy: ".sqsb: ").last ?? alarm
        XCTAssertLessThan(sentence.count, 140, sentence)
        XCTAssertTrue(result.stderr.contains("sqsync reidentify"), result.stderr)
        XCTAssertEqual(try h.fullDump(site), before)
    }

    // MARK: 2. status after folder syncs

    func testStatusShowsWhatSitesAcknowledgedInTheFolder() throws {
        let site2 = try h.cloneReplica(hq, as: "S2")
        for (db, name) in [(hq, "HQ"), (site, "S1"), (site2, "S2")] { try h.syncOK(db, as: name, box) }  // all read the stick
        try h.sqlite(hq, "UPDATE t SET v = 'x' WHERE id = '1'; INSERT INTO t VALUES ('3', 'three');")
        for (db, name) in [(hq, "HQ"), (site, "S1"), (site2, "S2"), (hq, "HQ")] { try h.syncOK(db, as: name, box) }
        let status = try h.okJSON(["status", hq])
        let peers = try XCTUnwrap(status["peers"] as? [[String: Any]])
        XCTAssertEqual(peers.count, 2, "\(peers)")
        for peer in peers {
            XCTAssertEqual(peer["unacknowledged"] as? Int, 0, "the site's signed ack file holds everything: \(peer)")
        }
        let human = try h.ok(["status", hq]).stdout
        XCTAssertEqual(human.components(separatedBy: "0 local changes not acknowledged").count - 1, 2, human)
    }

    // MARK: 3. importing a mixture

    func testImportAppliesGoodBundlesReportsTheBadFileAndExitsThree() throws {
        try h.sqlite(hq, "INSERT INTO t VALUES ('g', 'good');")
        let good = try h.export(hq, as: "HQ")
        try h.sqlite(hq, "INSERT INTO t VALUES ('m', 'more');")
        let more = try h.export(hq, as: "HQ")
        let junk = h.path("junk.txt")
        try Data("not a bundle\n".utf8).write(to: URL(fileURLWithPath: junk))

        let result = try h.sqsync(["import", site, good, junk, more], key: "S1")
        XCTAssertEqual(result.status, 3, result.stderr)
        let errors = result.stderrLines.filter { $0.hasPrefix("sqsync: ") }
        XCTAssertEqual(errors.count, 1, result.stderr)
        XCTAssertTrue(errors.first?.contains(junk) ?? false, result.stderr)
        XCTAssertEqual(result.stderrLines.filter { $0.hasPrefix("applied ") }.count, 2, result.stderr)
        XCTAssertEqual(try rows(site), try rows(hq), "both valid bundles were applied")

        let json = h.json(try h.sqsync(["import", site, good, junk, more, "--json"], key: "S1"))
        let entries = try XCTUnwrap(json["bundles"] as? [[String: Any]])
        XCTAssertEqual(entries.map { $0["path"] as? String }, [good, junk, more])
        XCTAssertEqual(entries.map { $0["status"] as? String }, ["applied", "rejected", "applied"])
        XCTAssertNotNil(entries[1]["reason"])
    }

    func testImportingAFolderNamesTheFilesItSkipped() throws {
        try h.sqlite(hq, "INSERT INTO t VALUES ('f', 'in a folder');")
        let folder = h.path("incoming")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        _ = try h.ok(["export", hq, "--to", folder], key: "HQ")
        try Data("notes".utf8).write(to: URL(fileURLWithPath: folder + "/README.txt"))
        let result = try h.ok(["import", site, folder], key: "S1")
        XCTAssertTrue(result.stderr.contains("skipped \(folder)/README.txt"), result.stderr)
        XCTAssertEqual(try rows(site), try rows(hq))
        let json = try h.okJSON(["import", site, folder], key: "S1")
        let statuses = (json["bundles"] as? [[String: Any]] ?? []).map { $0["status"] as? String }
        XCTAssertEqual(statuses.sorted { ($0 ?? "") < ($1 ?? "") }, ["applied", "skipped"], "\(json)")
    }

    // MARK: 4. export --for a peer only heard of

    func testExportForAPeerKnownOnlyThroughTheMailbox() throws {
        let site2 = try h.cloneReplica(site, as: "S2")  // HQ has never heard of S2
        let site2ID = try h.knowledgeID(site2)
        XCTAssertEqual(try h.sqsync(["export", hq, "--for", "S2", "-o", h.path("x.sqsb")], key: "HQ").status, 1, "no such peer yet")
        // HQ leaves everything; S2 takes it and, having nothing HQ lacks, leaves only its
        // acknowledgement; HQ hears of S2 through that file alone.
        try h.syncOK(hq, as: "HQ", box)
        XCTAssertTrue(try h.syncJSON(site2, as: "S2", box)["bundle_out"] is NSNull)
        try h.syncOK(hq, as: "HQ", box)
        try h.sqlite(hq, "INSERT INTO t VALUES ('n', 'new');")
        for peer in ["S2", site2ID] {
            let out = h.path("for-\(peer.prefix(4)).sqsb")
            let json = try h.okJSON(["export", hq, "--for", peer, "-o", out], key: "HQ")
            XCTAssertEqual(json["rows"] as? Int, 1, "only the change S2 lacks: \(json)")
        }
        // A knowledge ID never heard of at all gets everything.
        let stranger = UUID().uuidString.lowercased()
        let result = try h.ok(["export", hq, "--for", stranger, "-o", h.path("all.sqsb")], key: "HQ")
        XCTAssertTrue(result.stderr.contains("exporting every change"), result.stderr)
        // Encrypted to every trusted key (the stranger's is not pinned), HQ's among them.
        XCTAssertEqual(h.json(try h.ok(["inspect", h.path("all.sqsb"), "--json"], key: "HQ"))["verified"] as? Bool, true)
    }

    // MARK: 5. global options anywhere

    func testGlobalOptionsBeforeOrAfterTheSubcommand() throws {
        let before = try run(["--json", "status", hq])
        let after = try run(["status", hq, "--json"])
        XCTAssertEqual(before.status, 0, before.stderr)
        XCTAssertEqual(before.stdout, after.stdout)
        XCTAssertNotNil(h.json(before)["knowledge_id"])

        try h.sqlite(hq, "INSERT INTO t VALUES ('k', 'key first');")
        let sync = try run(["--key", h.keyPath("HQ"), "--trust=\(h.trustFile)", "-q", "sync", hq, box])
        XCTAssertEqual(sync.status, 0, sync.stderr)
        XCTAssertEqual(sync.stderr, "", "-q before the subcommand silences it")
        let retire = try run(["--json", "peers", "retire", hq, "nobody"])
        XCTAssertEqual(retire.status, 1, "an unknown peer is a failure, not a usage error: \(retire.stderr)")

        let unknown = try run(["--bogus", "status", hq])
        XCTAssertEqual(unknown.status, 2, unknown.stderr)
        XCTAssertTrue(unknown.stderr.contains("--bogus"), unknown.stderr)
        XCTAssertEqual(try run(["status", hq, "--bogus"]).status, 2)
        let help = try run(["--help"])
        XCTAssertEqual(help.status, 0)
        XCTAssertTrue(help.stdout.contains("SUBCOMMANDS"), help.stdout)
        XCTAssertEqual(try run(["status", "--help"]).status, 0)
    }

    // MARK: 6. importing this replica's own bundles

    func testImportingTheWholeStickIncludingOwnBundlesIsNothingNew() throws {
        try h.sqlite(site, "INSERT INTO t VALUES ('s', 'from the site');")
        try h.syncOK(hq, as: "HQ", box)
        try h.syncOK(site, as: "S1", box)
        let files = bundlesIn(box)
        let siteID = try h.knowledgeID(site)
        XCTAssertTrue(files.contains { $0.contains("/\(siteID)/") }, "the site left its own bundle: \(files)")
        let before = try h.fullDump(site)
        let result = try h.sqsync(["import", site] + files, key: "S1")
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertTrue(result.stderr.contains("nothing new"), result.stderr)
        XCTAssertTrue(result.stderr.contains("this replica wrote it"), result.stderr)
        XCTAssertEqual(try h.fullDump(site), before, "nothing was new, so nothing changed")

        // A copy's bundle under the same knowledge ID is still refused.
        let copy = try h.copyTakenForMoved(site, to: "S1-copy.db")
        try h.sqlite(copy, "INSERT INTO t VALUES ('z', 'copy');")
        let fromCopy = try h.export(copy, as: "S1")
        let clash = try h.sqsync(["import", site, fromCopy], key: "S1")
        XCTAssertEqual(clash.status, 1, clash.stderr)
        XCTAssertEqual(clash.stderrLines.count, 1, clash.stderr)
        XCTAssertTrue(clash.stderr.contains(siteID) && clash.stderr.contains("sqsync reidentify"), clash.stderr)
        XCTAssertEqual(try h.fullDump(site), before)
    }

    // MARK: 7. a lost value is visible on its own replica

    /// HQ's 'hq edit' lost to the site's concurrent edit: both replicas list it, once.
    private func assertHQEditLoggedOnBothSidesThenCleared(file: StaticString = #filePath, line: UInt = #line) throws {
        for db in [hq, site] {
            let logged = try h.conflicts(db)
            XCTAssertEqual(logged.count, 1, "\(db): \(logged)", file: file, line: line)
            XCTAssertEqual(logged.first?["kind"] as? String, "concurrent update", file: file, line: line)
            XCTAssertEqual(logged.first?["column_name"] as? String, "v", file: file, line: line)
            XCTAssertEqual(logged.first?["lost_value"] as? String, "hq edit", file: file, line: line)
            XCTAssertEqual(logged.first?["lost_site"] as? String, try h.knowledgeID(hq), file: file, line: line)
        }
        try h.ok(["conflicts", hq, "--clear"])
        try h.ok(["conflicts", site, "--clear"])
    }

    func testConcurrentLossIsLoggedOnTheReplicaWhoseValueLost() throws {
        for (db, name) in [(hq, "HQ"), (site, "S1"), (hq, "HQ")] { try h.syncOK(db, as: name, box) }
        try h.sqlite(hq, "UPDATE t SET v = 'hq edit' WHERE id = '1';")
        usleep(20_000)
        try h.sqlite(site, "UPDATE t SET v = 'site edit' WHERE id = '1';")  // concurrent and later: it wins
        for (db, name) in [(hq, "HQ"), (site, "S1"), (hq, "HQ")] { try h.syncOK(db, as: name, box) }
        XCTAssertEqual(try rows(hq), try rows(site))
        XCTAssertEqual(try h.sqlite(hq, "SELECT v FROM t WHERE id = '1';"), "site edit\n")
        try assertHQEditLoggedOnBothSidesThenCleared()

        // An edit made after seeing the other's is no conflict, on either side.
        try h.sqlite(hq, "UPDATE t SET v = 'hq again' WHERE id = '1';")
        try h.syncOK(hq, as: "HQ", box)
        try h.syncOK(site, as: "S1", box)
        try h.sqlite(site, "UPDATE t SET v = 'site, having seen it' WHERE id = '1';")
        try h.syncOK(site, as: "S1", box)
        try h.syncOK(hq, as: "HQ", box)
        XCTAssertEqual(try h.sqlite(hq, "SELECT v FROM t WHERE id = '1';"), "site, having seen it\n")
        XCTAssertEqual(try h.conflicts(hq).count, 0)
        XCTAssertEqual(try h.conflicts(site).count, 0)
    }

    /// The same with bundles carried as files (`export`/`import`): the bundle's signed header
    /// says when its sender learned of the other's changes.
    func testConcurrentLossIsLoggedOnBothSidesWithBundleFiles() throws {
        try h.send((hq, "HQ"), to: (site, "S1"))
        try h.send((site, "S1"), to: (hq, "HQ"))
        try h.sqlite(hq, "UPDATE t SET v = 'hq edit' WHERE id = '1';")
        usleep(20_000)
        try h.sqlite(site, "UPDATE t SET v = 'site edit' WHERE id = '1';")  // concurrent and later: it wins
        try h.send((hq, "HQ"), to: (site, "S1"))  // the site logs the loss of HQ's value
        try h.send((site, "S1"), to: (hq, "HQ"))  // HQ's value is overwritten here: logged too
        XCTAssertEqual(try h.sqlite(hq, "SELECT v FROM t WHERE id = '1';"), "site edit\n")
        XCTAssertEqual(try rows(hq), try rows(site))
        try assertHQEditLoggedOnBothSidesThenCleared()

        // An edit made after seeing the other's is no conflict, on either side.
        try h.sqlite(hq, "UPDATE t SET v = 'hq again' WHERE id = '1';")
        try h.send((hq, "HQ"), to: (site, "S1"))
        try h.sqlite(site, "UPDATE t SET v = 'site, having seen it' WHERE id = '1';")
        try h.send((site, "S1"), to: (hq, "HQ"))
        XCTAssertEqual(try h.sqlite(hq, "SELECT v FROM t WHERE id = '1';"), "site, having seen it\n")
        XCTAssertEqual(try h.conflicts(hq).count, 0)
        XCTAssertEqual(try h.conflicts(site).count, 0)
    }

    // MARK: 8. a killed upload's leftovers

    func testNextSyncRemovesOnlyItsOwnUnfinishedUploads() throws {
        for (db, name) in [(hq, "HQ"), (site, "S1")] { try h.syncOK(db, as: name, box) }
        let hqID = try h.knowledgeID(hq), siteID = try h.knowledgeID(site)
        let planted = [
            "sqsync/outbox/\(siteID)/.tmp-\(siteID)-0123", "sqsync/acks/\(siteID)/.tmp-\(siteID)-4567",
            "sqsync/outbox/\(siteID)/.tmp-someone-else", "sqsync/outbox/\(hqID)/.tmp-\(hqID)-89ab",
        ]
        for path in planted { try Data("partial".utf8).write(to: URL(fileURLWithPath: box + "/" + path)) }
        let json = try h.syncJSON(site, as: "S1", box)
        XCTAssertEqual(json["leftovers_removed"] as? Int, 2, "\(json)")
        let left = filesBelow(box).filter { ($0 as NSString).lastPathComponent.hasPrefix(".tmp-") }
        XCTAssertEqual(left, [planted[3], planted[2]].sorted(), "only the site's own leftovers go")
        XCTAssertTrue(try h.ok(["sync", site, box], key: "S1").stderr.contains("synced"))
    }

    // MARK: 10. counts

    func testSyncSaysOneBundleIn() throws {
        try h.sqlite(hq, "INSERT INTO t VALUES ('p', 'plural');")
        try h.syncOK(hq, as: "HQ", box)
        let result = try h.syncOK(site, as: "S1", box)
        XCTAssertTrue(result.stderr.contains(": 1 bundle in (1 row changed, 0 conflicts)"), result.stderr)
        XCTAssertFalse(result.stderr.contains("1 bundles"), result.stderr)
    }

    // MARK: what a newcomer types

    /// A bare `sqsync` is a usage error listing the commands; a misspelt command names the
    /// nearest one; both exit 2.
    func testABareOrMisspeltCommandIsAUsageErrorThatSaysWhatWasMeant() throws {
        let bare = try run([])
        XCTAssertEqual(bare.status, 2)
        XCTAssertTrue(bare.stderr.contains("SUBCOMMANDS") && bare.stderr.contains("sync"), bare.stderr)
        let misspelt = try run(["stauts", hq])
        XCTAssertEqual(misspelt.status, 2)
        XCTAssertEqual(misspelt.stderrLines, ["sqsync: unknown command 'stauts'; did you mean 'status'? (sqsync --help lists them)"])
    }

    /// Retiring a name no peer has is a failure (exit 1) that lists the peers, not a usage
    /// error, and retires nothing.
    func testRetiringAMistypedPeerListsThePeers() throws {
        let before = try h.fullDump(hq)
        let result = try h.sqsync(["peers", "retire", hq, "S2"])
        XCTAssertEqual(result.status, 1, result.stderr)
        XCTAssertTrue(result.stderr.contains("no peer named S2 (its peers: S1)"), result.stderr)
        XCTAssertEqual(try h.fullDump(hq), before)
    }

    /// `track --all` tracks every table with a primary key and names each one it leaves out.
    func testTrackAllTracksWhatItCanAndNamesTheRest() throws {
        let db = h.path("mixed.db")
        try h.sqlite(
            db,
            """
            CREATE TABLE a_nokey(v TEXT); CREATE TABLE b_good(id TEXT PRIMARY KEY, v TEXT);
            CREATE TABLE c_nokey(v TEXT); CREATE TABLE d_good(id TEXT PRIMARY KEY);
            """)
        try h.ok(["init", db, "--create"], key: "HQ")
        let result = try h.okJSON(["track", db, "--all"])
        XCTAssertEqual((result["tracked"] as? [[String: Any]])?.compactMap { $0["table"] as? String }, ["b_good", "d_good"])
        let leftOut = result["not_tracked"] as? [String] ?? []
        XCTAssertEqual(leftOut.count, 2, "\(leftOut)")
        XCTAssertTrue(leftOut[0].contains("a_nokey has no primary key"), "\(leftOut)")
        XCTAssertTrue(leftOut[1].contains("c_nokey has no primary key"), "\(leftOut)")
    }

    /// Two sites that never exchanged allowed_signers lines: the reader is told which line its
    /// sender lacks (an encrypted bundle) or which line it lacks itself (a bundle in the
    /// clear), each the exact line to add; once added, they sync.
    func testAForgottenTrustLineIsNamedWithTheLineToAdd() throws {
        let keyA = h.path("A1.key"), keyB = h.path("B1.key")
        let trustA = h.path("trustA"), trustB = h.path("trustB")
        let lineA = try h.ok(["keygen", "--out", keyA, "--name", "A1"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let lineB = try h.ok(["keygen", "--out", keyB, "--name", "B1"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        try (lineA + "\n").write(toFile: trustA, atomically: true, encoding: .utf8)
        try (lineB + "\n").write(toFile: trustB, atomically: true, encoding: .utf8)
        func sqsync(_ arguments: [String], key: String, trust: String) throws -> ProcessResult {
            try run(["--key", key, "--trust=\(trust)"] + arguments)
        }
        let a = h.path("A1.db"), b = h.path("B1.db"), folder = try h.folder("forgot")
        try h.sqlite(a, Self.schema)
        XCTAssertEqual(try sqsync(["init", a, "--name", "A1"], key: keyA, trust: trustA).status, 0)
        XCTAssertEqual(try sqsync(["track", a, "--all"], key: keyA, trust: trustA).status, 0)
        XCTAssertEqual(try sqsync(["clone", a, b, "--name", "B1", "--key", keyB], key: keyA, trust: trustA).status, 0)
        try h.sqlite(a, "INSERT INTO t VALUES ('3', 'three');")

        XCTAssertEqual(try sqsync(["sync", a, folder], key: keyA, trust: trustA).status, 0)
        let encrypted = try sqsync(["sync", b, folder], key: keyB, trust: trustB)
        let keyOfB = String(lineB.dropFirst("B1 ".count))
        XCTAssertTrue(encrypted.stderr.contains("its sender's allowed_signers lacks this replica's line: NAME \(keyOfB)"), encrypted.stderr)

        XCTAssertEqual(try sqsync(["sync", a, folder, "--no-encrypt"], key: keyA, trust: trustA).status, 0)
        let clear = try sqsync(["sync", b, folder], key: keyB, trust: trustB)
        XCTAssertTrue(clear.stderr.contains("(it says it comes from replica A1); if you trust it, add this line to \(trustB): \(lineA)"), clear.stderr)
        let waiting = try sqsync(["status", b], key: keyB, trust: trustB)
        XCTAssertTrue(waiting.stdout.contains("untrusted  ") && waiting.stdout.contains(lineA), waiting.stdout)
        XCTAssertTrue(waiting.stdout.contains("add this line to \(trustB)"), "status names the file too: \(waiting.stdout)")
        let again = try sqsync(["sync", b, folder, "--json"], key: keyB, trust: trustB)
        XCTAssertEqual(again.status, 3, "refused before: not read again, but still waiting: \(again.stderr)")
        XCTAssertTrue(again.stderr.contains("waiting: 1 bundle signed by a key not trusted here"), again.stderr)
        XCTAssertTrue(again.stderr.contains(trustB), "names the file to add the line to: \(again.stderr)")
        let listed = h.json(again)["untrusted"] as? [String] ?? []
        XCTAssertEqual(listed.count, 1, again.stdout)
        XCTAssertTrue(listed.first?.contains(lineA) == true, again.stdout)
        usleep(300_000)  // the folder's times settle: the next sync may stop at them, and still says so
        let quiet = try sqsync(["sync", b, folder, "--json", "-q"], key: keyB, trust: trustB)
        XCTAssertEqual((h.json(quiet)["untrusted"] as? [String])?.count, 1, quiet.stdout)
        XCTAssertEqual(quiet.status, 3, quiet.stderr)
        XCTAssertEqual(quiet.stderrLines.filter { $0.contains(": waiting: ") }.count, 1, "under -q, one line: \(quiet.stderr)")

        try (lineA + "\n" + lineB + "\n").write(toFile: trustA, atomically: true, encoding: .utf8)
        try (lineB + "\n" + lineA + "\n").write(toFile: trustB, atomically: true, encoding: .utf8)
        for _ in 0..<2 {
            XCTAssertEqual(try sqsync(["sync", a, folder], key: keyA, trust: trustA).status, 0)
            let synced = try sqsync(["sync", b, folder], key: keyB, trust: trustB)
            XCTAssertEqual(synced.status, 0, "a file refused for a line not added yet is read again: \(synced.stderr)")
        }
        XCTAssertEqual(try rows(b), try rows(a))
        XCTAssertFalse(try sqsync(["status", b], key: keyB, trust: trustB).stdout.contains("untrusted"))
    }

    /// A child added at one replica while its parent is deleted at another: `conflicts` and
    /// `doctor` name the orphan by its key and the missing parent by the child's columns, the
    /// same text at both replicas (rowids differ between replicas).
    func testAnOrphanIsNamedByItsKeyAndItsMissingParent() throws {
        let schema = """
            CREATE TABLE depots(id TEXT PRIMARY KEY, name TEXT);
            CREATE TABLE stock(id TEXT PRIMARY KEY, depot_id TEXT REFERENCES depots(id), item TEXT);
            INSERT INTO depots VALUES ('d1', 'north'), ('d9', 'closing');
            INSERT INTO stock VALUES ('s0', 'd1', 'rope');
            """
        let a = try h.makeReplica("FA", schema: schema)
        let b = try h.cloneReplica(a, as: "FB")
        try h.sqlite(a, "DELETE FROM depots WHERE id = 'd9';")
        try h.sqlite(b, "INSERT INTO stock VALUES ('s7', 'd9', 'bolts');")
        try h.send((a, "FA"), to: (b, "FB"))
        try h.send((b, "FB"), to: (a, "FA"))
        for db in [a, b] {
            let listed = try h.ok(["conflicts", db]).stdout
            XCTAssertTrue(
                listed.contains("orphan: stock row ('s7') refers to a missing depots row (depot_id = 'd9')"), "\(db): \(listed)")
        }
    }

    /// A column added without `refresh`: `export` and every `sync` (quiet ones too) warn,
    /// naming the table, the column and the command; after `refresh` the warning is gone and
    /// the column's values reach the peer.
    func testAColumnAddedWithoutRefreshRefusesSyncAndExport() throws {
        try h.syncOK(hq, as: "HQ", box)
        try h.syncOK(hq, as: "HQ", box)
        try h.sqlite(hq, "ALTER TABLE t ADD COLUMN extra TEXT; UPDATE t SET extra = 'x';")
        let refusal = "columns added since the triggers were made are not captured: t (extra); run `sqsync refresh \(hq)`"
        for _ in 0..<2 {
            let before = try h.fullDump(hq)
            let refused = try h.sync(hq, as: "HQ", box)
            XCTAssertEqual(refused.status, 1, refused.stderr)
            XCTAssertEqual(refused.stderrLines, ["sqsync: \(hq): sync refused: " + refusal], refused.stderr)
            XCTAssertEqual(try h.fullDump(hq), before, "a refused sync changes nothing")
        }
        let export = try h.sqsync(["export", hq, "-o", h.path("e.sqsb")], key: "HQ")
        XCTAssertEqual(export.status, 1, export.stderr)
        XCTAssertTrue(export.stderr.contains("export refused: " + refusal), export.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: h.path("e.sqsb")))
        let doctor = try h.sqsync(["doctor", hq])
        XCTAssertTrue((doctor.stdout + doctor.stderr).contains("table t has columns the triggers do not capture (extra)"), doctor.stdout)
        try h.sqlite(site, "ALTER TABLE t ADD COLUMN extra TEXT;")
        try h.ok(["refresh", hq])
        try h.ok(["refresh", site])
        XCTAssertFalse(try h.syncOK(hq, as: "HQ", box).stderr.contains("refused"))
        try h.syncOK(site, as: "S1", box)
        XCTAssertEqual(try h.sqlite(site, "SELECT group_concat(extra) FROM t;"), "x,x\n")
    }

    /// A mistyped `--key` is named as such, with the keys beside it, not answered with a hint
    /// to make a new key at the mistyped path; the default path's hint stays `sqsync keygen`.
    func testAMistypedKeyPathListsTheKeysBesideIt() throws {
        let mistyped = h.path("HQ.kye")
        let result = try Harness.run(Harness.binary, ["sync", hq, box, "--key", mistyped, "--trust", h.trustFile])
        XCTAssertEqual(result.status, 1, result.stderr)
        XCTAssertEqual(result.stderrLines.count, 1, result.stderr)
        XCTAssertTrue(result.stderr.contains("\(mistyped): no such key file (given by --key); keys in that folder: "), result.stderr)
        XCTAssertTrue(result.stderr.contains("HQ.key"), result.stderr)
        XCTAssertFalse(result.stderr.contains("keygen"), result.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: mistyped))
        let home = h.path("empty-home")
        let missing = try Harness.run(Harness.binary, ["sync", hq, box, "--trust", h.trustFile], environment: ["HOME": home, "SQSYNC_KEY": ""])
        XCTAssertEqual(missing.status, 1, missing.stderr)
        XCTAssertTrue(missing.stderr.contains("no signing key; create one with `sqsync keygen`"), missing.stderr)
    }

    /// `init` says that the database now uses the write-ahead log, and it does.
    func testInitSaysItSwitchedToTheWriteAheadLog() throws {
        let db = h.path("fresh.db")
        try h.sqlite(db, "CREATE TABLE t(id TEXT PRIMARY KEY);")
        let result = try h.sqsync(["init", db], key: "HQ")
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertTrue((result.stdout + result.stderr).contains("write-ahead log (journal_mode WAL)"), result.stdout + result.stderr)
        XCTAssertEqual(try h.sqlite(db, "PRAGMA journal_mode;"), "wal\n")
    }

    /// A table a migration creates after `track --all` is named by `status` and `doctor` (which
    /// still says ok: a table may be local on purpose) until it is tracked; one without a
    /// primary key, which cannot be tracked, is not.
    func testATableCreatedAfterTrackAllIsNamedUntilTracked() throws {
        try h.sqlite(hq, "CREATE TABLE depots(id TEXT PRIMARY KEY, name TEXT); CREATE TABLE scratch(x);")
        let status = try h.ok(["status", hq])
        XCTAssertTrue(status.stdout.contains("untracked  depots (not synced; `sqsync track \(hq) TABLE` to sync one)"), status.stdout)
        XCTAssertFalse(status.stdout.contains("scratch"), status.stdout)
        XCTAssertEqual(h.json(try h.ok(["status", hq, "--json"]))["untracked"] as? [String], ["depots"])
        let doctor = try h.ok(["doctor", hq])
        XCTAssertTrue((doctor.stdout + doctor.stderr).contains("ok; not tracked, so not synced: depots"), doctor.stderr)
        try h.ok(["track", hq, "depots"])
        XCTAssertFalse(try h.ok(["status", hq]).stdout.contains("untracked"))
        XCTAssertEqual(h.json(try h.ok(["doctor", hq, "--json"]))["untracked"] as? [String], [])
    }

    /// A value over the writer's cap is left out, named by table, key and column, and the rest
    /// goes: an update's value alone, an insert's whole row. Each sync says so again; once the
    /// value fits (made smaller, or a larger cap) it goes as a new change. A reader with a
    /// smaller cap than the sender's names the table, column and SQSYNC_MAX_VALUE_BYTES, and
    /// reads the same file once its cap matches.
    func testAValueOverTheCapIsLeftOutAndTheRestGoes() throws {
        try h.syncOK(site, as: "S1", box)
        try h.syncOK(hq, as: "HQ", box)
        try h.sqlite(
            hq,
            """
            INSERT INTO t VALUES ('big', hex(zeroblob(1000))), ('small', 'fits');
            UPDATE t SET v = hex(zeroblob(1500)) WHERE id = '1';
            UPDATE t SET v = 'two, changed' WHERE id = '2';
            """)
        let capped = ["SQSYNC_MAX_VALUE_BYTES": "1500"]
        let writer = try h.sqsync(["sync", hq, box], key: "HQ", environment: capped)
        XCTAssertEqual(writer.status, 0, writer.stderr)
        XCTAssertTrue(writer.stderr.contains("table t, key 'big': a value of 2000 bytes in column v is larger than a bundle may carry (SQSYNC_MAX_VALUE_BYTES is 1500); left out, the other changes went"), writer.stderr)
        XCTAssertTrue(writer.stderr.contains("table t, key '1': a value of 3000 bytes in column v"), writer.stderr)
        XCTAssertTrue(writer.stderr.contains("2 values too large left out"), writer.stderr)

        try syncOK(site, as: "S1", environment: capped)
        XCTAssertEqual(try rows(site), "'1'|'one'\n'2'|'two, changed'\n'small'|'fits'\n")

        let again = try h.sqsync(["sync", hq, box, "--json"], key: "HQ", environment: capped)
        XCTAssertEqual(again.status, 0, again.stderr)
        let withheld = h.json(again)["withheld"] as? [[String: Any]] ?? []
        XCTAssertEqual(withheld.map { "\($0["table"]!) \($0["key"]!) \($0["column"]!) \($0["bytes"]!)" }.sorted(), ["t '1' v 3000", "t 'big' v 2000"])
        let status = try h.sqsync(["status", hq], environment: capped)
        XCTAssertTrue(status.stdout.contains("left out   table t, key 'big': a value of 2000 bytes in column v"), status.stdout)

        // Made smaller, the row goes whole, as a new life; its later small edits with it.
        try h.sqlite(hq, "UPDATE t SET v = 'big, made smaller' WHERE id = 'big';")
        let smaller = try h.sqsync(["sync", hq, box], key: "HQ", environment: capped)
        XCTAssertEqual(smaller.status, 0, smaller.stderr)
        XCTAssertFalse(smaller.stderr.contains("key 'big'"), smaller.stderr)
        XCTAssertTrue(smaller.stderr.contains("key '1'"), smaller.stderr)
        try syncOK(site, as: "S1", environment: capped)
        XCTAssertEqual(try rows(site), "'1'|'one'\n'2'|'two, changed'\n'big'|'big, made smaller'\n'small'|'fits'\n")

        // A larger cap at the writer: the update goes, and a reader whose cap is smaller than
        // the sender's says why it refuses the file, until its cap matches.
        let released = try h.sqsync(["sync", hq, box], key: "HQ")
        XCTAssertEqual(released.status, 0, released.stderr)
        XCTAssertFalse(released.stderr.contains("left out"), released.stderr)
        let value = try h.sqsync(["sync", site, box], key: "S1", environment: capped)
        XCTAssertEqual(value.status, 3, value.stderr)
        XCTAssertTrue(value.stderr.contains("a value of 3000 bytes for t.v is larger than the 1500-byte cap here (SQSYNC_MAX_VALUE_BYTES)"), value.stderr)
        XCTAssertFalse(try rows(site).contains("000000"))
        try h.syncOK(site, as: "S1", box)
        XCTAssertEqual(try rows(site), try rows(hq))
    }

    private func syncOK(_ db: String, as name: String, environment: [String: String]) throws {
        let result = try h.sqsync(["sync", db, box], key: name, environment: environment)
        XCTAssertEqual(result.status, 0, result.stderr)
    }

    /// `export` leaves out a value over the cap the same way, says so, and the next export after
    /// the cap is raised carries it; a composite key is named whole.
    func testExportLeavesOutAValueOverTheCap() throws {
        let hq = try h.makeReplica("P1", schema: "CREATE TABLE pairs(a INTEGER, b TEXT, note TEXT, PRIMARY KEY (a, b));")
        let site = try h.cloneReplica(hq, as: "P2")
        try h.sqlite(hq, "INSERT INTO pairs VALUES (7, 'x', hex(zeroblob(1000))), (8, 'y', 'small');")
        let first = h.path("first.sqsb")
        let export = try h.sqsync(["export", hq, "-o", first, "--json"], key: "P1", environment: ["SQSYNC_MAX_VALUE_BYTES": "1500"])
        XCTAssertEqual(export.status, 0, export.stderr)
        XCTAssertTrue(export.stderr.contains("table pairs, key 7, 'x': a value of 2000 bytes in column note"), export.stderr)
        XCTAssertEqual((h.json(export)["withheld"] as? [[String: Any]])?.count, 1)
        try h.ok(["import", site, first], key: "P2")
        XCTAssertEqual(try h.sqlite(site, "SELECT a, b, note FROM pairs ORDER BY a;"), "8|y|small\n")
        let second = h.path("second.sqsb")
        let raised = try h.sqsync(["export", hq, "-o", second], key: "P1")
        XCTAssertEqual(raised.status, 0, raised.stderr)
        XCTAssertFalse(raised.stderr.contains("left out"), raised.stderr)
        try h.ok(["import", site, second], key: "P2")
        XCTAssertEqual(try h.sqlite(site, "SELECT a, b, length(note) FROM pairs ORDER BY a;"), "7|x|2000\n8|y|5\n")
    }
}
