import Crypto
import Foundation
import SQLiteDatabase
import TestSupport
import XCTest

@testable import Bundle
@testable import ChangeLog

/// The bundle file of docs/BUNDLE_FORMAT.md (version 3) end to end: a bundle read back gives
/// exactly what the exporter produced; every damaged, truncated, untrusted, malformed or
/// older file is refused with a BundleError and leaves the receiving replica as it was; a
/// large bundle streams.
final class BundleFormatTests: XCTestCase {
    private var directory: String!
    private let key = SigningKey.generate(comment: "alice@site-a")
    private let otherKey = SigningKey.generate(comment: "mallory@elsewhere")
    /// A trusted key whose bundles the tests write by hand (``HandBundle``), as an attacker
    /// holding it would: validly signed, whatever they carry.
    private let hand = HandKey("hand")
    /// Another trusted key, of another replica.
    private let neighbour = HandKey("neighbour")
    private var trust: AllowedSigners!

    private static let schema = """
        CREATE TABLE vals (id TEXT PRIMARY KEY, v, note TEXT);
        CREATE TABLE pairs (a TEXT, b BLOB, c REAL, v, PRIMARY KEY (a, b, c)) WITHOUT ROWID;
        """
    private static let valsTable = ("vals", ["id", "v", "note"], [0])

    override func setUpWithError() throws {
        directory =
            FileManager.default.temporaryDirectory.appendingPathComponent("sqsync-bundle-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        trust = try AllowedSigners(
            text: [
                AllowedSigners.line(principal: "alice", key: key.publicKey), hand.allowedSignersLine,
                neighbour.allowedSignersLine,
            ].joined(separator: "\n") + "\n")
    }

    override func tearDown() {
        if let directory { try? FileManager.default.removeItem(atPath: directory) }
    }

    private func path(_ name: String) -> String { directory + "/" + name }

    private func bytes(of file: String) throws -> [UInt8] { Array(try Data(contentsOf: URL(fileURLWithPath: file))) }

    // MARK: Replicas

    /// A replica of the test schema. With `key`, its knowledge ID is made from that key, as
    /// `sqsync init --key` makes it; with `rows`, it holds every kind of SQLite value, composite
    /// keys, updates of single columns and deletes.
    private func replica(_ name: String, key: SigningKey? = nil, rows: Bool) throws -> Replica {
        let replica = try Replica.initialize(
            path: path(name + ".db"), name: name, knowledgeID: key.map { ReplicaIdentity.knowledgeID(for: $0.publicKey) }
        ).replica
        try replica.database.execute(Self.schema)
        try replica.track(["vals", "pairs"], allowIntegerPrimaryKey: false)
        guard rows else { return replica }
        let values: [SQLValue] = [
            .null, .integer(Int64.min), .integer(Int64.max), .integer(0), .real(-0.0), .real(Double("1e-310")!),
            .real(0.1 + 0.2), .real(Double.greatestFiniteMagnitude), .real(-.infinity), .text(""), .text("emoji 🧪 ünï 中文"),
            .blob([]), .blob((0..<300).map { UInt8($0 % 256) }),
        ]
        for (index, value) in values.enumerated() {
            try replica.database.run("INSERT INTO vals VALUES (?, ?, ?)", .text("v\(index)"), value, .text("n\(index)"))
        }
        try replica.fold()
        try replica.database.execute(
            """
            UPDATE vals SET note = 'updated' WHERE id IN ('v1', 'v5');
            UPDATE vals SET v = x'DEADBEEF' WHERE id = 'v2';
            DELETE FROM vals WHERE id = 'v3';
            INSERT INTO pairs VALUES ('a,''b', x'002C27', 1.5, 1), ('', x'', -0.25, NULL), ('x', x'FF', 1e300, 'gone');
            DELETE FROM pairs WHERE a = 'x';
            UPDATE pairs SET v = 2 WHERE a = '';
            """)
        return replica
    }

    /// A replica that never signs, with one row of its own: what a refused bundle must leave alone.
    private func receiver() throws -> Replica {
        let receiver = try replica("receiver-\(UUID().uuidString.prefix(4))", rows: false)
        try receiver.database.execute("INSERT INTO vals VALUES ('local', 1, 'mine')")
        try receiver.fold()
        return receiver
    }

    private func rows(_ replica: Replica, _ table: String) throws -> [[SQLValue]] {
        try replica.database.valueRows("SELECT * FROM \(quoteIdentifier(table)) ORDER BY 1, 2, 3")
    }

    /// The exporter's own header and row changes, every change of the replica's own.
    private func exporterChanges(_ replica: Replica) throws -> (ChangeSetHeader, [RowChange]) {
        try ChangeExporter.snapshot(of: replica, ownChangesAfter: 0) { exporter in
            var changes: [RowChange] = []
            try exporter.forEachChange { changes.append($0) }
            return (exporter.header, changes)
        }
    }

    /// Every change of `replica`'s, as `sqsync export -o` writes them.
    private func export(_ replica: Replica, _ name: String, key: SigningKey? = nil) throws -> String {
        try BundleExchange.export(
            replica: replica, since: Knowledge(), key: key ?? self.key, to: path(name), intoDirectory: false
        ).path
    }

    /// Every segment's changes, each segment's signer required trusted: what a reader that
    /// checks nothing beyond the file's own signatures gets out of it.
    private func readAll(_ file: String) throws -> [RowChange] {
        let reader = try BundleReader(path: file, trust: trust)
        var changes: [RowChange] = []
        try reader.readSegments(checkOrigin: { _, signer in
            guard trust.principal(for: signer, namespace: "sqsync") != nil else {
                throw BundleError(.untrusted, "\(file): a segment signed by untrusted key \(signer.fingerprint)")
            }
            return true
        }) { segment in
            try segment.forEachChange { changes.append($0) }
        }
        return changes
    }

    // MARK: Round trip

