import Foundation
import XCTest

/// A sync with nothing new reads a listing and what it cached, not every replica's files:
/// it rewrites no acknowledgement, and a file it already verified is not read again.
final class QuietSyncTests: XCTestCase {
    private var h: Harness!
    private var hq = "", site = "", box = ""

    override func setUpWithError() throws {
        h = try Harness()
        hq = try h.makeReplica("HQ", schema: "CREATE TABLE t(id TEXT PRIMARY KEY, v TEXT); INSERT INTO t VALUES ('1', 'one');")
        site = try h.cloneReplica(hq, as: "S1")
        box = h.path("stick")
        try FileManager.default.createDirectory(atPath: box, withIntermediateDirectories: true)
    }

    override func tearDown() { h = nil }

    /// Every file under the mailbox with its modification time.
    private func mailboxFiles() throws -> [String: Date] {
        var files: [String: Date] = [:]
        let root = box + "/sqsync"
        for case let path as String in FileManager.default.enumerator(atPath: root) ?? NSEnumerator() {
            let attributes = try FileManager.default.attributesOfItem(atPath: root + "/" + path)
            if attributes[.type] as? FileAttributeType == .typeRegular {
                files[path] = attributes[.modificationDate] as? Date
            }
        }
        return files
    }

    func testQuietSyncRewritesNothingAndTrustsWhatItVerified() throws {
        for _ in 0..<2 {
            try h.syncOK(hq, as: "HQ", box)
            try h.syncOK(site, as: "S1", box)
        }
        let settled = try mailboxFiles()
        XCTAssertTrue(settled.keys.contains { $0.hasPrefix("acks/") }, "\(settled)")
        try h.syncOK(site, as: "S1", box)
        try h.syncOK(hq, as: "HQ", box)
        XCTAssertEqual(try mailboxFiles(), settled, "a quiet sync leaves the mailbox as it was")

        // HQ's acknowledgement, once verified, is not read again: a file swapped in under the
        // same name changes nothing (a new acknowledgement always has a new name).
        let siteID = try h.knowledgeID(site)
        let hqAcks = settled.keys.filter { $0.hasPrefix("acks/") && !$0.contains(siteID) }
        XCTAssertEqual(hqAcks.count, 1, "\(settled)")
        try Data("junk".utf8).write(to: URL(fileURLWithPath: box + "/sqsync/" + hqAcks[0]))
        let quiet = try h.sync(site, as: "S1", box)
        XCTAssertEqual(quiet.status, 0, quiet.stderr)
        XCTAssertFalse(quiet.stderr.contains("ignored"), quiet.stderr)

        // A real change still travels, and the new acknowledgement is read.
        try h.sqlite(hq, "UPDATE t SET v = 'changed' WHERE id = '1';")
        try h.syncOK(hq, as: "HQ", box)
        try h.syncOK(site, as: "S1", box)
        XCTAssertEqual(try h.dump(site, table: "t", orderBy: "id"), try h.dump(hq, table: "t", orderBy: "id"))
        try h.syncOK(hq, as: "HQ", box)
        let status = try h.okJSON(["status", hq], key: "HQ")
        let peers = status["peers"] as? [[String: Any]] ?? []
        XCTAssertEqual(peers.first?["unacknowledged"] as? Int, 0, "\(status)")
    }
}
