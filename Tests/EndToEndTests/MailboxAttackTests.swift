import Bundle
import Foundation
import TestSupport
import XCTest

/// Files planted in a shared folder mailbox by someone who holds one stolen trusted key (C's):
/// none stops a healthy replica, none blames the wrong one, each is named (docs/KEYS.md,
/// "Attacker model"). Bundles are written by hand (``HandBundle``).
final class MailboxAttackTests: XCTestCase {
    private var h: Harness!
    private var keys: [String: HandKey] = [:]
    private var a = "", b = "", c = "", box = ""

    private static let schema = "CREATE TABLE t(id TEXT PRIMARY KEY, v TEXT); INSERT INTO t VALUES ('r1', 'one');"

    override func setUpWithError() throws {
        h = try Harness()
        keys = try h.keyBoundReplicas(["A", "B", "C"], schema: Self.schema)
        (a, b, c) = (h.path("A.db"), h.path("B.db"), h.path("C.db"))
        box = h.path("shared")
        try FileManager.default.createDirectory(atPath: box, withIntermediateDirectories: true)
    }

    override func tearDown() { h = nil }

    private func rows(_ db: String) throws -> String { try h.dump(db, table: "t", orderBy: "id") }
    private func id(_ name: String) -> String { keys[name]!.replicaID }

    /// Issue 55, item 2, with the built binary: past one direct recipient (as past a few dozen
    /// readers), bundles go to a readers' key. C's stolen key plants, before A made one, a key
    /// for exactly {A, B, C} whose stanza for B wraps another key (a file written by hand). A
    /// takes it (it can check only its own stanza); B's sync cannot open it, says what waits
    /// and names the key in its signed acknowledgement; A's next sync leaves it; B's next reads.
    func testAReadersKeyPoisonedForOneReaderCostsItOneRound() throws {
        for _ in 0..<2 { for (db, name) in [(a, "A"), (b, "B"), (c, "C")] { try h.syncOK(db, as: name, box) } }
        let signing = try ["A", "B", "C"].map { try SigningKey.load(path: h.keyPath($0)) }
        let planted = try PoisonedReadersKey.plant(
            readers: signing, maker: signing[2], victim: signing[1], inMailbox: box, scratch: h.path("."))
        let manyReaders = ["SQSYNC_MAX_DIRECT_RECIPIENTS": "1"]
        func sync(_ db: String, _ name: String) throws -> ProcessResult {
            try h.sqsync(["sync", db, box], key: name, environment: manyReaders)
        }
        func keyOfBundle(_ name: String) throws -> String? {
            let outbox = box + "/sqsync/outbox/" + id(name)
            let files = try FileManager.default.contentsOfDirectory(atPath: outbox).filter { $0.hasSuffix(".sqsb") }
            return files.compactMap { AgeFile.readersKeyName(ofFile: outbox + "/" + $0) }.first
        }

        try h.sqlite(a, "INSERT INTO t VALUES ('a1', 'after the plant');")
        XCTAssertEqual(try sync(a, "A").status, 0)
        XCTAssertEqual(try keyOfBundle("A"), planted, "A took the planted key: it cannot check B's stanza")
        let starved = try sync(b, "B")
        XCTAssertEqual(starved.status, 0, starved.stderr)
        XCTAssertTrue(starved.stderr.contains("waiting: 1 bundle for a readers' key"), starved.stderr)
        XCTAssertFalse(try rows(b).contains("after the plant"))
        let word = try FileManager.default.contentsOfDirectory(atPath: box + "/sqsync/acks/" + id("B")).sorted().last ?? ""
        let said = try String(contentsOfFile: box + "/sqsync/acks/\(id("B"))/\(word)", encoding: .utf8)
        XCTAssertTrue(said.contains("unopened \(planted)"), said)

        XCTAssertEqual(try sync(a, "A").status, 0)
        XCTAssertNotEqual(try keyOfBundle("A"), planted, "A left the key B said it cannot open")
        let fed = try sync(b, "B")
        XCTAssertEqual(fed.status, 0, fed.stderr)
        XCTAssertFalse(fed.stderr.contains("waiting"), fed.stderr)
        XCTAssertTrue(try rows(b).contains("after the plant"))
    }