    /// An import merges with ``Replica/bulkPageCacheKiB`` of page cache (the replica's progress
    /// handler runs inside it, every 10,000 changes, with the rows the segment declares), and
    /// gives the connection back its own.
    func testImportMergesWithTheBulkPageCache() throws {
        let source = try replica("source", key: key, rows: false)
        try source.database.execute(
            """
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000)
            INSERT INTO vals SELECT 'k' || i, i, NULL FROM n
            """)
        let file = try export(source, "many.sqsb")
        let receiver = try replica("receiver", rows: false)
        try receiver.database.execute("PRAGMA cache_size = 100")
        var cacheWhileMerging: [SQLValue?] = []
        var told: [WorkProgress] = []
        receiver.progress = { progress in
            told.append(progress)
            cacheWhileMerging.append(try? receiver.database.scalar("PRAGMA cache_size"))
        }
        let result = try BundleExchange.importBundle(path: file, into: receiver, trust: trust)
        receiver.progress = nil
        XCTAssertEqual(result.summary.changes, 10000)
        XCTAssertEqual(cacheWhileMerging, [.integer(-Replica.bulkPageCacheKiB)])
        XCTAssertEqual(told, [WorkProgress(step: "importing many.sqsb", done: 10000, total: 10000, unit: "rows")])
        XCTAssertEqual(try receiver.database.scalar("PRAGMA cache_size"), .integer(100))
    }

    /// The file holds one segment of the source's, signed by its key, whose header is the
    /// exporter's and whose records are exactly the exporter's row changes (every SQLite value
    /// kind, composite keys, deletes, single-column updates, a row larger than a chunk); the
    /// envelope says who sent it and carries its key and statement; it imports into a replica
    /// that never saw any of it, and a second import changes nothing.
    func testBundleReadsBackExactlyWhatTheExporterProduced() throws {
        let source = try replica("source", key: key, rows: true)
        try source.database.run(
            "INSERT INTO vals VALUES ('big', ?, NULL)", .blob((0..<(1 << 20) + 100).map { _ in UInt8.random(in: 0...255) }))
        let exported = try BundleExchange.export(
            replica: source, since: Knowledge(), key: key, to: path("all.sqsb"), intoDirectory: false)
        let (header, expected) = try exporterChanges(source)
        XCTAssertEqual(expected.filter(\.isDelete).count, 2)
        XCTAssertTrue(
            expected.contains { change in change.columns.contains { $0.stamp != change.rowStamp } },
            "some cells carry stamps of their own")
        XCTAssertEqual(exported.rows, expected.count)

        let reader = try BundleReader(path: exported.path, trust: trust)
        XCTAssertEqual(reader.principal, "alice")
        XCTAssertEqual(reader.envelope, exported.envelope)
        XCTAssertEqual(reader.envelope.sender.id, source.knowledgeID)
        XCTAssertEqual(reader.envelope.senderSeq, header.last)
        XCTAssertEqual(reader.envelope.identities, [BundleEnvelope.Identity(site: 0, key: key.publicKey)])
        XCTAssertEqual(reader.envelope.acknowledgements.map(\.replica), [source.knowledgeID])
        XCTAssertTrue(reader.envelope.acknowledgements[0].isSigned(by: key.publicKey))
        XCTAssertEqual(reader.envelope.segments.count, 1)
        var read: [RowChange] = []
        var segments = 0
        try reader.readSegments(checkOrigin: { entry, signer in
            XCTAssertEqual(entry.site, 0)
            XCTAssertEqual(signer, self.key.publicKey)
            return true
        }) { segment in
            segments += 1
            XCTAssertEqual(segment.header.changes, header)
            XCTAssertGreaterThanOrEqual(segment.header.chunks.count, 2, "the large row is a chunk of its own")
            try segment.forEachChange { read.append($0) }
        }
        XCTAssertEqual(segments, 1)
        XCTAssertEqual(read, expected)

        let receiver = try replica("receiver", rows: false)
        let cacheBefore = try receiver.database.scalar("PRAGMA cache_size")
        let result = try BundleExchange.importBundle(path: exported.path, into: receiver, trust: trust)
        XCTAssertEqual(result.outcome, .applied)
        XCTAssertEqual(result.signer, "alice")
        XCTAssertEqual(result.sender, source.knowledgeID)
        XCTAssertEqual(
            try receiver.database.scalar("PRAGMA cache_size"), cacheBefore,
            "the import gives the connection back its own page cache")
        for table in ["vals", "pairs"] { XCTAssertEqual(try rows(receiver, table), try rows(source, table), table) }
        XCTAssertEqual(try receiver.knowledge()[source.knowledgeID], header.last)
        // What the second import may touch is who was heard from when (and the generation
        // those raise); the data and its metadata must stay as they are.
        let bookkeeping: Set<String> = ["_sqsync_sites", "_sqsync_acks", "_sqsync_generation"]
        let once = try receiver.database.everyTable().filter { !bookkeeping.contains($0.key) }
        XCTAssertEqual(try BundleExchange.importBundle(path: exported.path, into: receiver, trust: trust).summary.changes, 0)
        XCTAssertEqual(try receiver.database.everyTable().filter { !bookkeeping.contains($0.key) }, once)
    }

