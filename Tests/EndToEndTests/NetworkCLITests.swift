import Foundation
import TestSupport
import XCTest

/// Every change reaches every replica through any chain of meetings, whenever they met first
/// (docs/BUNDLE_FORMAT.md, "What a relay keeps"): the cases a user met, each with the built
/// binary, replicas that each have their own key, and folder mailboxes.
final class NetworkCLITests: XCTestCase {
    private var h: Harness!

    private static let schema = "CREATE TABLE notes(id TEXT PRIMARY KEY, body TEXT);"

    override func setUpWithError() throws { h = try Harness() }
    override func tearDown() { h = nil }

    private func notes(_ db: String) throws -> String { try h.dump(db, table: "notes", orderBy: "id") }

    /// A replica made with `init --create` on its own, with the schema and rows of its own.
    private func newSite(_ name: String, rows: String = "") throws -> String {
        try h.makeReplica(name, schema: Self.schema + rows)
    }

    // MARK: 1 and 2: first contact, and the origin one hop further

    func testAChangeReachesAReplicaItsRelayMetOnlyAfterwardAndOneBehindThat() throws {
        let a = try newSite("A", rows: "INSERT INTO notes VALUES ('a0', 'A seed');")
        // Each made apart, as field sites are: no copy of anyone's data.
        let b = try newSite("B"), c = try newSite("C"), d = try newSite("D")
        let ab = try h.folder("AB"), bc = try h.folder("BC"), cd = try h.folder("CD")
        try h.sqlite(a, "INSERT INTO notes VALUES ('a1', 'from A');")
        try h.syncOK(a, as: "A", ab)
        try h.syncOK(b, as: "B", ab)
        // B meets C for the first time, after it took a1.
        try h.syncOK(b, as: "B", bc)
        try h.syncOK(c, as: "C", bc)
        XCTAssertEqual(try notes(c), try notes(a), "C has a1, which B took from A before it met C")
        // A writes again once everyone has met; D is one hop behind C.
        try h.sqlite(a, "INSERT INTO notes VALUES ('a2', 'from A, later');")
        for _ in 0..<3 {
            try h.syncOK(a, as: "A", ab)
            try h.syncOK(b, as: "B", ab)
            try h.syncOK(b, as: "B", bc)
            try h.syncOK(c, as: "C", bc)
            try h.syncOK(c, as: "C", cd)
            try h.syncOK(d, as: "D", cd)
        }
        for db in [b, c, d] { XCTAssertEqual(try notes(db), try notes(a)) }
        let status = try h.okJSON(["status", d, "--json"], key: "D")
        XCTAssertEqual((status["gaps"] as? [Any])?.count, 0, "D lacks nothing of A's")
        XCTAssertEqual(
            (status["knowledge"] as? [String: Any])?[try h.knowledgeID(a)] as? Int,
            (try h.okJSON(["status", a, "--json"], key: "A")["knowledge"] as? [String: Any])?[try h.knowledgeID(a)] as? Int,
            "D's knowledge of A is all of A's changes")
        // Nothing sits in BC for ever: each outbox keeps one bundle at most.
        for folder in [ab, bc, cd] {
            let outboxes = filesBelow(folder + "/sqsync/outbox").filter { $0.hasSuffix(".sqsb") }
            let perSender = Dictionary(grouping: outboxes) { ($0 as NSString).deletingLastPathComponent }
            XCTAssertTrue(perSender.values.allSatisfy { $0.count <= 1 }, "\(folder): \(outboxes)")
        }
    }

    // MARK: 3: a new site made with init

    func testANewSiteMadeWithInitGetsWhatItsOnlyPeerRelays() throws {
        let a = try newSite("A", rows: "INSERT INTO notes VALUES ('a1', 'A');")
        let b = try h.cloneReplica(a, as: "B")
        let ab = try h.folder("AB"), an = try h.folder("AN")
        try h.sqlite(b, "INSERT INTO notes VALUES ('b1', 'B');")
        for _ in 0..<2 {
            try h.syncOK(a, as: "A", ab)
            try h.syncOK(b, as: "B", ab)
        }
        let n = try newSite("N", rows: "INSERT INTO notes VALUES ('n1', 'N'), ('n2', 'N');")
        try h.sqlite(b, "UPDATE notes SET body = 'B, later' WHERE id = 'b1';")
        for _ in 0..<3 {
            try h.syncOK(b, as: "B", ab)
            try h.syncOK(a, as: "A", ab)
            try h.syncOK(a, as: "A", an)
            try h.syncOK(n, as: "N", an)
        }
        try h.syncOK(a, as: "A", an)
        try h.syncOK(a, as: "A", ab)
        try h.syncOK(b, as: "B", ab)
        XCTAssertEqual(try notes(n), try notes(a), "N has b1 and B's update of it, through A")
        XCTAssertEqual(try notes(b), try notes(a), "B has N's rows, through A")
        XCTAssertTrue(try notes(n).contains("'B, later'"))
    }

