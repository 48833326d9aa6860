import Foundation
import TestSupport
import XCTest

/// Attacks on origin-signed changes (docs/KEYS.md, "Attacker model"), each with a bundle
/// written by hand (``HandBundle``), never through sqsync's exporter: three replicas A, B and
/// C whose knowledge IDs were made from their keys, all trusted, one of whose keys (C's) is
/// in an attacker's hands. Every attack is refused or harmless, and afterwards the honest
/// replicas still converge with every genuine change.
final class OriginSignatureTests: XCTestCase {
    private var h: Harness!
    private var keys: [String: HandKey] = [:]
    private var a = "", b = "", c = ""

    private static let schema = "CREATE TABLE t(id TEXT PRIMARY KEY, v TEXT); INSERT INTO t VALUES ('r1', 'one'), ('r2', 'two');"
    private static let table = ("t", ["id", "v"], [0])

    override func setUpWithError() throws {
        h = try Harness()
        keys = try h.keyBoundReplicas(["A", "B", "C"], schema: Self.schema)
        (a, b, c) = (h.path("A.db"), h.path("B.db"), h.path("C.db"))
    }

    override func tearDown() { h = nil }

    // MARK: helpers

    private func id(_ name: String) -> String { keys[name]!.replicaID }

    private func knowledge(_ db: String) throws -> [String: Int] {
        try h.okJSON(["status", db])["knowledge"] as? [String: Int] ?? [:]
    }

    private func rows(_ db: String) throws -> String { try h.dump(db, table: "t", orderBy: "id") }

    /// A bundle C's stolen key signs as C, listing A, B and C, carrying `segments`.
    private func fromC(_ segments: [HandSegment], claimingOfA claimedA: Int64 = 0) throws -> HandBundle {
        let clockC = try h.clock(c)
        var bundle = HandBundle(
            sites: [
                HandSite(id: id("C"), name: "C", knowledge: clockC.seq), HandSite(id: id("A"), name: "A", knowledge: claimedA),
                HandSite(id: id("B"), name: "B", knowledge: 0),
            ],
            senderSeq: clockC.seq, senderHLC: clockC.hlc, signer: keys["C"]!)
        bundle.identities = [(0, keys["C"]!.identity)]
        bundle.segments = segments
        return bundle
    }

    /// Imports a hand-written bundle into `db`: it must be refused (exit 3) naming `words`,
    /// and change nothing.
    private func assertRefused(
        _ bundle: HandBundle, by db: String, as name: String, naming words: [String], file: StaticString = #filePath,
        line: UInt = #line
    ) throws {
        let path = h.path("hand-\(UUID().uuidString.prefix(6)).sqsb")
        try bundle.write(to: path)
        let before = try h.fullDump(db)
        let result = try h.sqsync(["import", db, path], key: name)
        XCTAssertEqual(result.status, 3, result.stderr, file: file, line: line)
        XCTAssertEqual(result.stderrLines.count, 1, result.stderr, file: file, line: line)
        for word in words {
            XCTAssertTrue(result.stderr.contains(word), "should name \(word): \(result.stderr)", file: file, line: line)
        }
        XCTAssertEqual(try h.fullDump(db), before, "a refused bundle changes nothing", file: file, line: line)
    }

    /// Genuine exchanges, A → B → C → B → A, after which all three hold the same rows.
    private func assertHonestReplicasConverge(file: StaticString = #filePath, line: UInt = #line) throws {
        try h.sqlite(a, "INSERT INTO t VALUES ('genuine-a', 'from A');")
        try h.sqlite(c, "INSERT INTO t VALUES ('genuine-c', 'from C');")
        for (from, to) in [(a, b), (b, c), (c, b), (b, a), (a, b)] {
            let name = from == a ? "A" : from == b ? "B" : "C"
            let toName = to == a ? "A" : to == b ? "B" : "C"
            let bundle = try h.export(from, as: name)
            try h.ok(["import", to, bundle], key: toName, file: file, line: line)
        }
        let expected = try rows(a)
        XCTAssertTrue(expected.contains("genuine-a") && expected.contains("genuine-c"), expected, file: file, line: line)
        XCTAssertEqual(try rows(b), expected, file: file, line: line)
        XCTAssertEqual(try rows(c), expected, file: file, line: line)
        XCTAssertFalse(expected.contains("forged"), expected, file: file, line: line)
    }