    /// A table with counter and max columns: the segment names capability merge-policies and
    /// every column's policy, counter contributions travel beside the counter's base, and the
    /// receiver ends with the same values.
    func testPoliciesAndCounterContributionsRoundTrip() throws {
        func counted(_ name: String, key: SigningKey?) throws -> Replica {
            let replica = try Replica.initialize(
                path: path(name + ".db"), name: name, knowledgeID: key.map { ReplicaIdentity.knowledgeID(for: $0.publicKey) }
            ).replica
            try replica.database.execute("CREATE TABLE stock (id TEXT PRIMARY KEY, qty INTEGER, seen, note TEXT)")
            try replica.track(["stock"], allowIntegerPrimaryKey: false)
            try replica.setPolicy(.counter, table: "stock", column: "qty")
            try replica.setPolicy(.max, table: "stock", column: "seen")
            return replica
        }
        let source = try counted("counted", key: key)
        try source.database.execute(
            """
            INSERT INTO stock VALUES ('tent', 10, 1, 'a'), ('rope', 2.5, NULL, 'b');
            UPDATE stock SET qty = qty - 3, seen = 4 WHERE id = 'tent';
            """)
        try source.fold()
        try source.database.execute("UPDATE stock SET qty = qty + 1.25 WHERE id = 'rope'")
        let file = try export(source, "counted.sqsb")
        let (header, expected) = try exporterChanges(source)
        XCTAssertEqual(header.tables[0].policies, [.lww, .counter, .max, .lww])
        XCTAssertEqual(expected.flatMap(\.counters).count, 2, "one contribution per changed counter cell")
        let tent = try XCTUnwrap(expected.first { $0.key == [.text("tent")] })
        XCTAssertEqual(tent.columns.first { $0.column == 1 }?.value, .integer(10), "the counter travels as its base")

        let capability: [UInt8] = [1, 14] + Array("merge-policies".utf8)
        let fileBytes = try bytes(of: file)
        XCTAssertTrue(
            (0...(fileBytes.count - capability.count)).contains { Array(fileBytes[$0..<($0 + capability.count)]) == capability },
            "the signed segment header names the capability")
        let reader = try BundleReader(path: file, trust: trust)
        var read: [RowChange] = []
        try reader.readSegments(checkOrigin: { _, _ in true }) { segment in
            XCTAssertEqual(segment.header.changes.tables, header.tables)
            try segment.forEachChange { read.append($0) }
        }
        XCTAssertEqual(read, expected)

        let receiver = try counted("receiver", key: nil)
        XCTAssertEqual(try BundleExchange.importBundle(path: file, into: receiver, trust: trust).outcome, .applied)
        let all = "SELECT * FROM stock ORDER BY id"
        XCTAssertEqual(try receiver.database.valueRows(all), try source.database.valueRows(all))
        XCTAssertEqual(try receiver.database.valueRows(all)[1], [.text("tent"), .integer(7), .integer(4), .text("a")])
    }

    // MARK: Refusals

    /// Writes `bytes` as a bundle and checks it is refused: by a ``BundleReader`` reading every
    /// segment (when `byReader`; some refusals need the replica's key pins or clock), and by an
    /// import, with a one-line BundleError of one of `kinds` that names the file and `words`,
    /// after which the replica holds exactly what it held.
    private func assertRefused(
        _ bytes: [UInt8], _ what: String, kinds: Set<BundleError.Kind> = [.corrupt, .untrusted], naming words: [String] = [],
        byReader: Bool = true, into receiver: Replica, file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let bundle = path("case-\(UUID().uuidString.prefix(8)).sqsb")
        XCTAssertTrue(FileManager.default.createFile(atPath: bundle, contents: Data(bytes)))
        defer { try? FileManager.default.removeItem(atPath: bundle) }
        if byReader {
            do {
                let count = try readAll(bundle).count
                XCTFail("\(what): the reader accepted it (\(count) rows)", file: file, line: line)
            } catch let error as BundleError {
                XCTAssertTrue(kinds.contains(error.kind), "\(what): \(error.kind) \(error)", file: file, line: line)
            } catch {
                XCTFail("\(what): the reader threw \(type(of: error)), not a BundleError: \(error)", file: file, line: line)
            }
        }
        let before = try receiver.database.everyTable()
        do {
            let result = try BundleExchange.importBundle(path: bundle, into: receiver, trust: trust)
            XCTFail("\(what): imported (\(result.outcome), \(result.summary.changes) rows)", file: file, line: line)
        } catch let error as BundleError {
            XCTAssertTrue(kinds.contains(error.kind), "\(what): \(error.kind) \(error)", file: file, line: line)
            XCTAssertTrue(error.description.contains(bundle), "\(what): does not name the file: \(error)", file: file, line: line)
            XCTAssertFalse(error.description.contains("\n"), "\(what): not one line: \(error)", file: file, line: line)
            for word in words {
                XCTAssertTrue(error.description.contains(word), "\(what): should say \(word): \(error)", file: file, line: line)
            }
        } catch {
            XCTFail("\(what): the import threw \(type(of: error)), not a BundleError: \(error)", file: file, line: line)
        }
        XCTAssertEqual(try receiver.database.everyTable(), before, "\(what): the import changed the replica", file: file, line: line)
    }

    /// Where the parts of a bundle lie: docs/BUNDLE_FORMAT.md, "file".
    private struct Layout {
        var segments: [BundleEnvelope.SegmentEntry]
        var envelope: Range<Int>
        var signature: Range<Int>
        var trailer: Range<Int>
    }

    private func layout(_ file: String) throws -> Layout {
        let reader = try BundleReader(path: file, trust: trust)
        let size = try bytes(of: file).count
        let trailer = (size - 8 - 11)..<size
        let envelope = reader.envelope.bodyLength..<(reader.envelope.bodyLength + (try envelopeBytes(file).count))
        return Layout(
            segments: reader.envelope.segments, envelope: envelope, signature: envelope.upperBound..<trailer.lowerBound,
            trailer: trailer)
    }

    /// The envelope's bytes, as the trailer's lengths place them.
    private func envelopeBytes(_ file: String) throws -> [UInt8] {
        let all = try bytes(of: file)
        let lengths = all.suffix(19).prefix(8).map { Int($0) }
        let envelopeLength = lengths[0..<4].reduce(0) { $0 << 8 | $1 }
        let signatureLength = lengths[4..<8].reduce(0) { $0 << 8 | $1 }
        let start = all.count - 19 - signatureLength - envelopeLength
        return Array(all[start..<(start + envelopeLength)])
    }

