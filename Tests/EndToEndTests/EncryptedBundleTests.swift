import Foundation
import XCTest

/// Encrypted bundles through the built binary (docs/BUNDLE_FORMAT.md, "Encryption"): a stick
/// round with every bundle encrypted, the standard `age` tool reading ours with a reader's SSH
/// key and we reading its, `export --for` and `--encrypt-to`, and files for other keys,
/// altered or cut short refused with the database unchanged.
final class EncryptedBundleTests: XCTestCase {
    private static let age = "/usr/bin/age"
    private static let ageMagic = Array("age-encryption.org/v1\n".utf8)
    private var h: Harness!
    private var a = "", b = "", c = ""

    private static let schema = """
        CREATE TABLE note(id TEXT PRIMARY KEY, body TEXT, secret TEXT);
        INSERT INTO note VALUES ('n1', 'first', 'the password is swordfish');
        """

    override func setUpWithError() throws {
        try requireTools([Self.age], install: "apt-get install age")
        h = try Harness()
        a = try h.makeReplica("A", schema: Self.schema)
        b = try h.cloneReplica(a, as: "B")
        c = try h.cloneReplica(a, as: "C")
    }

    override func tearDown() { h = nil }

    private func isEncrypted(_ file: String) -> Bool {
        Array(h.fileBytes(file).prefix(Self.ageMagic.count)) == Self.ageMagic
    }

    private func rows(_ db: String) throws -> String { try h.dump(db, table: "note", orderBy: "id") }

    /// A, B and C take turns with one stick. Every bundle on it is an age file that holds none
    /// of the rows in the clear; `age -d` with B's SSH key opens one into a bundle; all converge.
    func testAStickRoundWithEveryBundleEncryptedConverges() throws {
        let stick = h.path("stick")
        try FileManager.default.createDirectory(atPath: stick, withIntermediateDirectories: true)
        try h.sqlite(a, "INSERT INTO note VALUES ('n2', 'from A', 'A secret');")
        try h.sqlite(b, "INSERT INTO note VALUES ('n3', 'from B', 'B secret');")
        try h.sqlite(c, "UPDATE note SET body = 'edited by C' WHERE id = 'n1';")
        // D is trusted and A has met it elsewhere, but D never reads the stick: A's bundles
        // there are not for D's key.
        let d = try h.cloneReplica(a, as: "D")
        try h.send((d, "D"), to: (a, "A"))
        for (db, name) in [(a, "A"), (b, "B"), (c, "C")] { try h.syncOK(db, as: name, stick) }
        let bundles = bundlesIn(stick)
        // C's bundle relays A's and B's changes: it supersedes theirs.
        XCTAssertGreaterThanOrEqual(bundles.count, 1, "C's bundle after the first round")
        for bundle in bundles {
            XCTAssertTrue(isEncrypted(bundle), "\(bundle) is in the clear")
            let text = String(decoding: h.fileBytes(bundle), as: UTF8.self)
            XCTAssertFalse(text.contains("secret") || text.contains("SQSYNC"), "\(bundle) shows its content")
        }
        let opened = h.path("opened.sqsb")
        let result = try Harness.run(Self.age, ["-d", "-i", h.keyPath("B"), "-o", opened, bundles[0]])
        // Each was encrypted to B's key: B's own to itself (and A), C's to the readers it knew
        // then, A and B.
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(Array(h.fileBytes(opened).prefix(7)), Array("SQSYNCB".utf8), "a signed bundle inside")
        try h.ok(["inspect", opened])

        // Now that A knows the stick's readers, its next bundle is for them, not for D.
        try h.sqlite(a, "INSERT INTO note VALUES ('n4', 'for the readers', 'x');")
        try h.syncOK(a, as: "A", stick)
        let aID = try h.knowledgeID(a)
        let fromA = try XCTUnwrap(bundlesIn(stick).first { $0.contains("/\(aID)/") }, "A's bundle")
        let byD = try h.sqsync(["import", d, fromA], key: "D")
        XCTAssertEqual(byD.status, 3, byD.stderr)
        XCTAssertTrue(byD.stderr.contains("not addressed to this replica's key"), byD.stderr)

        for _ in 0..<2 {
            for (db, name) in [(a, "A"), (b, "B"), (c, "C")] { try h.syncOK(db, as: name, stick) }
        }
        let expected = try rows(a)
        XCTAssertTrue(expected.contains("from B") && expected.contains("edited by C") && expected.contains("A secret"), expected)
        XCTAssertEqual(try rows(b), expected)
        XCTAssertEqual(try rows(c), expected)
    }