    /// A moves to a new key and B learns of the move from A's next bundle. Returns the new
    /// key's file.
    private func rotateA() throws -> String {
        let newKey = h.path("A-new.key")
        try h.ok(["keygen", "--rotate", a, "--out", newKey, "--name", "A"], key: "A")
        let rotated = h.path("rotated.sqsb")
        try h.ok(["export", a, "-o", rotated, "--key", newKey])
        try h.ok(["import", b, rotated], key: "B")
        return newKey
    }

    // MARK: identity

    /// HQ clones for a site from the site's public key alone: the clone's ID is made from
    /// that key, the site signs with its private half, and C's key cannot speak for it.
    func testCloneFromAPublicKeyBindsTheNewReplicaToIt() throws {
        keys["D"] = try h.handKey("D")
        let publicFile = h.path("D.pub")
        try (keys["D"]!.openSSHLine + " D\n").write(toFile: publicFile, atomically: true, encoding: .utf8)
        let d = h.path("D.db")
        let cloned = try h.okJSON(["clone", a, d, "--name", "D", "--key", publicFile])
        XCTAssertEqual(cloned["knowledge_id"] as? String, id("D"))
        XCTAssertEqual(cloned["key_bound"] as? Bool, true)
        try h.sqlite(d, "INSERT INTO t VALUES ('from-d', 'D');")
        try h.send((d, "D"), to: (b, "B"))
        XCTAssertTrue(try rows(b).contains("from-d"))

        let refused = try h.sqsync(["export", d, "-o", h.path("d-by-c.sqsb")], key: "C")
        XCTAssertEqual(refused.status, 1, refused.stderr)
        XCTAssertTrue(refused.stderr.contains("signs with key \(keys["D"]!.fingerprint)"), refused.stderr)
    }

    // MARK: a causal length at the top