    // MARK: 4: after a purge

    func testAReplicaThatJoinsAfterAPurgeGetsEverythingAndLosesARowTheNetworkDeleted() throws {
        let a = try newSite("A", rows: "INSERT INTO notes VALUES ('keep', 'A'), ('gone', 'A');")
        let b = try h.cloneReplica(a, as: "B")
        let ab = try h.folder("AB"), bj = try h.folder("BJ")
        try h.sqlite(a, "DELETE FROM notes WHERE id = 'gone'; INSERT INTO notes VALUES ('a2', 'A');")
        for _ in 0..<3 {
            try h.syncOK(a, as: "A", ab)
            try h.syncOK(b, as: "B", ab)
        }
        let purged = try h.okJSON(["purge", a, "--json"], key: "A")
        XCTAssertEqual(purged["tombstones_purged"] as? Int, 1, "\(purged)")
        XCTAssertEqual(try h.okJSON(["purge", b, "--json"], key: "B")["tombstones_purged"] as? Int, 1)
        // J was made apart, from rows that still hold the one the network deleted.
        let j = try newSite("J", rows: "INSERT INTO notes VALUES ('gone', 'A'), ('j1', 'J');")
        for _ in 0..<3 {
            try h.syncOK(b, as: "B", bj)
            try h.syncOK(j, as: "J", bj)
            try h.syncOK(b, as: "B", ab)
            try h.syncOK(a, as: "A", ab)
        }
        XCTAssertEqual(try notes(j), try notes(a), "J holds what the network holds")
        XCTAssertEqual(try notes(b), try notes(a))
        XCTAssertFalse(try notes(j).contains("'gone'"), "the row the network deleted and purged is removed at J too")
        XCTAssertTrue(try notes(a).contains("'j1'"), "J's own row reaches A through B")
    }

    // MARK: 6: purges in a quiet network

    func testEveryReplicaPurgesOnceAQuietNetworkAcknowledgedADeletion() throws {
        let a = try newSite("A", rows: "INSERT INTO notes VALUES ('x', 'A'), ('y', 'A');")
        let b = try h.cloneReplica(a, as: "B"), c = try h.cloneReplica(a, as: "C")
        let shared = try h.folder("shared")
        for (db, name) in [(a, "A"), (b, "B"), (c, "C")] { try h.syncOK(db, as: name, shared) }
        try h.sqlite(a, "DELETE FROM notes WHERE id = 'x';")
        for _ in 0..<3 {
            for (db, name) in [(a, "A"), (b, "B"), (c, "C")] { try h.syncOK(db, as: name, shared) }
        }
        for (db, name) in [(a, "A"), (b, "B"), (c, "C")] {
            let purge = try h.okJSON(["purge", db, "--json"], key: name)
            XCTAssertEqual(purge["held_back_by"] as? [String], [], "\(name): \(purge)")
            XCTAssertEqual(purge["tombstones_purged"] as? Int, 1, "\(name): \(purge)")
        }
    }

    // MARK: Gaps are said, and heal

    func testAReplicaThatHoldsLaterChangesButNotEarlierOnesSaysSoAndHeals() throws {
        let a = try newSite("A", rows: "INSERT INTO notes VALUES ('a0', 'A');")
        let c = try h.cloneReplica(a, as: "C")
        let aID = try h.knowledgeID(a)
        let seq = try h.clock(a).seq
        try h.sqlite(a, "INSERT INTO notes VALUES ('a1', 'A');")
        try h.sqlite(a, "INSERT INTO notes VALUES ('a2', 'A');")
        let now = try h.clock(a).seq
        // Only A's last change reaches C, by hand: C lacks the one before it.
        let later = try h.export(a, as: "A", extra: ["--since", "\(aID):\(now - 1)", "--no-encrypt"])
        try h.ok(["import", c, later], key: "C")
        let status = try h.okJSON(["status", c, "--json"], key: "C")
        let gaps = try XCTUnwrap(status["gaps"] as? [[String: Any]])
        XCTAssertEqual(gaps.count, 1, "\(status)")
        XCTAssertEqual(gaps.first?["origin"] as? String, aID)
        XCTAssertEqual(gaps.first?["missing_from"] as? Int, Int(seq) + 1)
        XCTAssertEqual(gaps.first?["missing_through"] as? Int, Int(now) - 1)
        XCTAssertTrue(try h.ok(["status", c], key: "C").stdout.contains("lacks the changes of A"))
        // The next meeting with A heals it, and the sync says nothing is missing any more.
        let ac = try h.folder("AC")
        try h.syncOK(c, as: "C", ac)
        try h.syncOK(a, as: "A", ac)
        let report = try h.syncJSON(c, as: "C", ac)
        XCTAssertEqual((report["gaps"] as? [Any])?.count, 0, "\(report)")
        XCTAssertEqual(try notes(c), try notes(a))
    }
}