    /// Past `SQSYNC_MAX_DIRECT_RECIPIENTS` readers (here 1), a stick's bundles are encrypted
    /// once, to a readers' key in `sqsync/keys/`: A, B and C converge through it; `age` opens
    /// the key file with B's SSH key and the bundle with the identity that gives; `inspect` and
    /// `import` of a bundle where it lies on the stick find the key beside it; D, known to A
    /// but not a reader of the stick, opens neither.
    func testAStickPastTheDirectRecipientsSharesOneReadersKey() throws {
        let environment = ["SQSYNC_MAX_DIRECT_RECIPIENTS": "1"]
        let stick = h.path("stick")
        try FileManager.default.createDirectory(atPath: stick, withIntermediateDirectories: true)
        func sync(_ db: String, _ name: String) throws {
            let result = try h.sqsync(["sync", db, stick], key: name, environment: environment)
            XCTAssertEqual(result.status, 0, "\(name): \(result.stderr)")
        }
        try h.sqlite(a, "INSERT INTO note VALUES ('n2', 'from A', 'A secret');")
        try h.sqlite(b, "INSERT INTO note VALUES ('n3', 'from B', 'B secret');")
        try h.sqlite(c, "UPDATE note SET body = 'edited by C' WHERE id = 'n1';")
        let d = try h.cloneReplica(a, as: "D")
        try h.send((d, "D"), to: (a, "A"))
        for (db, name) in [(a, "A"), (b, "B"), (c, "C")] { try sync(db, name) }
        try h.sqlite(a, "INSERT INTO note VALUES ('n4', 'for the readers', 'x');")
        try sync(a, "A")
        let aID = try h.knowledgeID(a)
        let fromA = try XCTUnwrap(bundlesIn(stick).first { $0.contains("/\(aID)/") }, "A's bundle")
        let header = String(decoding: h.fileBytes(fromA).prefix(400), as: UTF8.self)
        XCTAssertTrue(header.contains("\n-> X25519 ") && header.contains("\n-> sqsync-readers "), header)
        XCTAssertFalse(String(decoding: h.fileBytes(fromA), as: UTF8.self).contains("for the readers"))
        let keyName = try XCTUnwrap(header.components(separatedBy: "-> sqsync-readers ").last?.prefix { $0 != "\n" })
        let keyFile = stick + "/sqsync/keys/" + keyName

        let identity = h.path("readers.txt"), opened = h.path("opened.sqsb")
        let unwrapped = try Harness.run(Self.age, ["-d", "-i", h.keyPath("B"), "-o", identity, keyFile])
        XCTAssertEqual(unwrapped.status, 0, unwrapped.stderr)
        let decrypted = try Harness.run(Self.age, ["-d", "-i", identity, "-o", opened, fromA])
        XCTAssertEqual(decrypted.status, 0, decrypted.stderr)
        XCTAssertEqual(Array(h.fileBytes(opened).prefix(7)), Array("SQSYNCB".utf8), "a signed bundle inside")
        XCTAssertNotEqual(try Harness.run(Self.age, ["-d", "-i", h.keyPath("D"), "-o", h.path("d.txt"), keyFile]).status, 0)

        let inspected = try h.sqsync(["inspect", fromA], key: "B")
        XCTAssertEqual(inspected.status, 0, inspected.stderr)
        XCTAssertTrue(inspected.stdout.contains("readers' key"), inspected.stdout)
        let byD = try h.sqsync(["import", d, fromA], key: "D")
        XCTAssertEqual(byD.status, 3, byD.stderr)
        XCTAssertTrue(byD.stderr.contains("not addressed to this replica's key"), byD.stderr)
        XCTAssertFalse(try rows(d).contains("for the readers"))
        try h.ok(["import", b, fromA], key: "B")
        XCTAssertTrue(try rows(b).contains("for the readers"))

        for _ in 0..<2 {
            for (db, name) in [(a, "A"), (b, "B"), (c, "C")] { try sync(db, name) }
        }
        let expected = try rows(a)
        XCTAssertTrue(expected.contains("from B") && expected.contains("edited by C") && expected.contains("for the readers"), expected)
        XCTAssertEqual(try rows(b), expected)
        XCTAssertEqual(try rows(c), expected)
    }