    /// A trusted key (M, stolen) deletes r1 at causal length 2^62, the top; B's app then
    /// inserts r1 again. There is no life above the top: B's fold undoes the insert and says
    /// so, and after three rounds A, B and C hold the same rows, r1 deleted everywhere.
    func testACausalLengthAtTheTopSettlesEveryReplicaOnOneLife() throws {
        keys["M"] = try h.handKey("M")
        let clockA = try h.clock(a)
        var bundle = HandBundle(
            sites: [HandSite(id: id("M"), name: "M", knowledge: 1)], senderSeq: 1, senderHLC: clockA.hlc, signer: keys["M"]!)
        bundle.identities = [(0, keys["M"]!.identity)]
        var top = HandSegment(
            origin: id("M"), base: 0, last: 1, created: clockA.hlc, tables: [Self.table],
            records: [
                HandRecord(key: [.text("r1")], causalLength: 1 << 62, rowStamp: HandStamp(hlc: clockA.hlc, seq: 1), columns: [])
            ], signer: keys["M"]!)
        top.originName = "M"
        bundle.segments = [top]
        let path = h.path("top.sqsb")
        try bundle.write(to: path)
        for (db, name) in [(a, "A"), (b, "B")] { try h.ok(["import", db, path], key: name) }
        XCTAssertFalse(try rows(b).contains("'r1'"))

        try h.sqlite(b, "INSERT INTO t VALUES ('r1', 'again, from B'); INSERT INTO t VALUES ('r3', 'three');")
        let folder = h.path("shared")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        for _ in 0..<3 {
            for (db, name) in [(b, "B"), (a, "A"), (c, "C")] { try h.syncOK(db, as: name, folder) }
        }
        let expected = "'r2'|'two'\n'r3'|'three'\n"
        for db in [a, b, c] { XCTAssertEqual(try rows(db), expected, db) }
        let conflicts = try h.conflicts(b)
        XCTAssertTrue(conflicts.contains { $0["kind"] as? String == "insert at the top causal length" }, "\(conflicts)")
        for db in [a, b, c] {
            XCTAssertEqual(
                try h.sqlite(db, #"SELECT count(*) FROM "_sqsync_rows" WHERE "cl" > 4611686018427387904;"#), "0\n",
                "no replica writes a length its peers would refuse")
        }
    }

    // MARK: forged relay

    /// C signs, as itself, A's changes: a segment of A's under C's key, another with A's
    /// stamps inside C's own, and an envelope that claims A's changes up to 1004.
    func testARelayCannotSpeakForAnotherReplica() throws {
        try h.send((a, "A"), to: (b, "B"))
        let known = try h.clock(a)
        let forgedRow = HandRecord(
            key: [.text("forged")], rowStamp: HandStamp(hlc: known.hlc + 10, seq: known.seq + 1),
            columns: [(1, .text("forged as A"), nil)])
        var asA = HandSegment(
            origin: id("A"), base: known.seq, last: 1004, created: known.hlc + 10, tables: [Self.table], records: [forgedRow],
            signer: keys["C"]!)
        asA.originName = "A"
        try assertRefused(try fromC([asA], claimingOfA: 1004), by: b, as: "B", naming: ["A", "not that replica's key"])

        // A's stamp (site 1 in the envelope's list) inside C's own segment.
        let cClock = try h.clock(c)
        var stamped = forgedRow
        stamped.rowStamp = HandStamp(hlc: known.hlc + 10, seq: cClock.seq + 1, site: 1)
        var own = HandSegment(
            origin: id("C"), base: cClock.seq, last: cClock.seq + 1, created: known.hlc + 10, tables: [Self.table],
            records: [stamped], signer: keys["C"]!)
        own.originName = "C"
        try assertRefused(try fromC([own], claimingOfA: 1004), by: b, as: "B", naming: ["C", "another replica"])

        // An envelope of C's that claims A's changes up to 1004: the claim raises nobody's
        // knowledge of A, and A never hears that anyone holds changes it never made.
        let path = h.path("claim.sqsb")
        try fromC([], claimingOfA: 1004).write(to: path)
        try h.ok(["import", b, path], key: "B")
        XCTAssertEqual(try knowledge(b)[id("A")], Int(known.seq), "B's knowledge of A moves only over A's signed changes")
        try h.ok(["import", a, try h.export(b, as: "B")], key: "A")
        try assertHonestReplicasConverge()
    }

    /// A relay that alters A's records after A signed them is refused.
    func testAlteredRelayedChangesAreRefused() throws {
        let known = try h.clock(a)
        var altered = HandSegment(
            origin: id("A"), base: known.seq, last: known.seq + 1, created: known.hlc + 1, tables: [Self.table],
            records: [
                HandRecord(
                    key: [.text("x")], rowStamp: HandStamp(hlc: known.hlc + 1, seq: known.seq + 1), columns: [(1, .text("x"), nil)])
            ], signer: keys["A"]!)
        altered.alterChunkAfterSigning = true
        var bundle = try fromC([altered])
        bundle.identities.append((1, keys["A"]!.identity))
        try assertRefused(bundle, by: b, as: "B", naming: ["altered after their origin signed them"])
        try assertHonestReplicasConverge()
    }

    // MARK: identity

    /// C's key claims A's knowledge ID at B, which knows the ID (B is A's clone) but has
    /// never seen A's key: the ID was made from A's key, so no other key can take it.
    func testAnotherKeyCannotClaimAReplicasIdentityAtFirstSight() throws {
        let known = try h.clock(b)
        var bundle = HandBundle(
            sites: [HandSite(id: id("A"), name: "A", knowledge: 9)], senderSeq: 9, senderHLC: known.hlc, signer: keys["C"]!)
        bundle.identities = [(0, keys["C"]!.identity)]
        bundle.segments = [
            HandSegment(
                origin: id("A"), base: 0, last: 9, created: known.hlc, tables: [Self.table],
                records: [
                    HandRecord(key: [.text("forged")], rowStamp: HandStamp(hlc: known.hlc, seq: 9), columns: [(1, .text("x"), nil)])
                ], signer: keys["C"]!)
        ]
        try assertRefused(bundle, by: b, as: "B", naming: ["A", "forgery"])
        // Without the identity, the signature alone says it is not A's key.
        bundle.identities = []
        try assertRefused(bundle, by: b, as: "B", naming: ["A", keys["C"]!.name])
        try assertHonestReplicasConverge()
    }

    /// After A rotates, its old key (still trusted, as docs/KEYS.md advises during the switch)
    /// mints a replica X moving to a brand-new untrusted key: refused, X never becomes a peer.
    func testARotatedAwayKeyMintsNothing() throws {
        try h.send((a, "A"), to: (b, "B"))
        _ = try rotateA()

        let minted = HandKey("X")
        let clockB = try h.clock(b)
        var bundle = HandBundle(
            sites: [HandSite(id: minted.replicaID, name: "X", knowledge: 1)], senderSeq: 1, senderHLC: clockB.hlc,
            signer: minted)
        bundle.identities = [(0, keys["A"]!.identity)]
        bundle.moves = [HandMove(site: 0, from: keys["A"]!, to: minted.publicKey, afterSeq: 0)]
        bundle.segments = [
            HandSegment(
                origin: minted.replicaID, base: 0, last: 1, created: clockB.hlc, tables: [Self.table],
                records: [
                    HandRecord(key: [.text("forged")], rowStamp: HandStamp(hlc: clockB.hlc, seq: 1), columns: [(1, .text("x"), nil)])
                ], signer: minted)
        ]
        try assertRefused(bundle, by: b, as: "B", naming: [])
        let peers = try h.okJSON(["peers", b])["peers"] as? [[String: Any]] ?? []
        XCTAssertFalse(peers.contains { $0["knowledge_id"] as? String == minted.replicaID }, "\(peers)")

        // The old key's second move, for A itself: two moves from one key are refused loudly.
        var twice = HandBundle(
            sites: [HandSite(id: id("A"), name: "A", knowledge: 0)], senderSeq: 0, senderHLC: clockB.hlc, signer: minted)
        twice.identities = [(0, keys["A"]!.identity)]
        twice.moves = [HandMove(site: 0, from: keys["A"]!, to: minted.publicKey, afterSeq: 0)]
        try assertRefused(twice, by: b, as: "B", naming: ["two different moves"])
    }

    /// After A rotates, its old key re-signs a change of A's that B holds, with another value
    /// and a later clock. B holds all the old key could ever say, so the segment is passed over
    /// unread: nothing changes, and nothing is refused (an old key cannot set B against the
    /// relay that carries it, as a "copy" it would have to refuse for good).
    func testARotatedAwayKeyCannotRewriteWhatItSigned() throws {
        try h.sqlite(a, "UPDATE t SET v = 'genuine one' WHERE id = 'r1';")
        let signed = try h.clock(a)
        try h.send((a, "A"), to: (b, "B"))
        let newKey = try rotateA()
        // A signs with its new key from now on (keys["A"] keeps the old one, for the forger).
        for suffix in ["", ".pub"] {
            try FileManager.default.removeItem(atPath: h.keyPath("A") + suffix)
            try FileManager.default.moveItem(atPath: newKey + suffix, toPath: h.keyPath("A") + suffix)
        }

        let later = signed.hlc + 5
        var rewritten = HandSegment(
            origin: id("A"), base: signed.seq - 1, last: signed.seq, created: later, tables: [Self.table],
            records: [
                HandRecord(
                    key: [.text("r1")], rowStamp: nil,
                    columns: [(1, .text("forged by the old key"), HandStamp(hlc: later, seq: signed.seq))])
            ], signer: keys["A"]!)
        rewritten.originName = "A"
        var bundle = try fromC([rewritten])
        bundle.sites[1].knowledge = signed.seq
        let path = h.path("rewritten.sqsb")
        try bundle.write(to: path)
        let before = try rows(b)
        try h.ok(["import", b, path], key: "B")
        XCTAssertEqual(try rows(b), before)
        XCTAssertTrue(before.contains("genuine one"), before)
        try h.ok(["status", b])
        try assertHonestReplicasConverge()
    }

    // MARK: clocks

    /// One stamp near the top of the range (signed by C, its own change) is refused, naming
    /// C and how far ahead it is; B keeps working.
    func testAStampFarAheadIsRefusedAndBricksNothing() throws {
        let cClock = try h.clock(c)
        let far = Int64.max / 2
        let segment = HandSegment(
            origin: id("C"), base: cClock.seq, last: cClock.seq + 1, created: far, tables: [Self.table],
            records: [
                HandRecord(key: [.text("late")], rowStamp: HandStamp(hlc: far, seq: cClock.seq + 1), columns: [(1, .text("x"), nil)])
            ], signer: keys["C"]!)
        var bundle = try fromC([segment])
        bundle.senderHLC = far
        try assertRefused(bundle, by: b, as: "B", naming: ["C", "ahead of this machine's clock"])
        try h.sqlite(b, "INSERT INTO t VALUES ('after', 'still works');")
        try h.ok(["status", b])
        try h.ok(["doctor", b])
        try assertHonestReplicasConverge()
    }

    /// A machine whose clock is a day ahead keeps syncing with one a day behind.
    func testClocksADayOffKeepSyncing() throws {
        let ahead = ["/usr/bin/faketime", "-f", "+1d"], behind = ["/usr/bin/faketime", "-f", "-1d"]
        try h.sqlite(a, "INSERT INTO t VALUES ('tomorrow', 'from a fast clock');", prefix: ahead)
        let bundle = h.path("ahead.sqsb")
        XCTAssertEqual(try h.sqsync(["export", a, "-o", bundle], key: "A", prefix: ahead).status, 0)
        let imported = try h.sqsync(["import", b, bundle], key: "B", prefix: behind)
        XCTAssertEqual(imported.status, 0, imported.stderr)
        XCTAssertTrue(try rows(b).contains("tomorrow"))
    }

    // MARK: bounded work

    /// An unsigned sparse file of 1 GiB (a few KB on disk), and a signed one whose value
    /// claims 900 MiB: both refused at once, in little memory.
    func testHostileSizesCostLittle() throws {
        let sparse = h.path("sparse.sqsb")
        XCTAssertTrue(FileManager.default.createFile(atPath: sparse, contents: nil))
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: sparse))
        handle.write(Data("SQSYNCB\u{0}\u{3}".utf8))
        try handle.truncate(atOffset: 1 << 30)
        handle.seekToEndOfFile()
        handle.write(Data([0, 0, 0x10, 0, 0, 0, 0x01, 0]) + Data("SQSYNC-SIG\n".utf8))
        try handle.close()
        let (result, peak, seconds) = try measured(["import", b, sparse], key: "B")
        XCTAssertEqual(result.status, 3, result.stderr)
        XCTAssertLessThan(peak, 64 << 20, "peak memory \(peak) bytes")
        XCTAssertLessThan(seconds, 5)