    private func u32(_ value: Int) -> [UInt8] {
        [UInt8(value >> 24 & 0xff), UInt8(value >> 16 & 0xff), UInt8(value >> 8 & 0xff), UInt8(value & 0xff)]
    }

    /// Body and envelope as they are, signed anew (SSHSIG, as BundleWriter signs) and trailed.
    private func resigned(_ file: String, namespace: String = "sqsync", key: SigningKey) throws -> [UInt8] {
        let all = try bytes(of: file)
        let parts = try layout(file)
        let envelope = Array(all[parts.envelope])
        let blob = try SSHSignature.sign(messageDigest: SHA512.hash(data: envelope), namespace: namespace, key: key).blob
        return Array(all[..<parts.envelope.lowerBound]) + envelope + blob + u32(envelope.count) + u32(blob.count)
            + Array("SQSYNC-SIG\n".utf8)
    }

    /// Single bit flips in every region of a bundle (magic, version, each segment's header,
    /// signer, signature and chunks, the envelope, the sender's signature, the trailer's
    /// lengths and magic, and evenly between), truncations at many offsets, wrong trailers and
    /// files that are no bundle: each is refused, and an import leaves the replica as it was.
    func testDamagedFilesAreRefusedAndChangeNothing() throws {
        let source = try replica("source", key: key, rows: true)
        let file = try export(source, "good.sqsb")
        let good = try bytes(of: file)
        let parts = try layout(file)
        let segment = try XCTUnwrap(parts.segments.first)
        XCTAssertEqual(segment.offset, 9)
        XCTAssertEqual(parts.segments.last.map { $0.offset + $0.length }, parts.envelope.lowerBound)
        let fresh = try receiver()
        XCTAssertEqual(try readAll(file).count, try exporterChanges(source).1.count, "the undamaged file reads")

        var positions: Set<Int> = [0, 7, 8, 9, 10, 11, 30, segment.offset + segment.length - 1]
        // The segment: header, signer key, origin signature, first chunk byte.
        var headerLength = 0, headerStart = segment.offset
        for shift in stride(from: 0, to: 28, by: 7) {
            headerLength |= Int(good[headerStart] & 0x7f) << shift
            headerStart += 1
            if good[headerStart - 1] & 0x80 == 0 { break }
        }
        let headerEnd = headerStart + headerLength
        positions.formUnion([headerEnd - 1, headerEnd + 1, headerEnd + 40, headerEnd + 100, headerEnd + 160])
        positions.formUnion([parts.envelope.lowerBound, parts.envelope.lowerBound + 20, parts.envelope.upperBound - 1])
        positions.formUnion(stride(from: parts.signature.lowerBound, to: parts.signature.upperBound, by: 7))
        positions.formUnion(parts.trailer)
        for step in 0...40 { positions.insert(step * (good.count - 1) / 40) }
        for position in positions.sorted() {
            var damaged = good
            damaged[position] ^= UInt8(1 << (position % 8))
            try assertRefused(damaged, "bit \(position % 8) of byte \(position) of \(good.count) flipped", into: fresh)
        }

        var lengths: Set<Int> = [0, 1, 8, 9, 10, 27, 28, 29, segment.offset + segment.length, good.count - 1]
        lengths.formUnion([
            parts.envelope.lowerBound, parts.envelope.upperBound, parts.signature.upperBound, parts.trailer.lowerBound + 4,
        ])
        for step in 1..<30 { lengths.insert(step * good.count / 30) }
        for length in lengths.sorted() {
            try assertRefused(Array(good.prefix(length)), "truncated to \(length) of \(good.count) bytes", into: fresh)
        }

        // Trailers that do not describe the file: lengths off by one either way, swapped, out
        // of range, zero; bytes after the trailer.
        let envelopeLength = parts.envelope.count, signatureLength = parts.signature.count
        let withoutTrailer = Array(good[..<parts.trailer.lowerBound])
        let magic = Array("SQSYNC-SIG\n".utf8)
        for (envelope, signature) in [
            (envelopeLength + 1, signatureLength - 1), (envelopeLength - 1, signatureLength + 1),
            (envelopeLength, signatureLength + 1),
            (envelopeLength + 1, signatureLength), (signatureLength, envelopeLength), (0, signatureLength), (envelopeLength, 0),
            (Int(UInt32.max), signatureLength), (envelopeLength, Int(UInt32.max)), (good.count, good.count),
        ] {
            try assertRefused(
                withoutTrailer + u32(envelope) + u32(signature) + magic, "a trailer giving lengths \(envelope) and \(signature)",
                into: fresh)
        }
        try assertRefused(good + [0], "one byte after the trailer", into: fresh)
        try assertRefused(good + u32(envelopeLength) + u32(signatureLength) + magic, "a second trailer", into: fresh)
        try assertRefused(withoutTrailer, "no trailer", into: fresh)

        var random = SplitMix64(seed: 0xBAD_F11E)
        try assertRefused([], "an empty file", naming: ["not a bundle"], into: fresh)
        try assertRefused((0..<4096).map { _ in UInt8(truncatingIfNeeded: random.next()) }, "random bytes", into: fresh)
        try assertRefused(
            Array("SQSYNCB\0".utf8) + [3] + (0..<100).map { _ in UInt8(truncatingIfNeeded: random.next()) } + magic,
            "magic, noise and a trailer", into: fresh)
        try assertRefused(
            Array("SQSYNCB\0".utf8) + [3] + [UInt8](repeating: 0, count: 64) + u32(32) + u32(32) + magic,
            "a preamble and zeros", into: fresh)
        let held = directory + "/." + URL(fileURLWithPath: fresh.path).lastPathComponent + "-sqsync-held"
        XCTAssertFalse(FileManager.default.fileExists(atPath: held), "nothing was held")
    }