    /// A bundle that claims to be A's, signed by C's key, planted in A's own outbox: B, which
    /// reads it first, refuses it naming the file and blaming C's key, not A; A removes it
    /// with a warning (it is not A's), is not told it is a copy, and still leaves its bundle.
    func testABundlePlantedInAReplicasOwnOutboxStopsNothing() throws {
        for (db, name) in [(a, "A"), (b, "B")] { try h.syncOK(db, as: name, box) }
        let known = try h.clock(a)
        var planted = HandBundle(
            sites: [HandSite(id: id("A"), name: "A", knowledge: known.seq + 5)], senderSeq: known.seq + 5,
            senderHLC: known.hlc + 5, signer: keys["C"]!)
        planted.identities = [(0, keys["C"]!.identity)]
        let name = "\(id("A"))_\(known.seq + 1)-\(known.seq + 5)_0badf00d.sqsb"
        try planted.write(to: box + "/sqsync/outbox/\(id("A"))/\(name)")

        let atB = try h.sync(b, as: "B", box)
        XCTAssertEqual(atB.status, 3, atB.stderr)
        XCTAssertEqual(atB.stderrLines.filter { $0.contains(name) }.count, 1, atB.stderr)
        XCTAssertTrue(atB.stderr.contains(name) && atB.stderr.contains("forgery"), atB.stderr)

        try h.sqlite(a, "INSERT INTO t VALUES ('a-after', 'genuine');")
        let fromA = try h.syncOK(a, as: "A", box, ["--json"])
        XCTAssertTrue(fromA.stderr.contains(name) && fromA.stderr.contains("removed"), fromA.stderr)
        XCTAssertFalse(fromA.stderr.contains("copy"), "A must not be told it is a copy: \(fromA.stderr)")
        XCTAssertNotNil(h.json(fromA)["bundle_out"] as? String, "A still leaves its bundle: \(fromA.stdout)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: box + "/sqsync/outbox/\(id("A"))/\(name)"))

        try h.syncOK(b, as: "B", box)
        XCTAssertTrue(try rows(b).contains("a-after"), "B takes A's genuine bundle")
    }

    /// A damaged file planted in C's outbox costs B one look: the first sync refuses it (exit
    /// 3, naming it), later ones leave it unread and count it (exit 0, listed by `--json`),
    /// until it changes; no scratch file outlives a sync.
    func testAPlantedFileCostsOneLook() throws {
        try h.syncOK(b, as: "B", box)
        let outbox = box + "/sqsync/outbox/\(id("C"))"
        try FileManager.default.createDirectory(atPath: outbox, withIntermediateDirectories: true)
        let name = "\(id("C"))_1-1_0badf00d.sqsb"
        try Data(repeating: 0x5a, count: 300).write(to: URL(fileURLWithPath: outbox + "/" + name))

        let first = try h.sync(b, as: "B", box)
        XCTAssertEqual(first.status, 3, first.stderr)
        XCTAssertTrue(first.stderr.contains(name), first.stderr)
        let second = try h.syncOK(b, as: "B", box)
        XCTAssertTrue(second.stderr.contains("1 file refused before left unread"), second.stderr)
        XCTAssertFalse(second.stderr.contains(name), second.stderr)
        try h.sqlite(a, "INSERT INTO t VALUES ('a2', 'news');")
        XCTAssertEqual(try h.sync(a, as: "A", box).status, 3, "A's own first look")
        let third = try h.syncOK(b, as: "B", box, ["--json"])
        XCTAssertFalse(third.stderr.contains(name), third.stderr)
        XCTAssertEqual(h.json(third)["refused_before"] as? [String], ["sqsync/outbox/\(id("C"))/\(name)"], third.stdout)
        XCTAssertTrue(try rows(b).contains("a2"))

        try Data(repeating: 0x5b, count: 400).write(to: URL(fileURLWithPath: outbox + "/" + name))
        let changed = try h.sync(b, as: "B", box)
        XCTAssertEqual(changed.status, 3, "a changed file is read again: \(changed.stderr)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: h.path(".B.db-sqsync-tmp")), "no scratch file outlives a sync")
    }

    /// An old genuine bundle of A's, dropped back into the mailbox after its deletion was
    /// purged everywhere, is "nothing new" with a note: exit 0, the row stays deleted.
    func testAReplayedOldBundleIsNothingNew() throws {
        try h.sqlite(a, "INSERT INTO t VALUES ('doomed', 'x');")
        try h.syncOK(a, as: "A", box)
        let outbox = box + "/sqsync/outbox/\(id("A"))"
        let old = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: outbox).first)
        let saved = h.path("old.sqsb")
        try FileManager.default.copyItem(atPath: outbox + "/" + old, toPath: saved)
        try h.syncOK(b, as: "B", box)
        try h.sqlite(a, "DELETE FROM t WHERE id = 'doomed';")
        for _ in 0..<3 {
            for (db, name) in [(a, "A"), (b, "B")] { try h.syncOK(db, as: name, box) }
        }
        for (db, name) in [(a, "A"), (b, "B")] {
            try h.ok(["peers", "retire", db, "C"], key: name)  // C never syncs here; purges wait for no one
            try h.ok(["purge", db], key: name)
        }
        XCTAssertEqual(try h.okJSON(["status", b, "--json"], key: "B")["tombstones"] as? Int, 0, "the tombstone is purged")

        let replayed = "\(id("A"))_1-1_01d0b0d1.sqsb"
        try FileManager.default.copyItem(atPath: saved, toPath: outbox + "/" + replayed)
        let result = try h.syncOK(b, as: "B", box, ["--json"])
        XCTAssertTrue(result.stderr.contains("nothing new"), result.stderr)
        XCTAssertEqual((h.json(result)["notes"] as? [String])?.count, 1, result.stdout)
        XCTAssertFalse(try rows(b).contains("doomed"))
        try h.syncOK(a, as: "A", box)
    }

    /// A bundle for a table B lacks is held, and every sync says so, with the reason.
    func testAHeldBundleIsNamedAtEverySync() throws {
        try h.sqlite(a, "CREATE TABLE extra(id TEXT PRIMARY KEY, v TEXT); INSERT INTO extra VALUES ('e1', 'new table');")
        try h.ok(["track", a, "extra"])
        try h.syncOK(a, as: "A", box)
        for _ in 0..<2 {
            let result = try h.syncOK(b, as: "B", box, ["--json"])
            XCTAssertTrue(result.stderr.contains("held:") && result.stderr.contains("extra"), result.stderr)
            XCTAssertEqual((h.json(result)["held_bundles"] as? [[String: Any]])?.count, 1, result.stdout)
        }
    }
}