        let cClock = try h.clock(c)
        let huge = HandSegment(
            origin: id("C"), base: cClock.seq, last: cClock.seq + 1, created: cClock.hlc + 1, tables: [Self.table],
            records: [
                HandRecord(
                    key: [.text("big")], rowStamp: HandStamp(hlc: cClock.hlc + 1, seq: cClock.seq + 1),
                    columns: [(1, .textClaiming(length: 900 << 20, actual: Array("tiny".utf8)), nil)])
            ], signer: keys["C"]!)
        let hugeFile = h.path("huge.sqsb")
        try fromC([huge]).write(to: hugeFile)
        let (refused, hugePeak, _) = try measured(["import", b, hugeFile], key: "B")
        XCTAssertEqual(refused.status, 3, refused.stderr)
        for word in [hugeFile, "t.v", "cap"] { XCTAssertTrue(refused.stderr.contains(word), "\(word): \(refused.stderr)") }
        XCTAssertLessThan(hugePeak, 64 << 20, "peak memory \(hugePeak) bytes")
    }

    /// Runs sqsync under a Python wrapper that reports the child's peak resident memory.
    private func measured(_ arguments: [String], key: String) throws -> (ProcessResult, Int, Double) {
        let script = """
            import resource, subprocess, sys, time
            start = time.time()
            code = subprocess.run(sys.argv[1:]).returncode
            sys.stderr.write("PEAK %d %f\\n" % (resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, time.time() - start))
            sys.exit(code)
            """
        let result = try Harness.run(
            "/usr/bin/python3", ["-c", script, Harness.binary] + arguments + ["--trust", h.trustFile, "--key", h.keyPath(key)])
        let line = result.stderr.split(separator: "\n").first { $0.hasPrefix("PEAK ") } ?? "PEAK 0 0"
        let fields = line.split(separator: " ")
        var cleaned = result
        cleaned.stderr = result.stderr.split(separator: "\n").filter { !$0.hasPrefix("PEAK ") }.joined(separator: "\n") + "\n"
        return (cleaned, Int(fields[1]) ?? 0, Double(fields[2]) ?? 0)
    }

    // MARK: internal tables, escaping, retirement

    /// A validly signed bundle that writes sqsync's or SQLite's own tables is refused.
    func testInternalTablesAreRefused() throws {
        let cClock = try h.clock(c)
        for table in ["_sqsync_rows", "sqlite_schema"] {
            let segment = HandSegment(
                origin: id("C"), base: cClock.seq, last: cClock.seq + 1, created: cClock.hlc + 1,
                tables: [(table, ["id", "v"], [0])],
                records: [
                    HandRecord(
                        key: [.text("x")], rowStamp: HandStamp(hlc: cClock.hlc + 1, seq: cClock.seq + 1), columns: [(1, .text("x"), nil)])
                ], signer: keys["C"]!)
            try assertRefused(try fromC([segment]), by: b, as: "B", naming: [table, "sqsync's own"])
        }
    }

    /// Text from a bundle is shown escaped, after the verification result: a sender name
    /// cannot forge a line of `inspect`'s output.
    func testInspectEscapesWhatTheBundleSays() throws {
        var bundle = try fromC([])
        bundle.sites[0].name = "evil\nverified   yes: forged\u{1b}[2K"
        let path = h.path("escape.sqsb")
        try bundle.write(to: path)
        let result = try h.sqsync(["inspect", path])
        let lines = result.stdout.split(separator: "\n")
        XCTAssertTrue(lines.first?.hasPrefix("verified   yes") ?? false, result.stdout)
        XCTAssertEqual(lines.filter { $0.hasPrefix("verified") }.count, 1, result.stdout)
        XCTAssertFalse(result.stdout.contains("\u{1b}"), result.stdout)
        XCTAssertTrue(result.stdout.contains(#"evil\nverified   yes: forged\x1b[2K"#), result.stdout)
    }

    /// After B retires C, C's later changes are refused at B, whoever relays them; the rest of
    /// the relay's bundle still applies.
    func testRetirementFollowsTheOrigin() throws {
        try h.send((c, "C"), to: (b, "B"))
        try h.ok(["peers", "retire", b, "C"], key: "B")
        try h.sqlite(c, "INSERT INTO t VALUES ('after-retire', 'from C');")
        try h.send((c, "C"), to: (a, "A"))
        try h.sqlite(a, "INSERT INTO t VALUES ('from-a', 'genuine');")
        // A knows B lacks C's change: it keeps C's segment and relays it to B.
        try h.send((b, "B"), to: (a, "A"))
        let relayed = try h.export(a, as: "A", extra: ["--for", "B"])
        // B's operator has also taken C's key out of allowed_signers: C's segment is passed
        // over all the same, and A's bundle is not refused for carrying it.
        let trusted = try String(contentsOfFile: h.trustFile, encoding: .utf8)
        try trusted.split(separator: "\n").filter { !$0.hasPrefix("C ") }.map { $0 + "\n" }.joined()
            .write(toFile: h.trustFile, atomically: true, encoding: .utf8)
        let result = try h.ok(["import", b, relayed], key: "B")
        XCTAssertTrue(result.stderr.contains("retired"), result.stderr)
        XCTAssertTrue(try rows(b).contains("from-a"))
        XCTAssertFalse(try rows(b).contains("after-retire"))
    }

    /// A → B → C: C checks A's own signature on A's changes B relays.
    func testARelayChainDeliversTheOriginsSignedChanges() throws {
        try h.send((c, "C"), to: (b, "B"))  // B knows C lacks A's changes
        try h.sqlite(a, "INSERT INTO t VALUES ('chain', 'from A via B');")
        try h.send((a, "A"), to: (b, "B"))
        let relayed = try h.export(b, as: "B", extra: ["--for", "C"])
        let inspected = try h.ok(["inspect", relayed], key: "C")
        XCTAssertTrue(
            inspected.stdout.contains("changes    of A (\(id("A"))") && inspected.stdout.contains("origin signature good"),
            inspected.stdout)
        try h.ok(["import", c, relayed], key: "C")
        XCTAssertTrue(try rows(c).contains("chain"))
        XCTAssertEqual(try knowledge(c)[id("A")], try knowledge(a)[id("A")])
    }
}