    /// A bundle signed by a key allowed_signers does not hold, a trusted key's signature made
    /// for another namespace, a good envelope re-signed by an untrusted key or not signed at
    /// all, a sender signing with another replica's trusted key, and a segment signed by a
    /// trusted key that is not its origin's: all refused, the replica unchanged.
    func testUntrustedSignersAreRefused() throws {
        let source = try replica("source", key: key, rows: true)
        let file = try export(source, "good.sqsb")
        let fresh = try receiver()

        let other = try replica("other", key: otherKey, rows: true)
        try assertRefused(
            try bytes(of: try export(other, "other.sqsb", key: otherKey)), "untrusted signer", kinds: [.untrusted],
            naming: ["untrusted key", otherKey.publicKey.fingerprint], into: fresh)
        try assertRefused(
            try resigned(file, namespace: "git", key: key), "signature in namespace git", kinds: [.untrusted],
            naming: ["namespace"], into: fresh)
        try assertRefused(
            try resigned(file, key: otherKey), "envelope re-signed by an untrusted key", kinds: [.untrusted],
            naming: ["untrusted key"], into: fresh)
        let good = try bytes(of: file)
        let parts = try layout(file)
        try assertRefused(
            Array(good[..<parts.signature.lowerBound]) + u32(parts.envelope.count) + u32(0) + Array("SQSYNC-SIG\n".utf8),
            "an unsigned envelope", into: fresh)

        // Hand-written, validly signed by trusted keys, but by the wrong ones.
        var asNeighbour = handBundle(handRecords())
        asNeighbour.signer = neighbour
        try assertRefused(
            asNeighbour.bytes(), "the sender's envelope signed by another replica's key", kinds: [.untrusted],
            naming: [
                "which signs with key \(try SSHPublicKey(rawRepresentation: hand.publicKey).fingerprint)",
                "signed by neighbour's key",
            ],
            byReader: false, into: fresh)
        asNeighbour.identities = []
        try assertRefused(
            asNeighbour.bytes(), "the same, the sender's identity left out", kinds: [.untrusted],
            naming: ["not the key that knowledge ID was made from"], byReader: false, into: fresh)
        let foreignSegment = handBundle(handRecords()) { $0.signer = self.neighbour }
        try assertRefused(
            foreignSegment.bytes(), "a segment signed by another replica's key", kinds: [.untrusted],
            naming: ["not that replica's key"], byReader: false, into: fresh)
        XCTAssertEqual(try rows(fresh, "vals"), [[.text("local"), .integer(1), .text("mine")]])
    }

    // MARK: Validly signed, malformed

    /// Two inserts `hand` makes as changes 1 and 2: the smallest integer, a real, text beyond ASCII.
    private func handRecords(now: Int64 = ClockBound.now) -> [HandRecord] {
        [
            HandRecord(
                key: [.text("hand-1")], rowStamp: HandStamp(hlc: now - 2, seq: 1),
                columns: [(1, .integer(Int64.min), nil), (2, .text("first ✓"), nil)]),
            HandRecord(
                key: [.text("hand-2")], rowStamp: HandStamp(hlc: now - 1, seq: 2),
                columns: [(1, .real(-0.5), nil), (2, .text("second"), nil)]),
        ]
    }

    /// A bundle of `hand`'s own changes 1 and 2, in one segment it signs, the sender's key
    /// given as its identity; `edit` changes the segment before it is written.
    private func handBundle(_ records: [HandRecord], edit: (inout HandSegment) -> Void = { _ in }) -> HandBundle {
        let now = ClockBound.now
        var segment = HandSegment(
            origin: hand.replicaID, base: 0, last: 2, created: now, tables: [Self.valsTable], records: records, signer: hand)
        segment.originName = "hand"
        edit(&segment)
        var bundle = HandBundle(
            sites: [
                HandSite(id: hand.replicaID, name: "hand", knowledge: segment.last),
                HandSite(id: neighbour.replicaID, name: "neighbour", knowledge: 0),
            ], senderSeq: segment.last, senderHLC: now, signer: hand)
        bundle.identities = [(0, hand.identity)]
        bundle.segments = [segment]
        return bundle
    }

    /// `records` with bytes changed: `edit` gets the records as the chunk holds them.
    private func editedRecords(
        _ records: [HandRecord], _ edit: @escaping (inout [[UInt8]]) -> Void
    ) -> (inout HandSegment) -> Void {
        { segment in
            var bytes = segment.recordBytes()
            edit(&bytes)
            segment.chunks = [HandChunk(raw: bytes.flatMap { $0 }, records: records.count)]
        }
    }

