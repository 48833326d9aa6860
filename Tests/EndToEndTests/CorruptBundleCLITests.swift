import Foundation
import XCTest

/// Damaged bundles made from one real bundle: every one must be rejected with exit code 3, one
/// stderr line naming the file, and no change at all to the target database.
final class CorruptBundleCLITests: XCTestCase {
    private var h: Harness!
    private var source = ""
    private var target = ""
    private var good = Data()
    private var goodPath = ""

    override func setUpWithError() throws {
        h = try Harness()
        source = try h.makeReplica(
            "A",
            schema: """
                CREATE TABLE t(id TEXT PRIMARY KEY, a TEXT, b BLOB, r REAL);
                CREATE TABLE u(k1 TEXT, k2 INTEGER, v TEXT, PRIMARY KEY (k1, k2));
                INSERT INTO t VALUES ('1', 'one', x'00', 1.0), ('2', 'two', NULL, 2.5);
                """)
        target = try h.cloneReplica(source, as: "B")
        try h.sqlite(target, "UPDATE t SET a = 'local' WHERE id = '2';")
        try h.sqlite(
            source,
            """
            INSERT INTO t VALUES ('3', 'three', x'deadbeef', -0.0), ('4', 'four', randomblob(64), 4.25);
            UPDATE t SET a = 'ONE' WHERE id = '1';
            DELETE FROM t WHERE id = '2';
            INSERT INTO u VALUES ('k', 1, 'x'), ('k', 2, 'y'), ('l', 1, 'z');
            """)
        goodPath = try h.export(source, as: "A")
        good = h.fileBytes(goodPath)
        XCTAssertGreaterThan(good.count, 100, "the bundle is big enough to damage in many places")
    }

    override func tearDown() { h = nil }

    private func write(_ data: Data, _ name: String) throws -> String {
        let file = h.path(name)
        try data.write(to: URL(fileURLWithPath: file))
        return file
    }

    /// Imports `file` into the target and checks the rejection contract.
    private func assertRejected(
        _ file: String, extra: [String] = [], file src: StaticString = #filePath, line: UInt = #line
    ) throws {
        let name = URL(fileURLWithPath: file).lastPathComponent
        let before = try h.fullDump(target)
        let result = try h.sqsync(["import", target, file] + extra, key: "B")
        XCTAssertEqual(
            result.status, 3, "\(name): expected exit 3, got \(result.status): \(result.stderr)", file: src, line: line)
        XCTAssertEqual(result.stderrLines.count, 1, "\(name): expected one stderr line: \(result.stderr)", file: src, line: line)
        XCTAssertTrue(
            result.stderr.contains(name), "\(name): stderr does not name the file: \(result.stderr)", file: src, line: line)
        XCTAssertEqual(try h.fullDump(target), before, "\(name): the target database changed", file: src, line: line)
    }

    // MARK: corpus

    func testEmptyFileIsRejected() throws {
        try assertRejected(try write(Data(), "empty.sqsb"))
    }

    func testTruncatedBundlesAreRejected() throws {
        let n = good.count
        let lengths = Set([1, 4, 8, 16, 32, 48, 64, n / 4, n / 3, n / 2, 2 * n / 3, n - 120, n - 64, n - 32, n - 8, n - 1])
            .filter { $0 > 0 && $0 < n }.sorted()
        for length in lengths {
            try assertRejected(try write(good.prefix(length), "truncated-\(length).sqsb"))
        }
    }

    func testBitFlipsAnywhereAreRejected() throws {
        let n = good.count
        var positions = Set([0, 1, 3, 7, n / 2, n - 1, n - 2])
        for i in 1...8 { positions.insert(i * (n - 1) / 9) }
        XCTAssertGreaterThanOrEqual(positions.count, 15)
        for (i, position) in positions.sorted().enumerated() {
            var damaged = good
            damaged[position] ^= UInt8(1 << (i % 8))
            try assertRejected(try write(damaged, "flip-\(position)-bit\(i % 8).sqsb"))
        }
    }

    func testTrailingGarbageIsRejected() throws {
        try assertRejected(try write(good + Data("garbage\n".utf8), "trailing-text.sqsb"))
        try assertRejected(try write(good + Data([0]), "trailing-zero.sqsb"))
        try assertRejected(try write(good + good, "doubled.sqsb"))
    }

    func testOtherFilesAreRejected() throws {
        try assertRejected(try write(Data("hello, this is not a bundle at all\n".utf8), "text.sqsb"))
        try assertRejected(try write(Data(repeating: 0, count: good.count), "zeros.sqsb"))
        // A SQLite database handed to import by mistake.
        try assertRejected(try h.copyFile(source, to: "database-not-bundle.sqsb"))
    }

