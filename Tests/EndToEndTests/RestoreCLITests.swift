import Foundation
import TestSupport
import XCTest

/// A backup restored in place (issue 55, item 1): north is backed up, writes CHANGE-A and
/// syncs it to hq and hub, then the backup goes back over north.db (by `cp`, and by
/// `sqlite3 .restore`, which keeps the inode) and north writes CHANGE-B under the change
/// number CHANGE-A had. North's next sync says its numbers went back and gives the fix
/// (`reidentify`); after it, every replica holds both changes and nothing any wrote is lost.
final class RestoreCLITests: XCTestCase {
    private var h: Harness!
    private var hq = "", north = "", hub = "", box = ""
    private var replicas: [(db: String, name: String)] { [(hq, "hq"), (north, "north"), (hub, "hub")] }

    override func setUpWithError() throws {
        h = try Harness()
        hq = try h.makeReplica(
            "hq", schema: "CREATE TABLE items(id TEXT PRIMARY KEY, v TEXT); INSERT INTO items VALUES ('n1', 'tent'), ('n2', 'rope');")
        north = try h.cloneReplica(hq, as: "north")
        hub = try h.cloneReplica(hq, as: "hub")
        box = try h.folder("box")
        try rounds(2)
    }

    override func tearDown() { h = nil }

    private func rounds(_ times: Int) throws {
        for _ in 0..<times { for replica in replicas { try h.syncOK(replica.db, as: replica.name, box) } }
    }

    private func items(_ db: String) throws -> String { try h.dump(db, table: "items", orderBy: "id") }

    /// `restore` puts the backup back over north.db; the rest is the same for each way.
    private func restoreInPlace(_ restore: (_ backup: String) throws -> Void) throws {
        let backup = h.path("north-backup.db")
        try h.sqlite(north, ".backup '\(backup)'")
        try h.sqlite(north, "UPDATE items SET v = 'CHANGE-A' WHERE id = 'n1';")
        try rounds(2)
        XCTAssertTrue(try items(hq).contains("CHANGE-A"), "hq took CHANGE-A")

        try restore(backup)
        XCTAssertFalse(try items(north).contains("CHANGE-A"), "the backup is back")
        try h.sqlite(north, "UPDATE items SET v = 'CHANGE-B' WHERE id = 'n2';")

        let caught = try h.sync(north, as: "north", box)
        XCTAssertNotEqual(caught.status, 0, caught.stderr)
        XCTAssertTrue(caught.stderr.contains("sqsync reidentify"), caught.stderr)
        XCTAssertTrue(caught.stderr.contains("restored"), caught.stderr)
        for replica in [(hq, "hq"), (hub, "hub")] { try h.syncOK(replica.0, as: replica.1, box) }

        try h.ok(["reidentify", north], key: "north")
        try h.ok(["conflicts", north, "--clear"])
        try rounds(3)
        // Restored in place, the file's name is the old one: the new identity gets its own, so
        // that `peers retire north` still names one peer.
        let newID = try h.knowledgeID(north)
        let peers = (try h.okJSON(["peers", hq])["peers"] as? [[String: Any]] ?? []).map {
            (id: $0["knowledge_id"] as? String ?? "", name: $0["name"] as? String ?? "")
        }
        XCTAssertEqual(peers.first { $0.id == newID }?.name, "north-\(newID.prefix(6))", "\(peers)")
        XCTAssertEqual(peers.filter { $0.name == "north" }.count, 1, "\(peers)")
        let expected = try items(hq)
        XCTAssertTrue(expected.contains("CHANGE-A") && expected.contains("CHANGE-B"), expected)
        for replica in replicas { XCTAssertEqual(try items(replica.db), expected, replica.name) }
    }

