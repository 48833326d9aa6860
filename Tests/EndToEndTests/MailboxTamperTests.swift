import Foundation
import XCTest

/// Someone who can write to the shared folder (or the stick) but holds no trusted key plants
/// forged, untrusted and misplaced acknowledgements, symbolic links and junk. Through the
/// built binary: every change still reaches every site, no bundle is removed before its
/// readers took it, nothing outside the mailbox is touched, and each ignored file is named.
final class MailboxTamperTests: XCTestCase {
    private var h: Harness!
    private var a = "", b = "", c = "", box = ""
    private var replicas: [(db: String, name: String)] { [(a, "A"), (b, "B"), (c, "C")] }
    private static let sshKeygen = "/usr/bin/ssh-keygen"

    override func setUpWithError() throws {
        h = try Harness()
        a = try h.makeReplica("A", schema: "CREATE TABLE t(id TEXT PRIMARY KEY, v TEXT); INSERT INTO t VALUES ('0', 'seed');")
        b = try h.cloneReplica(a, as: "B")
        c = try h.cloneReplica(a, as: "C")
        box = h.path("shared")
        try FileManager.default.createDirectory(atPath: box, withIntermediateDirectories: true)
    }

    override func tearDown() { h = nil }

    private func rows(_ db: String) throws -> String { try h.dump(db, table: "t", orderBy: "id") }