    /// `export --for B` is for B alone: B imports it, C is refused (exit 3) and unchanged;
    /// `--encrypt-to` names the keys; `--no-encrypt` leaves it in the clear.
    func testExportForAPeerIsReadableByThatPeerOnly() throws {
        try h.send((b, "B"), to: (a, "A"))  // A pins B's key
        try h.sqlite(a, "INSERT INTO note VALUES ('n2', 'for B', 'x');")
        let forB = try h.export(a, as: "A", extra: ["--for", "B"])
        XCTAssertTrue(isEncrypted(forB))
        try h.ok(["import", b, forB], key: "B")
        XCTAssertTrue(try rows(b).contains("for B"))
        let before = try h.fullDump(c)
        let refused = try h.sqsync(["import", c, forB], key: "C")
        XCTAssertEqual(refused.status, 3, refused.stderr)
        XCTAssertEqual(refused.stderrLines.count, 1, refused.stderr)
        XCTAssertTrue(refused.stderr.contains("not addressed to this replica's key") && refused.stderr.contains(forB), refused.stderr)
        XCTAssertEqual(try h.fullDump(c), before)

        let inspectedByB = try h.okJSON(["inspect", forB], key: "B")
        XCTAssertEqual(inspectedByB["encrypted"] as? Bool, true)
        XCTAssertEqual(inspectedByB["verified"] as? Bool, true)
        let inspectedByC = try h.okJSON(["inspect", forB], key: "C")
        let recipients = inspectedByC["recipients"] as? [String] ?? []
        XCTAssertEqual(recipients.count, 1, "\(inspectedByC)")
        XCTAssertTrue(recipients.first?.contains("(B)") == true, "the recipient named by its trusted line: \(recipients)")

        let toBoth = h.path("both.sqsb")
        try h.ok(["export", a, "-o", toBoth, "--encrypt-to", h.keyPath("B") + ".pub", h.keyPath("C") + ".pub"], key: "A")
        XCTAssertTrue(isEncrypted(toBoth))
        try h.ok(["import", c, toBoth], key: "C")
        XCTAssertTrue(try rows(c).contains("for B"))

        let clear = try h.export(a, as: "A", extra: ["--for", "B", "--no-encrypt"])
        XCTAssertFalse(isEncrypted(clear))
        let plain = try h.export(a, as: "A")
        XCTAssertFalse(isEncrypted(plain), "-o without --for or --encrypt-to stays in the clear")
    }

    /// A bundle `age -R` encrypted to B's public key imports at B.
    func testWeReadWhatAgeWrote() throws {
        try h.sqlite(a, "INSERT INTO note VALUES ('n2', 'through age', 'x');")
        let plain = try h.export(a, as: "A")
        let sealed = h.path("sealed.sqsb")
        let result = try Harness.run(Self.age, ["-R", h.keyPath("B") + ".pub", "-o", sealed, plain])
        XCTAssertEqual(result.status, 0, result.stderr)
        try h.ok(["import", b, sealed], key: "B")
        XCTAssertTrue(try rows(b).contains("through age"))
    }

    /// One bit changed in the header, the share, the body or the last tag, or the file cut
    /// short: exit 3, one line naming the file, and B as it was.
    func testAlteredAndTruncatedCiphertextsAreRefused() throws {
        try h.send((b, "B"), to: (a, "A"))
        try h.sqlite(a, "INSERT INTO note VALUES ('n2', 'tampered', 'x');")
        let good = try h.export(a, as: "A", extra: ["--for", "B"])
        let bytes = Array(h.fileBytes(good))
        let macLine = bytes.indices.first { bytes[$0] == UInt8(ascii: "-") && bytes[$0 + 1] == UInt8(ascii: "-") }!
        var cases: [(String, [UInt8])] = []
        for (what, position) in [("stanza", 30), ("MAC", macLine + 6), ("body", bytes.count / 2), ("last tag", bytes.count - 2)] {
            var altered = bytes
            altered[position] ^= 0x04
            cases.append((what, altered))
        }
        cases.append(("cut", Array(bytes.prefix(bytes.count - 20))))
        cases.append(("header only", Array(bytes.prefix(macLine + 48))))
        let before = try h.fullDump(b)
        for (what, altered) in cases {
            let file = h.path("altered-\(what.replacingOccurrences(of: " ", with: "-")).sqsb")
            try Data(altered).write(to: URL(fileURLWithPath: file))
            let result = try h.sqsync(["import", b, file], key: "B")
            XCTAssertEqual(result.status, 3, "\(what): \(result.stderr)")
            XCTAssertEqual(result.stderrLines.count, 1, "\(what): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains(file), "\(what): \(result.stderr)")
            XCTAssertEqual(try h.fullDump(b), before, "\(what) changed B")
        }
        try h.ok(["import", b, good], key: "B")
        XCTAssertTrue(try rows(b).contains("tampered"))
    }
}