    /// Bundles whose every signature verifies (`hand`'s key is trusted, and its replica's ID
    /// is made from it) but whose segment breaks a rule of docs/BUNDLE_FORMAT.md: each is
    /// refused for that rule, named in the error. The same bundle written well imports.
    func testValidlySignedButMalformedSegmentsAreRefused() throws {
        let fresh = try receiver()
        let records = handRecords()
        let control = path("control.sqsb")
        try handBundle(records).write(to: control)
        let controlChanges = try readAll(control)
        XCTAssertEqual(controlChanges.map(\.key), [[.text("hand-1")], [.text("hand-2")]])
        XCTAssertEqual(controlChanges[0].columns.map(\.value), [.integer(Int64.min), .text("first ✓")])

        // A value or row over this replica's cap is refused as such (the sender's cap may be
        // larger), and read again once the cap is raised; everything else is damage.
        let damage: Set<BundleError.Kind> = [.corrupt, .untrusted]
        func refused(
            _ what: String, kinds: Set<BundleError.Kind> = damage, naming words: [String],
            _ edit: @escaping (inout HandSegment) -> Void, line: UInt = #line
        ) throws {
            try assertRefused(handBundle(records, edit: edit).bytes(), what, kinds: kinds, naming: words, into: fresh, line: line)
        }
        func refused(
            _ what: String, kinds: Set<BundleError.Kind> = damage, naming words: [String], records changed: [HandRecord],
            line: UInt = #line
        ) throws {
            try assertRefused(handBundle(changed).bytes(), what, kinds: kinds, naming: words, into: fresh, line: line)
        }
        func withRecord(_ index: Int, _ change: (inout HandRecord) -> Void) -> [HandRecord] {
            var changed = records
            change(&changed[index])
            return changed
        }

        // Stamps: only the origin's own, within the range it signed and the clock it wrote at.
        try refused(
            "a stamp of another replica", naming: ["another replica"],
            records: withRecord(1) { $0.rowStamp?.site = 1 })
        try refused(
            "a change numbered past the range", naming: ["outside the range 1-2"],
            records: withRecord(1) { $0.rowStamp?.seq = 3 })
        try refused(
            "a change numbered at the base", naming: ["outside the range 1-2"],
            records: withRecord(0) { $0.rowStamp?.seq = 0 })
        try refused(
            "a column stamped past the range", naming: ["outside the range 1-2"],
            records: withRecord(1) { $0.columns[1].2 = HandStamp(hlc: ClockBound.now - 1, seq: 7) })
        try refused(
            "a clock past the segment's", naming: ["clock past the one they were made at"],
            records: withRecord(1) { $0.rowStamp?.hlc = ClockBound.now + 60_000 })
        try refused("causal length 0", naming: ["causal length 0 out of range"], records: withRecord(0) { $0.causalLength = 0 })

        // Values.
        try refused(
            "a value longer than the cap", kinds: [.overCap], naming: ["vals.note", "SQSYNC_MAX_VALUE_BYTES"],
            records: withRecord(1) { $0.columns[1].1 = .textClaiming(length: 900 << 20, actual: Array("tiny".utf8)) })
        try refused(
            "a text running past its chunk", naming: ["runs past its chunk"],
            records: withRecord(1) { $0.columns[1].1 = .textClaiming(length: 1000, actual: Array("short".utf8)) })
        try refused(
            "a text that is not UTF-8", naming: ["not UTF-8"],
            records: withRecord(1) { $0.columns[1].1 = .textClaiming(length: 2, actual: [0xff, 0xfe]) })
        try refused(
            "an unknown value type", naming: ["unknown value type"],
            editedRecords(records) { bytes in
                let tagged = [BundleCodec.ValueTag.text.rawValue, 6] + Array("hand-1".utf8)
                let at = (0...(bytes[0].count - tagged.count)).first { Array(bytes[0][$0..<($0 + tagged.count)]) == tagged }!
                bytes[0][at] = 5
            })

        // Tables and columns.
        for table in ["_sqsync_rows", "sqlite_schema"] {
            try refused("writes to \(table)", naming: [table, "sqsync's own"]) {
                $0.tables = [(table, ["id", "v", "note"], [0])]
            }
        }
        try refused("a table listed twice", naming: ["listed twice"]) { $0.tables = [Self.valsTable, Self.valsTable] }
        try refused("a column listed twice", naming: ["listed twice"]) { $0.tables = [("vals", ["id", "v", "V"], [0])] }
        try refused("a table without a key", naming: ["without a key"]) { $0.tables = [("vals", ["id", "v", "note"], [])] }
        try refused("a key column out of range", naming: ["key column 3 out of range"]) {
            $0.tables = [("vals", ["id", "v", "note"], [3])]
        }
        try refused("a table index out of range", naming: ["table 1 out of range"], records: withRecord(1) { $0.table = 1 })
        try refused(
            "a column index out of range", naming: ["column 5 out of range"], records: withRecord(1) { $0.columns[1].0 = 5 })

        // Record flags.
        for (flag, words) in [
            (0x40, ["reach without the reach capability"]), (0x80, ["unknown record type"]),
            (0x20, ["counter contributions without merge policies"]),
            (0x04, ["no previous table"]),
        ] {
            try refused("record flag \(flag)", naming: words, editedRecords(records) { $0[0][0] |= UInt8(flag) })
        }
        try refused("a record without the row bit", naming: ["unknown record type"], editedRecords(records) { $0[0][0] &= ~0x01 })
        // A reach (capability reach): at most 64 labels of at most 256 bytes, on both sides.
        func withReach(_ labels: [String]) -> (inout HandSegment) -> Void {
            { segment in
                segment.capabilities.append("reach")
                var bytes = segment.recordBytes()
                bytes[0][0] |= 0x40
                func varint(_ value: Int) -> [UInt8] { value < 0x80 ? [UInt8(value)] : [UInt8(value & 0x7F) | 0x80, UInt8(value >> 7)] }
                bytes[0] += varint(labels.count) + labels.flatMap { varint($0.utf8.count) + Array($0.utf8) }
                segment.chunks = [HandChunk(raw: bytes.flatMap { $0 }, records: records.count)]
            }
        }
        try refused("a reach of 65 labels", naming: ["length 65 out of range"], withReach((0..<65).map { "l\($0)" }))
        try refused("a label of 257 bytes", naming: ["length 257 out of range"], withReach([String(repeating: "x", count: 257)]))
        try refused(
            "column stamps with neither flag", naming: ["bad stamp flag"],
            editedRecords(records) { bytes in
                bytes[1][bytes[1].count - 1] = 2
            })

        // Chunks: counts, lengths and compression must be what the signed header says.
        let raw = HandSegment(
            origin: hand.replicaID, base: 0, last: 2, created: 0, tables: [Self.valsTable], records: records, signer: hand
        ).recordBytes().flatMap { $0 }
        let chunkCases: [(String, [String], [HandChunk])] = [
            ("a record count one too high", ["runs past its chunk"], [HandChunk(raw: raw, records: 3)]),
            ("a record count one too low", ["bytes after the last record"], [HandChunk(raw: raw, records: 1)]),
            ("a byte after the last record", ["bytes after the last record"], [HandChunk(raw: raw + [0], records: 2)]),
            (
                "a chunk inflating past its declared length", ["inflates past"],
                [HandChunk(rawLength: raw.count - 1, records: 2, compressed: HandChunk(raw: raw, records: 2).compressed)]
            ),
            (
                "a chunk inflating short of its declared length", ["does not match its declared"],
                [HandChunk(rawLength: raw.count + 10, records: 2, compressed: HandChunk(raw: raw, records: 2).compressed)]
            ),
            (
                "a decompression bomb", ["inflates past"],
                [
                    HandChunk(
                        rawLength: 1 << 20, records: 2,
                        compressed: try BlockCompression.compress([UInt8](repeating: 0, count: 8 << 20)))
                ]
            ),
            (
                "a chunk declaring more than a chunk may hold", ["SQSYNC_MAX_VALUE_BYTES", "table", "from replica"],
                [
                    HandChunk(
                        rawLength: BundleLimits.maxChunkBytes + 1, records: 2,
                        compressed: HandChunk(raw: raw, records: 2).compressed)
                ]
            ),
            (
                "a chunk that does not inflate", ["does not inflate"],
                [
                    HandChunk(
                        rawLength: raw.count, records: 2,
                        compressed: [0x78, 0x02] + HandChunk(raw: raw, records: 2).compressed.dropFirst(2))
                ]
            ),
            ("an empty chunk", ["an empty chunk"], [HandChunk(raw: [], records: 0)]),
            (
                "a record cut between two chunks", ["runs past its chunk"],
                [
                    HandChunk(raw: Array(raw.prefix(raw.count - 3)), records: 2),
                    HandChunk(raw: Array(raw.suffix(3)), records: 1),
                ]
            ),
        ]
        for (what, words, chunks) in chunkCases {
            try refused(what, kinds: what.contains("more than a chunk") ? [.overCap] : damage, naming: words) { $0.chunks = chunks }
        }

        // The header: a capability this reader lacks, a segment that is not its entry's.
        try refused("an unknown capability", naming: ["needs capability \"zstd-compressed\"", "upgrade sqsync"]) {
            $0.capabilities = ["zstd-compressed"]
        }
        try refused("a segment under another replica's entry", naming: ["not the one its envelope lists"]) {
            $0.origin = UUID().uuidString.lowercased()
        }
        try refused("records altered after the origin signed them", naming: ["altered after their origin signed them"]) {
            $0.alterChunkAfterSigning = true
        }

        let imported = try BundleExchange.importBundle(path: control, into: fresh, trust: trust)
        XCTAssertEqual(imported.summary.changes, 2, "the same bundle written well imports")
        XCTAssertEqual(
            try rows(fresh, "vals"),
            [
                [.text("hand-1"), .integer(Int64.min), .text("first ✓")], [.text("hand-2"), .real(-0.5), .text("second")],
                [.text("local"), .integer(1), .text("mine")],
            ])
    }