    func testUntrustedSignerIsRejected() throws {
        // A well-formed bundle signed by a key that is not in allowed_signers.
        let stranger = h.path("stranger.key")
        let keygen = try h.sqsync(["keygen", "--out", stranger, "--name", "stranger"])
        XCTAssertEqual(keygen.status, 0, keygen.stderr)
        let file = h.path("untrusted.sqsb")
        // From a clone: a replica signs with its own key only (docs/KEYS.md).
        let strangerReplica = h.path("stranger.db")
        try h.ok(["clone", source, strangerReplica])
        let export = try Harness.run(
            Harness.binary, ["export", strangerReplica, "-o", file, "--key", stranger, "--trust", h.trustFile])
        XCTAssertEqual(export.status, 0, export.stderr)
        try assertRejected(file)
        try assertRejected(file, extra: ["--dry-run"])
        let inspect = try h.sqsync(["inspect", file])
        XCTAssertEqual(inspect.status, 3, inspect.stderr)
        XCTAssertTrue(inspect.stdout.contains("verified   no"), inspect.stdout)

        // An empty allowed_signers trusts nobody, not even A.
        let nobody = h.path("nobody_allowed")
        _ = FileManager.default.createFile(atPath: nobody, contents: Data())
        let before = try h.fullDump(target)
        let result = try Harness.run(Harness.binary, ["import", target, goodPath, "--trust", nobody, "--key", h.keyPath("B")])
        XCTAssertEqual(result.status, 3, result.stderr)
        XCTAssertEqual(result.stderrLines.count, 1, result.stderr)
        XCTAssertEqual(try h.fullDump(target), before)
    }

    func testSignatureFromAnotherBundleIsRejected() throws {
        // Same signer, same length class: the signature trailer of one bundle on the body of another.
        try h.sqlite(source, "UPDATE t SET a = 'other' WHERE id = '3';")
        let other = h.fileBytes(try h.export(source, as: "A"))
        // Layout (Sources/Bundle/BundleWriter.swift): payload, signature, 4-byte big-endian length, "SQSYNC-SIG\n".
        func trailerLength(_ data: Data) -> Int? {
            let magic = Data("SQSYNC-SIG\n".utf8)
            guard data.count > magic.count + 4, data.suffix(magic.count) == magic else { return nil }
            let lengthBytes = Array(data.dropLast(magic.count).suffix(4))
            let signature = lengthBytes.reduce(0) { $0 << 8 | Int($1) }
            return signature + 4 + magic.count < data.count ? signature + 4 + magic.count : nil
        }
        guard let mine = trailerLength(good), let theirs = trailerLength(other) else {
            throw XCTSkip("bundle trailer layout changed; splice not applicable")
        }
        let spliced = good.prefix(good.count - mine) + other.suffix(theirs)
        XCTAssertNotEqual(spliced, good)
        try assertRejected(try write(spliced, "spliced-signature.sqsb"))
    }

    func testCorruptBundleInAFolderIsRejected() throws {
        let folder = h.path("inbox")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let name = URL(fileURLWithPath: goodPath).lastPathComponent
        try good.prefix(good.count / 2).write(to: URL(fileURLWithPath: folder + "/" + name))
        let before = try h.fullDump(target)
        let result = try h.sqsync(["import", target, folder], key: "B")
        XCTAssertEqual(result.status, 3, result.stderr)
        XCTAssertEqual(result.stderrLines.count, 1, result.stderr)
        XCTAssertTrue(result.stderr.contains(name), result.stderr)
        XCTAssertEqual(try h.fullDump(target), before)
    }

    // MARK: controls

    func testValidBundleRenamedStillVerifiesAndApplies() throws {
        let renamed = try write(good, "notes-from-the-field.txt")
        let inspect = try h.ok(["inspect", renamed])
        XCTAssertTrue(inspect.stdout.contains("verified   yes"), inspect.stdout)
        let result = try h.ok(["import", target, renamed], key: "B")
        XCTAssertTrue(result.stderrLines.allSatisfy { !$0.contains("error") }, result.stderr)
        XCTAssertEqual(try h.dump(target, table: "t", orderBy: "id"), try h.dump(source, table: "t", orderBy: "id"))
        XCTAssertEqual(try h.dump(target, table: "u", orderBy: "k1, k2"), try h.dump(source, table: "u", orderBy: "k1, k2"))
    }

    func testTargetStillImportsTheGoodBundleAfterTheCorpus() throws {
        try assertRejected(try write(good.prefix(good.count - 1), "almost.sqsb"))
        var flipped = good
        flipped[good.count / 3] ^= 0x80
        try assertRejected(try write(flipped, "flipped.sqsb"))
        try h.ok(["import", target, goodPath], key: "B")
        XCTAssertEqual(try h.dump(target, table: "t", orderBy: "id"), try h.dump(source, table: "t", orderBy: "id"))
        XCTAssertEqual(try h.ok(["doctor", target]).status, 0)
    }
}
