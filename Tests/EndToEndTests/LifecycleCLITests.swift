import Foundation
import XCTest

/// Tombstones, `purge`, `peers retire` and stale replicas, through the built binary.
///
/// Four replicas: A (made) and B, C, D (cloned from A). After a first mesh exchange everyone
/// knows everyone; then A deletes rows and only B and C acknowledge, while D lags.
final class LifecycleCLITests: XCTestCase {
    private var h: Harness!
    private var a = "", b = "", c = "", d = ""
    private var replicas: [(db: String, name: String)] { [(a, "A"), (b, "B"), (c, "C"), (d, "D")] }

    private static let schema = """
        CREATE TABLE t(id TEXT PRIMARY KEY, v TEXT);
        INSERT INTO t VALUES ('r1', 'one'), ('r2', 'two'), ('r3', 'three'), ('r4', 'four'), ('r5', 'five');
        """

    override func setUpWithError() throws {
        h = try Harness()
        a = try h.makeReplica("A", schema: Self.schema)
        b = try h.cloneReplica(a, as: "B")
        c = try h.cloneReplica(a, as: "C")
        d = try h.cloneReplica(a, as: "D")
        try mesh()
    }

    override func tearDown() { h = nil }

    // MARK: helpers

    /// Every replica exports everything, then imports the other three bundles: all know all.
    private func mesh() throws {
        let bundles = try replicas.map { try h.export($0.db, as: $0.name) }
        for (i, target) in replicas.enumerated() {
            try h.ok(["import", target.db] + bundles.enumerated().filter { $0.offset != i }.map(\.element), key: target.name)
        }
    }

    /// A → peer, then peer → A, so A records that the peer holds A's latest changes. The peer
    /// answers straight after the import, with nothing of its own written in between.
    private func roundTrip(_ peer: (db: String, name: String), file: StaticString = #filePath, line: UInt = #line) throws {
        let out = try h.export(a, as: "A")
        try h.ok(["import", peer.db, out], key: peer.name, file: file, line: line)
        let back = try h.export(peer.db, as: peer.name)
        try h.ok(["import", a, back], key: "A", file: file, line: line)
    }

