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
            XCTAssertTrue(result.stderr.contains("waiting in \(box): 1 bundle held"), "run \(run): \(result.stderr)")
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
}