    private func write(_ text: String, _ relative: String) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: box + "/" + relative))
    }

    /// An acknowledgement for `replica` in the right format, signed by `keyFile` with ssh-keygen.
    private func signedAck(replica: String, knowledge: String, keyFile: String) throws -> String {
        let payload = "sqsync-ack 1\nreplica \(replica)\nname evil\nknowledge \(knowledge)\nlearned \n"
        let file = h.path("payload-\(UUID().uuidString.prefix(6))")
        try Data(payload.utf8).write(to: URL(fileURLWithPath: file))
        let signed = try Harness.run(Self.sshKeygen, ["-Y", "sign", "-f", keyFile, "-n", "sqsync", file])
        XCTAssertEqual(signed.status, 0, signed.stderr)
        return payload + (try String(contentsOfFile: file + ".sig", encoding: .utf8))
    }

    func testTamperedMailboxLosesNoChangeAndRemovesNoBundleEarly() throws {
        try requireTools([Self.sshKeygen], install: "apt-get install openssh-client")
        for replica in replicas + [(a, "A")] { try h.syncOK(replica.db, as: replica.name, box) }
        let ids = try replicas.map { try h.knowledgeID($0.db) }
        let (aID, bID, cID) = (ids[0], ids[1], ids[2])
        let everything = ids.map { "\($0):999" }.joined(separator: ",")

        // A key nobody trusts.
        let evilKey = h.path("evil.key")
        XCTAssertEqual(try h.sqsync(["keygen", "--out", evilKey, "--name", "evil"]).status, 0)
        // A file outside the mailbox that links point at.
        let victim = h.path("victim.txt")
        try Data("keep me".utf8).write(to: URL(fileURLWithPath: victim))

        // Forged acknowledgements claiming B and C hold everything: unsigned (old format and
        // new), signed by an untrusted key, and B's genuine one copied into C's folder.
        let newest = "99999999999999999999"
        try write("\(aID) 999\n\(bID) 999\n\(cID) 999\n", "sqsync/acks/\(cID)/\(newest)_00000001.ack")
        try write(
            "sqsync-ack 1\nreplica \(cID)\nname C\nknowledge \(everything)\nlearned \n",
            "sqsync/acks/\(cID)/\(newest)_00000002.ack")
        try write(
            try signedAck(replica: cID, knowledge: everything, keyFile: evilKey), "sqsync/acks/\(cID)/\(newest)_00000003.ack")
        try write(
            try signedAck(replica: bID, knowledge: everything, keyFile: evilKey), "sqsync/acks/\(bID)/\(newest)_00000001.ack")
        let genuineB = try XCTUnwrap(
            try FileManager.default.contentsOfDirectory(atPath: box + "/sqsync/acks/\(bID)").filter { $0.hasPrefix("0") }.first)
        try FileManager.default.copyItem(
            atPath: box + "/sqsync/acks/\(bID)/\(genuineB)", toPath: box + "/sqsync/acks/\(cID)/\(newest)_00000004.ack")
        // Symbolic links: an acknowledgement, a "bundle" in B's own outbox, a whole outbox.
        try FileManager.default.createSymbolicLink(
            atPath: box + "/sqsync/acks/\(cID)/\(newest)_00000005.ack",
            withDestinationPath: box + "/sqsync/acks/\(bID)/\(genuineB)")
        try FileManager.default.createSymbolicLink(
            atPath: box + "/sqsync/outbox/\(bID)/\(bID)_1-999_deadbeef.sqsb", withDestinationPath: victim)
        let elsewhere = h.path("elsewhere")
        try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
        try Data("keep me too".utf8).write(to: URL(fileURLWithPath: elsewhere + "/x_1-1_00000000.sqsb"))
        try FileManager.default.createSymbolicLink(atPath: box + "/sqsync/outbox/linked", withDestinationPath: elsewhere)
        // Junk: in A's own outbox, beside the mailbox, and a file named like a bundle in
        // another outbox (rejected: exit 3, named).
        try write("junk", "sqsync/outbox/\(aID)/notes.txt")
        try write("junk", "sqsync/junk.bin")
        let fakeID = UUID().uuidString.lowercased()
        try FileManager.default.createDirectory(
            atPath: box + "/sqsync/outbox/\(fakeID)", withIntermediateDirectories: true)
        try write("not a bundle", "sqsync/outbox/\(fakeID)/\(fakeID)_1-1_00000000.sqsb")

        /// A sync that sees the planted bundle: the first time, exit 3, one line naming it, the
        /// rest done; later, exit 0, the file left unread and counted (it costs one look).
        var looked: Set<String> = []
        func tamperedSync(
            _ db: String, _ name: String, file: StaticString = #filePath, line: UInt = #line
        ) throws -> ProcessResult {
            let result = try h.sync(db, as: name, box)
            if looked.insert(name).inserted {
                XCTAssertEqual(result.status, 3, "\(name): \(result.stderr)", file: file, line: line)
                XCTAssertTrue(result.stderr.contains("\(fakeID)_1-1_00000000.sqsb"), result.stderr, file: file, line: line)
            } else {
                XCTAssertEqual(result.status, 0, "\(name): \(result.stderr)", file: file, line: line)
                XCTAssertFalse(result.stderr.contains("\(fakeID)_1-1_00000000.sqsb"), result.stderr, file: file, line: line)
            }
            XCTAssertTrue(result.stderr.contains("synced with"), result.stderr, file: file, line: line)
            return result
        }

        try h.sqlite(a, "INSERT INTO t VALUES ('a', 'from A');")
        try h.sqlite(b, "INSERT INTO t VALUES ('b', 'from B');")
        try h.sqlite(c, "INSERT INTO t VALUES ('c', 'from C');")

        let first = try tamperedSync(a, "A")
        for forged in 1...4 {
            XCTAssertTrue(
                first.stderr.contains("sqsync/acks/\(cID)/\(newest)_0000000\(forged).ack: ignored"),
                "forged ack \(forged) must be named: \(first.stderr)")
        }
        XCTAssertTrue(first.stderr.contains("sqsync/acks/\(bID)/\(newest)_00000001.ack: ignored"), first.stderr)
        XCTAssertTrue(first.stderr.contains("outbox/\(aID)/notes.txt"), first.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: box + "/sqsync/outbox/\(aID)/notes.txt"))
        let aBundles = bundlesIn(box).filter { $0.contains("/\(aID)/") }
        XCTAssertEqual(aBundles.count, 1, "A left its bundle: \(bundlesIn(box))")

        // B's bundle relays A's changes, so B may remove A's bundle; the forged acknowledgements
        // claim C holds everything, and had B believed them, its bundle would not carry A's
        // changes to C either.
        _ = try tamperedSync(b, "B")
        XCTAssertTrue(
            FileManager.default.fileExists(atPath: aBundles[0]) || bundlesIn(box).contains { $0.contains("/\(bID)/") },
            "C has not taken A's changes yet: A's bundle must not go unless B's carries them")
        _ = try tamperedSync(c, "C")
        let cRows = try rows(c)
        XCTAssertTrue(cRows.contains("'a'|'from A'"), "C's first sync after A's must bring A's change: \(cRows)")
        for _ in 0..<2 {
            for replica in replicas { _ = try tamperedSync(replica.db, replica.name) }
        }
        let expected = "'0'|'seed'\n'a'|'from A'\n'b'|'from B'\n'c'|'from C'\n"
        for replica in replicas { XCTAssertEqual(try rows(replica.db), expected, "\(replica.name) lost a change") }

        XCTAssertEqual(try String(contentsOfFile: victim, encoding: .utf8), "keep me", "a link was followed")
        XCTAssertEqual(try String(contentsOfFile: elsewhere + "/x_1-1_00000000.sqsb", encoding: .utf8), "keep me too")
        XCTAssertTrue(FileManager.default.fileExists(atPath: elsewhere + "/x_1-1_00000000.sqsb"))
    }

    /// A's bundle replaced by a folder of its name (what an object store's planted prefix
    /// is): A's next sync publishes under another name (exit 0), and B and C converge.
    func testABundleReplacedByAFolderOfItsNameIsPublishedUnderAnother() throws {
        try h.sqlite(a, "INSERT INTO t VALUES ('1', 'from A');")
        try h.syncOK(a, as: "A", box)
        let aID = try h.knowledgeID(a)
        let outbox = box + "/sqsync/outbox/\(aID)"
        let bundles = try FileManager.default.contentsOfDirectory(atPath: outbox).filter { $0.hasSuffix(".sqsb") }
        XCTAssertEqual(bundles.count, 1, "\(bundles)")
        try FileManager.default.removeItem(atPath: outbox + "/" + bundles[0])
        try FileManager.default.createDirectory(atPath: outbox + "/" + bundles[0] + "/x", withIntermediateDirectories: true)

        try h.syncOK(a, as: "A", box)
        let now = try FileManager.default.contentsOfDirectory(atPath: outbox).filter { $0.hasSuffix(".sqsb") }
        XCTAssertTrue(now.contains { $0 != bundles[0] }, "A published under another name: \(now)")
        try h.syncOK(b, as: "B", box)
        XCTAssertEqual(try rows(b), try rows(a))
        // C is new: its acknowledgement tells A what it lacks.
        for replica in [(c, "C"), (a, "A"), (c, "C")] { try h.syncOK(replica.0, as: replica.1, box) }
        XCTAssertEqual(try rows(c), try rows(a))
    }

    /// A stick pulled while A's bundle was written leaves it cut short under its final name. B
    /// refuses it (exit 3, once) and says so in its acknowledgement; A, with nothing new to
    /// send, leaves the bundle again under another name at its next sync, and B takes it.
    func testATruncatedBundleIsLeftAgainByItsWriter() throws {
        try h.syncOK(b, as: "B", box)
        try h.sqlite(a, "INSERT INTO t VALUES ('1', 'from A');")
        try h.syncOK(a, as: "A", box)
        let outbox = box + "/sqsync/outbox/\(try h.knowledgeID(a))"
        let bundles = try FileManager.default.contentsOfDirectory(atPath: outbox).filter { $0.hasSuffix(".sqsb") }
        XCTAssertEqual(bundles.count, 1, "\(bundles)")
        let path = outbox + "/" + bundles[0]
        let whole = try Data(contentsOf: URL(fileURLWithPath: path))
        try whole.prefix(whole.count / 2).write(to: URL(fileURLWithPath: path))

        let refused = try h.sync(b, as: "B", box)
        XCTAssertEqual(refused.status, 3, refused.stderr)
        XCTAssertEqual(try h.sync(b, as: "B", box).status, 0, "refused once, then left unread")
        XCTAssertNotEqual(try rows(b), try rows(a))
        try h.syncOK(a, as: "A", box)
        let now = try FileManager.default.contentsOfDirectory(atPath: outbox).filter { $0.hasSuffix(".sqsb") }
        XCTAssertFalse(now.contains(bundles[0]), "the damaged file is gone: \(now) \(refused.stderr)")
        XCTAssertEqual(now.count, 1, "\(now)")
        try h.syncOK(b, as: "B", box)
        XCTAssertEqual(try rows(b), try rows(a))
    }

    func testDirectoryTransportRefusesLinksOutOfTheMailbox() throws {
        try h.syncOK(a, as: "A", box)
        let aID = try h.knowledgeID(a)
        // Someone swaps A's own acknowledgement folder for a link to a folder outside.
        let outside = h.path("outside")
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        try Data("precious".utf8).write(to: URL(fileURLWithPath: outside + "/precious.ack"))
        let folder = box + "/sqsync/acks/\(aID)"
        try FileManager.default.removeItem(atPath: folder)
        try FileManager.default.createSymbolicLink(atPath: folder, withDestinationPath: outside)
        let result = try h.sync(a, as: "A", box)
        XCTAssertEqual(result.status, 1, result.stderr)
        XCTAssertEqual(result.stderrLines.count, 1, result.stderr)
        XCTAssertTrue(result.stderr.contains("symbolic link"), result.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: outside), ["precious.ack"])
    }
}