    private func count(_ db: String, _ sql: String) throws -> Int {
        Int(try h.sqlite(db, sql).trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    private func ids(_ db: String) throws -> [String] {
        try h.sqlite(db, "SELECT id FROM t ORDER BY id;").split(separator: "\n").map(String.init)
    }

    private func peerEntry(_ status: [String: Any], _ name: String) -> [String: Any]? {
        (status["peers"] as? [[String: Any]] ?? []).first { $0["name"] as? String == name }
    }

    // MARK: purge waits for every live peer; retire lets a lagging peer go

    /// Acknowledgements travel like changes (issue 54, item 6): A, B and D share one folder,
    /// B and C another. A deletes a row, which reaches C through B. C has no change to send,
    /// only its signed word in its folder; B carries that word (C's own signed statement) on
    /// to A's folder, as it would a change of C's, and A's purge waits on no one.
    func testAWordCrossesMailboxesWithoutAChangeAndPurgeWaitsOnNoOne() throws {
        let near = try h.folder("near"), far = try h.folder("far")
        let visits = [(a, "A", [near]), (b, "B", [near, far]), (c, "C", [far]), (d, "D", [near])]
        func round() throws { for (db, name, boxes) in visits { for box in boxes { try h.syncOK(db, as: name, box) } } }
        for _ in 0..<2 { try round() }
        try h.sqlite(a, "DELETE FROM t WHERE id = 'r2';")
        // C's word takes the path a change of C's would: C, then B from far to near, then A.
        for _ in 0..<4 { try round() }
        XCTAssertFalse(try ids(c).contains("r2"))
        // Its file names the statement's counter, fold and signature only: the knowledge is the file's.
        let cFolder = far + "/sqsync/acks/" + (try h.knowledgeID(c))
        let word = try FileManager.default.contentsOfDirectory(atPath: cFolder).sorted().last ?? ""
        let statementLine = try String(contentsOfFile: cFolder + "/" + word, encoding: .utf8)
            .split(separator: "\n").first { $0.hasPrefix("statement ") } ?? ""
        XCTAssertEqual(statementLine.split(separator: " ").count, 4, String(statementLine))
        let purge = try h.okJSON(["purge", a], key: "A")
        XCTAssertEqual(purge["held_back_by"] as? [String], [], "\(purge)")
        XCTAssertEqual(purge["tombstones_purged"] as? Int, 1, "\(purge)")

        // Then the chain goes quiet: no sync takes or leaves a bundle once every word is across.
        for _ in 0..<3 { try round() }
        for (db, name, boxes) in visits {
            for box in boxes {
                let report = try h.syncJSON(db, as: name, box)
                XCTAssertEqual(report["bundles_in"] as? Int, 0, "\(name) at \(box): \(report)")
                XCTAssertTrue(report["bundle_out"] is NSNull, "\(name) at \(box): \(report)")
            }
        }
    }

    func testPurgeKeepsTombstonesForLaggingPeerUntilItIsRetired() throws {
        try h.sqlite(a, "DELETE FROM t WHERE id IN ('r2', 'r3');")
        try roundTrip((b, "B"))
        try roundTrip((c, "C"))

        // D has not acknowledged the deletes: status names it, purge keeps them.
        var status = try h.okJSON(["status", a])
        XCTAssertEqual(status["tombstones"] as? Int, 2, "\(status)")
        XCTAssertGreaterThan(peerEntry(status, "D")?["tombstones_held_back"] as? Int ?? 0, 0, "D must hold back: \(status)")
        XCTAssertEqual(peerEntry(status, "B")?["tombstones_held_back"] as? Int, 0, "\(status)")
        XCTAssertEqual(peerEntry(status, "C")?["tombstones_held_back"] as? Int, 0, "\(status)")
        let human = try h.ok(["status", a])
        XCTAssertTrue(
            human.stdout.contains("held back by D") || human.stderr.contains("held back by D"), human.stdout + human.stderr)

        let metadataBefore = try count(a, #"SELECT count(*) FROM "_sqsync_rows";"#)
        let purge = try h.okJSON(["purge", a], key: "A")
        XCTAssertEqual(purge["tombstones_purged"] as? Int, 0, "\(purge)")
        XCTAssertEqual(purge["held_back_by"] as? [String], ["D"], "\(purge)")
        status = try h.okJSON(["status", a])
        XCTAssertEqual(status["tombstones"] as? Int, 2, "purge must keep what D lacks: \(status)")
        XCTAssertEqual(try count(a, #"SELECT count(*) FROM "_sqsync_rows";"#), metadataBefore)

        // The delete still reaches D through B, who never purged.
        XCTAssertEqual(try ids(d), ["r1", "r2", "r3", "r4", "r5"])
        try h.ok(["import", d, try h.export(b, as: "B")], key: "D")
        XCTAssertEqual(try ids(d), ["r1", "r4", "r5"], "B's bundle must still carry A's delete to D")

        // Retire D: nothing holds the deletes back any more.
        let retire = try h.okJSON(["peers", "retire", a, "D"], key: "A")
        XCTAssertEqual(retire["name"] as? String, "D", "\(retire)")
        let peers = try h.okJSON(["peers", a])["peers"] as? [[String: Any]] ?? []
        XCTAssertEqual(peers.first { $0["name"] as? String == "D" }?["retired"] as? Bool, true, "\(peers)")
        status = try h.okJSON(["status", a])
        XCTAssertEqual(
            peerEntry(status, "D")?["tombstones_held_back"] as? Int ?? 0, 0, "a retired peer holds nothing back: \(status)")

        // A dry run reports the two deletes and changes nothing.
        let beforeDry = try h.fullDump(a)
        let dry = try h.okJSON(["purge", a, "--dry-run"], key: "A")
        XCTAssertEqual(dry["dry_run"] as? Bool, true, "\(dry)")
        XCTAssertEqual(dry["tombstones_purged"] as? Int, 2, "\(dry)")
        XCTAssertEqual(dry["held_back_by"] as? [String], [], "\(dry)")
        XCTAssertEqual(try h.fullDump(a), beforeDry, "purge --dry-run must change nothing")
        XCTAssertEqual(try h.okJSON(["status", a])["tombstones"] as? Int, 2)

        let purged = try h.okJSON(["purge", a], key: "A")
        XCTAssertEqual(purged["tombstones_purged"] as? Int, 2, "\(purged)")
        XCTAssertEqual(purged["held_back_by"] as? [String], [], "\(purged)")
        XCTAssertEqual(try h.okJSON(["status", a])["tombstones"] as? Int, 0)
        // A purged deletion keeps its row's causal length and stamp (docs/MERGE_RULES.md, "Purge"),
        // and waits for no one.
        XCTAssertEqual(try count(a, #"SELECT count(*) FROM "_sqsync_rows" WHERE "cl" % 2 = 0 AND "cells" IS NULL;"#), 0)
        XCTAssertEqual(try count(a, #"SELECT count(*) FROM "_sqsync_rows" WHERE "cl" % 2 = 0 AND "cells" = x'';"#), 2)
        XCTAssertEqual(try count(a, #"SELECT count(*) FROM "_sqsync_rows";"#), metadataBefore, "no entry is lost")
        XCTAssertEqual(try ids(a), ["r1", "r4", "r5"])

        // A second purge finds nothing to do.
        XCTAssertEqual(try h.okJSON(["purge", a], key: "A")["tombstones_purged"] as? Int, 0)

        // D's bundles are refused now, and A stays as it was.
        try h.sqlite(d, "INSERT INTO t VALUES ('d1', 'from D');")
        let fromD = try h.export(d, as: "D")
        let beforeRefusal = try h.fullDump(a)
        let refused = try h.sqsync(["import", a, fromD], key: "A")
        XCTAssertEqual(refused.status, 1, "a retired peer's bundle must be refused: \(refused.stderr)")
        XCTAssertTrue(refused.stderr.contains("retired"), refused.stderr)
        XCTAssertTrue(refused.stderr.contains("sqsync clone"), "the message must say how to recover: \(refused.stderr)")
        XCTAssertEqual(try h.fullDump(a), beforeRefusal, "a refused import must change nothing")

        // Live peers still take A's bundles after the purge.
        try h.sqlite(a, "INSERT INTO t VALUES ('r6', 'six');")
        try h.ok(["import", b, try h.export(a, as: "A")], key: "B")
        XCTAssertEqual(try ids(b), ["r1", "r4", "r5", "r6"])
    }

    func testRetireByKnowledgeIDAndUnknownPeer() throws {
        let idD = try h.knowledgeID(d)
        let retire = try h.okJSON(["peers", "retire", a, idD], key: "A")
        XCTAssertEqual(retire["retired"] as? String, idD, "\(retire)")
        let peers = try h.okJSON(["peers", a])["peers"] as? [[String: Any]] ?? []
        XCTAssertEqual(peers.first { $0["knowledge_id"] as? String == idD }?["retired"] as? Bool, true, "\(peers)")

        let before = try h.fullDump(a)
        let unknown = try h.sqsync(["peers", "retire", a, "nobody"], key: "A")
        XCTAssertNotEqual(unknown.status, 0)
        XCTAssertTrue(unknown.stderr.contains("nobody"), unknown.stderr)
        XCTAssertEqual(try h.fullDump(a), before)
    }

    // MARK: a replica older than what was purged is refused or fixed, never silently merged

    func testStaleCloneIsNotSilentlyMergedAfterPurge() throws {
        // C2 is cloned from C before A's delete reaches C: it still holds r2 and r3.
        let c2 = try h.cloneReplica(c, as: "C2")
        try h.sqlite(a, "DELETE FROM t WHERE id IN ('r2', 'r3');")
        for peer in [(b, "B"), (c, "C"), (d, "D")] { try roundTrip(peer) }
        // C's purges wait for its clone; A heard of C2 only in C's bundles (C2 never signed
        // anything A saw), so A's do not (docs/SCOPES.md, "Purge"), and C2 is now older than
        // what A purged.
        let held = try h.okJSON(["purge", c], key: "C")
        XCTAssertEqual(held["tombstones_purged"] as? Int, 0, "\(held)")
        XCTAssertTrue((held["held_back_by"] as? [String] ?? []).contains("C2"), "\(held)")
        let purged = try h.okJSON(["purge", a], key: "A")
        XCTAssertEqual(purged["tombstones_purged"] as? Int, 2, "\(purged)")
        XCTAssertEqual(purged["held_back_by"] as? [String], [], "\(purged)")
        XCTAssertEqual(try ids(c2), ["r1", "r2", "r3", "r4", "r5"])

        let bundle = try h.export(a, as: "A")
        let before = try h.fullDump(c2)
        let result = try h.sqsync(["import", c2, bundle], key: "C2")
        if result.status == 0 {
            XCTAssertEqual(try ids(c2), ["r1", "r4", "r5"], "C2 kept rows A deleted and purged: \(result.stderr)")
        } else {
            XCTAssertEqual(result.status, 1, result.stderr)
            XCTAssertTrue(result.stderr.contains("clone"), "the refusal must say to re-clone: \(result.stderr)")
            XCTAssertEqual(result.stderrLines.count, 1, result.stderr)
            XCTAssertEqual(try h.fullDump(c2), before, "a refused import must change nothing")
        }

        // The other direction: C2's bundle still carries r2 and r3 alive, and A has forgotten
        // that it deleted them. It must be refused (or at least not bring them back).
        let fromC2 = try h.export(c2, as: "C2")
        let beforeA = try h.fullDump(a)
        let back = try h.sqsync(["import", a, fromC2], key: "A")
        if back.status == 0 {
            XCTAssertEqual(
                try ids(a), ["r1", "r4", "r5"], "a stale replica's bundle brought purged rows back to life: \(back.stderr)")
        } else {
            XCTAssertEqual(back.status, 1, back.stderr)
            XCTAssertTrue(back.stderr.contains("clone"), "the refusal must say to re-clone: \(back.stderr)")
            XCTAssertEqual(try h.fullDump(a), beforeA, "a refused import must change nothing")
        }

        // The recovery the message names works: a fresh clone of a current replica (B, which
        // still knows the deletes), then A's bundle applies.
        let fresh = h.path("C3.db")
        try h.makeKey("C3")
        try h.ok(["clone", b, fresh, "--name", "C3"])
        XCTAssertEqual(try ids(fresh), ["r1", "r4", "r5"])
        try h.ok(["import", fresh, try h.export(a, as: "A")], key: "C3")
        XCTAssertEqual(try ids(fresh), ["r1", "r4", "r5"])
    }

    func testPurgeWithNothingDeletedAndDryRunChangeNothing() throws {
        let before = try h.fullDump(a)
        let dry = try h.okJSON(["purge", a, "--dry-run"], key: "A")
        XCTAssertEqual(dry["tombstones_purged"] as? Int, 0, "\(dry)")
        XCTAssertEqual(try h.fullDump(a), before)
        let human = try h.ok(["purge", a, "--dry-run"], key: "A")
        XCTAssertTrue(human.stderr.contains("would purge 0") || human.stdout.contains("would purge 0"), human.stderr)
        XCTAssertEqual(try h.fullDump(a), before)

        try h.sqlite(a, "DELETE FROM t WHERE id = 'r5';")
        // Any command numbers the shell's pending change first (status does too); compare after that.
        _ = try h.okJSON(["status", a])
        let beforeDry = try h.fullDump(a)
        let lagging = try h.okJSON(["purge", a, "--dry-run"], key: "A")
        XCTAssertEqual(lagging["tombstones_purged"] as? Int, 0, "no peer has acknowledged yet: \(lagging)")
        XCTAssertEqual(Set(lagging["held_back_by"] as? [String] ?? []), ["B", "C", "D"], "\(lagging)")
        XCTAssertEqual(try h.fullDump(a), beforeDry)
    }

    // MARK: answering right after an import

    /// B imports A's bundle and answers straight away, with nothing of its own written in
    /// between (the usual `sync` round). B's clock moved forward on the import while its
    /// sequence number did not; that is one replica behaving normally, not a copy.
    func testAnswerWithoutLocalWriteIsNotMistakenForACopy() throws {
        try h.sqlite(a, "DELETE FROM t WHERE id = 'r2';")
        try h.ok(["import", b, try h.export(a, as: "A")], key: "B")
        let answer = try h.export(b, as: "B")
        let before = try h.fullDump(a)
        let result = try h.sqsync(["import", a, answer], key: "A")
        XCTAssertEqual(result.status, 0, "B's answer must be accepted: \(result.stderr)")
        if result.status == 0 {
            let status = try h.okJSON(["status", a])
            XCTAssertEqual(peerEntry(status, "B")?["tombstones_held_back"] as? Int, 0, "B acknowledged the delete: \(status)")
        } else {
            XCTAssertEqual(try h.fullDump(a), before)
        }
    }
}