    /// A segment's records may be cut into chunks at any record boundary and read the same;
    /// a record never spans two chunks, and a varint with bits past 64 is refused wherever it
    /// stands.
    func testChunksHoldWholeRecordsAndReadTheSameHoweverCut() throws {
        let now = ClockBound.now
        let values: [HandValue] = [
            .integer(Int64.min), .real(-.infinity), .text("ünï 中文 🧪"), .blob([0, 0xff, 0x2c]), .null, .integer(Int64.max),
        ]
        let records = values.enumerated().map { index, value in
            HandRecord(
                key: [.text("row-\(index)")], rowStamp: HandStamp(hlc: now - 10 + Int64(index), seq: Int64(index) + 1),
                columns: [(1, value, nil), (2, .text("note \(index)"), nil)])
        }
        func bundle(_ chunks: [HandChunk]) throws -> String {
            var segment = HandSegment(
                origin: hand.replicaID, base: 0, last: Int64(records.count), created: now, tables: [Self.valsTable],
                records: records, signer: hand)
            segment.chunks = chunks
            var bundle = HandBundle(
                sites: [HandSite(id: hand.replicaID, name: "hand", knowledge: segment.last)], senderSeq: segment.last,
                senderHLC: now, signer: hand)
            bundle.segments = [segment]
            let file = path("cut-\(UUID().uuidString.prefix(8)).sqsb")
            try bundle.write(to: file)
            return file
        }
        let encoded = HandSegment(
            origin: hand.replicaID, base: 0, last: 6, created: now, tables: [Self.valsTable], records: records, signer: hand
        ).recordBytes()
        let whole = try readAll(try bundle([HandChunk(raw: encoded.flatMap { $0 }, records: records.count)]))
        XCTAssertEqual(
            whole.map { $0.columns[0].value },
            [
                .integer(Int64.min), .real(-.infinity), .text("ünï 中文 🧪"), .blob([0, 0xff, 0x2c]), .null, .integer(Int64.max),
            ])

        // Every way of cutting six records at their boundaries: 32.
        for cuts in 0..<(1 << (records.count - 1)) {
            var chunks: [HandChunk] = []
            var current: [UInt8] = [], count = 0
            for (index, record) in encoded.enumerated() {
                current += record
                count += 1
                if index == encoded.count - 1 || cuts & (1 << index) != 0 {
                    chunks.append(HandChunk(raw: current, records: count))
                    (current, count) = ([], 0)
                }
            }
            XCTAssertEqual(try readAll(try bundle(chunks)), whole, "cut after records \(String(cuts, radix: 2))")
        }
        // Cut inside a record, at every byte of the first two: refused.
        for index in 0..<2 {
            for split in 1..<encoded[index].count {
                let before = encoded[..<index].flatMap { $0 } + encoded[index].prefix(split)
                let after = encoded[index].dropFirst(split) + encoded[(index + 1)...].flatMap { $0 }
                let file = try bundle([
                    HandChunk(raw: Array(before), records: index + 1),
                    HandChunk(raw: Array(after), records: records.count - index),
                ])
                XCTAssertThrowsError(try readAll(file), "record \(index) cut after \(split) bytes") {
                    XCTAssertTrue("\($0)".contains("runs past its chunk"), "\($0)")
                }
            }
        }
        // Int64.min as stored: the integer tag, nine 0xff and a 0x01. A tenth byte above 1
        // carries bits past 64.
        let minimum: [UInt8] = [BundleCodec.ValueTag.integer.rawValue] + Array(repeating: 0xff, count: 9) + [0x01]
        let at = try XCTUnwrap(
            (0...(encoded[0].count - minimum.count)).first { Array(encoded[0][$0..<($0 + minimum.count)]) == minimum })
        var tooLong = encoded
        tooLong[0][at + minimum.count - 1] = 0x02
        for chunks in [
            [HandChunk(raw: tooLong.flatMap { $0 }, records: records.count)],
            [
                HandChunk(raw: tooLong[0], records: 1),
                HandChunk(raw: tooLong.dropFirst().flatMap { $0 }, records: records.count - 1),
            ],
        ] {
            XCTAssertThrowsError(try readAll(try bundle(chunks))) { XCTAssertTrue("\($0)".contains("varint too long"), "\($0)") }
        }
    }

