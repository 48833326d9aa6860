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
}