    func testABackupCopiedOverTheFileIsCaughtAndLosesNothing() throws {
        try restoreInPlace { backup in
            for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: north + suffix) }
            let copied = try Harness.run("/bin/cp", [backup, north])
            XCTAssertEqual(copied.status, 0, copied.stderr)
        }
    }

    func testABackupRestoredBySQLiteIsCaughtAndLosesNothing() throws {
        try restoreInPlace { backup in try h.sqlite(north, ".restore '\(backup)'") }
    }

    /// The restored file writes a bundle by hand (`export`, which no mailbox check sees) and
    /// a stick carries it to hub and hq: each then holds two different changes under north's
    /// numbers and says so, every sync, under -q too, with exit 0 (their data still
    /// converge), until its conflict log is cleared. Then north follows the fix, and every
    /// replica ends with what north wrote before and after the restore.
    func testAThirdReplicaHoldingTwoChangesUnderOneNumberSaysSo() throws {
        try twoChangesUnderOneNumber(rowAfterRestore: "n2")
    }

    /// The same when both changes wrote one row: the receivers are not stopped (a refusal
    /// would starve them of every bundle that relays the second), and agree on one value.
    func testTwoChangesToOneRowUnderOneNumberAreSaidNotRefused() throws {
        try twoChangesUnderOneNumber(rowAfterRestore: "n1")
    }

    /// Two receivers meet the two histories of north's numbers and hub's write in opposite
    /// orders: the restored file's write (a lower number, the latest clock) against the first
    /// file's (a higher number, an earlier clock) and hub's between. Both keep the same value:
    /// the latest clock's, as between any two replicas.
    func testTwoHistoriesOfOneNumberingMergeAlikeInAnyOrder() throws {
        let east = try h.cloneReplica(hq, as: "east")
        let backup = h.path("north-backup.db")
        try h.sqlite(north, ".backup '\(backup)'")
        try h.sqlite(north, "UPDATE items SET v = 'first-file-other' WHERE id = 'n2';")
        try h.sqlite(north, "UPDATE items SET v = 'first-file' WHERE id = 'n1';")
        let fromFirstFile = try h.export(north, as: "north")
        Thread.sleep(forTimeInterval: 0.01)
        try h.sqlite(hub, "UPDATE items SET v = 'hub' WHERE id = 'n1';")
        let fromHub = try h.export(hub, as: "hub")
        for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: north + suffix) }
        XCTAssertEqual(try Harness.run("/bin/cp", [backup, north]).status, 0)
        Thread.sleep(forTimeInterval: 0.01)
        try h.sqlite(north, "UPDATE items SET v = 'restored-file' WHERE id = 'n1';")
        let fromRestored = try h.export(north, as: "north")

        for bundle in [fromFirstFile, fromHub, fromRestored] { try h.ok(["import", hq, bundle], key: "hq") }
        for bundle in [fromRestored, fromHub, fromFirstFile] { try h.ok(["import", east, bundle], key: "east") }
        let atHQ = try items(hq)
        XCTAssertEqual(atHQ, try items(east))
        XCTAssertTrue(atHQ.contains("'n1'|'restored-file'"), atHQ)
    }

    private func twoChangesUnderOneNumber(rowAfterRestore row: String) throws {
        let backup = h.path("north-backup.db")
        try h.sqlite(north, ".backup '\(backup)'")
        try h.sqlite(north, "UPDATE items SET v = 'CHANGE-A' WHERE id = 'n1';")
        try rounds(2)
        for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: north + suffix) }
        XCTAssertEqual(try Harness.run("/bin/cp", [backup, north]).status, 0)
        try h.sqlite(north, "UPDATE items SET v = 'CHANGE-B' WHERE id = '\(row)';")

        let stick = try h.export(north, as: "north")
        let imported = try h.ok(["import", hub, stick], key: "hub")
        let sentence = "signed two different changes under the same numbers"
        XCTAssertTrue(imported.stderr.contains(sentence), imported.stderr)
        XCTAssertTrue(imported.stderr.contains("north ("), imported.stderr)
        XCTAssertTrue(imported.stderr.contains("sqsync reidentify"), imported.stderr)

        let hubSync = try h.sqsync(["sync", "-q", hub, box], key: "hub")
        XCTAssertEqual(hubSync.status, 0, hubSync.stderr)
        XCTAssertTrue(hubSync.stderr.contains(sentence), "every sync says it again: \(hubSync.stderr)")
        try h.ok(["import", hq, stick], key: "hq")
        let hqSync = try h.sqsync(["sync", hq, box, "--json"], key: "hq")
        XCTAssertEqual(hqSync.status, 0, hqSync.stderr)
        XCTAssertTrue(hqSync.stderr.contains(sentence), hqSync.stderr)
        XCTAssertEqual((h.json(hqSync)["numbered_twice"] as? [String])?.count, 1, hqSync.stdout)

        try h.ok(["conflicts", hq, "--clear"])
        let cleared = try h.syncOK(hq, as: "hq", box)
        XCTAssertFalse(cleared.stderr.contains(sentence), cleared.stderr)

        let caught = try h.sync(north, as: "north", box)
        XCTAssertNotEqual(caught.status, 0, caught.stderr)
        try h.ok(["reidentify", north], key: "north")
        try h.ok(["conflicts", north, "--clear"])
        try rounds(3)
        let expected = try items(hq)
        XCTAssertTrue(expected.contains("CHANGE-B"), expected)
        if row == "n2" { XCTAssertTrue(expected.contains("CHANGE-A"), expected) }
        for replica in replicas { XCTAssertEqual(try items(replica.db), expected, replica.name) }
    }
}