    // MARK: Older and newer formats

    /// Versions 1 and 2 carried every replica's changes under the sender's signature alone:
    /// refused before anything else is read, saying to upgrade the sqsync that wrote them. A
    /// later version says to upgrade this one.
    func testOtherFormatVersionsAreRefusedWithWhatToUpgrade() throws {
        let fresh = try receiver()
        var random = SplitMix64(seed: 0x0_1D_F11E)
        for version: UInt8 in [1, 2] {
            for junk in [19, 100, 4096] {
                let bytes = Array("SQSYNCB\0".utf8) + [version] + (0..<junk).map { _ in UInt8(truncatingIfNeeded: random.next()) }
                try assertRefused(
                    bytes, "version \(version) and \(junk) bytes", kinds: [.corrupt],
                    naming: ["version \(version)", "older sqsync", "upgrade sqsync where it was written"], into: fresh)
            }
        }
        let newer = Array("SQSYNCB\0".utf8) + [6] + [UInt8](repeating: 7, count: 100)
        try assertRefused(newer, "version 6", kinds: [.corrupt], naming: ["version 6", "newer", "upgrade sqsync"], into: fresh)
    }

    /// Each acknowledgement statement is read as a whole knowledge vector, one entry per
    /// replica listed: an envelope of 600 replicas and 600 statements (4 MiB of vectors from
    /// 60 KB of file) is refused before any is built; 100 of them are read.
    func testStatementsTimesReplicasIsBounded() throws {
        let fresh = try receiver()
        let now = ClockBound.now
        var bundle = HandBundle(
            sites: [HandSite(id: hand.replicaID, name: "hand", knowledge: 0)]
                + (1..<600).map { HandSite(id: UUID().uuidString, name: "r\($0)", knowledge: 0) },
            senderSeq: 0, senderHLC: now, signer: hand)
        bundle.identities = [(0, hand.identity)]
        bundle.blankStatements = 600
        try assertRefused(
            bundle.bytes(), "600 statements of 600 replicas", kinds: [.corrupt],
            naming: ["600 acknowledgement statements of 600 replicas"], into: fresh)
        bundle.blankStatements = 100
        let file = path("hundred.sqsb")
        try bundle.write(to: file)
        XCTAssertEqual(try BundleReader(path: file, trust: trust).envelope.acknowledgements.count, 100)
    }

    /// Trust follows chains of key moves in whatever order they come, in one pass.
    func testTrustFollowsALongChainOfMovesGivenBackwards() throws {
        var random = SplitMix64(seed: 0x00C4_A125)
        let keys = try (0...600).map { _ in
            try SSHPublicKey(rawRepresentation: (0..<32).map { _ in UInt8(truncatingIfNeeded: random.next()) })
        }
        let start = try AllowedSigners(text: AllowedSigners.line(principal: "first", key: keys[0]) + "\n")
        let moves = (0..<600).reversed().map { (from: keys[$0], to: keys[$0 + 1]) }
        let followed = start.following(moves)
        XCTAssertEqual(followed.principal(for: keys[600], namespace: "sqsync"), "first")
        XCTAssertNil(start.following(Array(moves.dropLast())).principal(for: keys[600], namespace: "sqsync"))
    }

    // MARK: Streaming

    /// 100,000 rows go out in chunks of at most 1 MiB and come back one at a time, every one.
    func testLargeBundleStreams() throws {
        let source = try Replica.initialize(
            path: path("large.db"), name: "large", knowledgeID: ReplicaIdentity.knowledgeID(for: key.publicKey)
        ).replica
        try source.database.execute(
            """
            CREATE TABLE big (id TEXT PRIMARY KEY, n INTEGER, t TEXT);
            WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 100000)
            INSERT INTO big SELECT printf('row-%06d', i), i, 'text ' || i FROM c;
            """)
        XCTAssertEqual(try source.track(["big"], allowIntegerPrimaryKey: false).map(\.rows), [100_000])
        let result = try BundleExchange.export(
            replica: source, since: Knowledge(), key: key, to: path("large.sqsb"), intoDirectory: false)
        XCTAssertEqual(result.rows, 100_000)

        let reader = try BundleReader(path: result.path, trust: trust)
        var count = 0, sum: Int64 = 0, chunks = 0
        var keys: Set<String> = []
        try reader.readSegments(checkOrigin: { _, _ in true }) { segment in
            chunks += segment.header.chunks.count
            XCTAssertTrue(segment.header.chunks.allSatisfy { $0.rawLength <= 1 << 20 })
            try segment.forEachChange { change in
                count += 1
                if case .integer(let n)? = change.columns.first?.value { sum += n }
                if let key = change.key.first?.stringValue { keys.insert(key) }
            }
        }
        XCTAssertGreaterThan(chunks, 1, "the records are cut into chunks")
        XCTAssertEqual(count, 100_000)
        XCTAssertEqual(keys.count, 100_000)
        XCTAssertEqual(sum, 100_000 * 100_001 / 2, "every row's value arrived")
    }
}
