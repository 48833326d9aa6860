import Crypto
import Foundation
import SQLiteDatabase
import TestSupport
import XCTest

@testable import Bundle
@testable import ChangeLog

/// The bundle file end to end: a signed bundle read back gives exactly the exporter's row
/// changes; every damaged, truncated, untrusted or unknown-format file is refused and leaves
/// the receiving replica untouched; a large bundle streams.
final class BundleFormatTests: XCTestCase {
    private var directory: String!
    private let key = SigningKey.generate(comment: "alice@site-a")
    private let otherKey = SigningKey.generate(comment: "mallory@elsewhere")
    private var trust: AllowedSigners!

    private static let schema = """
        CREATE TABLE vals (id TEXT PRIMARY KEY, v, note TEXT);
        CREATE TABLE pairs (a TEXT, b BLOB, c REAL, v, PRIMARY KEY (a, b, c)) WITHOUT ROWID;
        """

    override func setUpWithError() throws {
        directory =
            FileManager.default.temporaryDirectory.appendingPathComponent("sqsync-bundle-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        trust = try AllowedSigners(text: AllowedSigners.line(principal: "alice", key: key.publicKey) + "\n")
    }

    override func tearDown() {
        if let directory { try? FileManager.default.removeItem(atPath: directory) }
    }

    private func path(_ name: String) -> String { directory + "/" + name }

    // MARK: Replicas

    private func replica(_ name: String, rows: Bool) throws -> Replica {
        let replica = try Replica.initialize(path: path(name + ".db"), name: name).replica
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

    /// Every user row and every row of sqsync's own tables, for "nothing changed" checks.
    private func snapshot(_ replica: Replica) throws -> [String: [String]] {
        var result: [String: [String]] = [:]
        for name in try replica.database.valueRows("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name").compactMap({
            $0[0].stringValue
        }) {
            result[name] = try replica.database.valueRows("SELECT * FROM \(quoteIdentifier(name))").map { "\($0)" }.sorted()
        }
        return result
    }

    private func rows(_ replica: Replica, _ table: String) throws -> [[SQLValue]] {
        try replica.database.valueRows("SELECT * FROM \(quoteIdentifier(table)) ORDER BY 1, 2")
    }

    private func exporterChanges(_ replica: Replica) throws -> (ChangeSetHeader, [RowChange]) {
        try replica.fold()
        return try replica.readSnapshot {
            let exporter = try ChangeExporter(replica: replica, since: Knowledge())
            var changes: [RowChange] = []
            try exporter.forEachChange { changes.append($0) }
            return (exporter.header, changes)
        }
    }

    private func export(_ replica: Replica, _ name: String, key: SigningKey? = nil) throws -> String {
        try BundleExchange.export(
            replica: replica, since: Knowledge(), key: key ?? self.key, to: path(name), intoDirectory: false
        ).path
    }

    // MARK: Round trip

    /// An import merges with ``Replica/bulkPageCacheKiB`` of page cache (the progress callback
    /// runs inside it, every 10,000 changes), and gives the connection back its own.
    func testImportMergesWithTheBulkPageCache() throws {
        let source = try replica("source", rows: false)
        try source.database.execute(
            """
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000)
            INSERT INTO vals SELECT 'k' || i, i, NULL FROM n
            """)
        let file = try export(source, "many.sqsb")
        let receiver = try replica("receiver", rows: false)
        try receiver.database.execute("PRAGMA cache_size = 100")
        var cacheWhileMerging: [SQLValue?] = []
        let result = try BundleExchange.importBundle(path: file, into: receiver, trust: trust) { _ in
            cacheWhileMerging.append(try? receiver.database.scalar("PRAGMA cache_size"))
        }
        XCTAssertEqual(result.summary.changes, 10000)
        XCTAssertEqual(cacheWhileMerging, [.integer(-Replica.bulkPageCacheKiB)])
        XCTAssertEqual(try receiver.database.scalar("PRAGMA cache_size"), .integer(100))
    }

    func testBundleReadsBackExactlyWhatTheExporterProduced() throws {
        let source = try replica("source", rows: true)
        try source.database.run(
            "INSERT INTO vals VALUES ('big', ?, NULL)", .blob((0..<(1 << 20)).map { _ in UInt8.random(in: 0...255) }))
        let file = try export(source, "all.sqsb")
        let (header, expected) = try exporterChanges(source)
        XCTAssertEqual(expected.filter(\.isDelete).count, 2)
        XCTAssertTrue(
            expected.contains { change in change.columns.contains { $0.stamp != change.rowStamp } },
            "some cells carry their own stamps")

        let reader = try BundleReader(path: file)
        XCTAssertEqual(try reader.verify(trust: trust), "alice")
        // The exporter's header plus the signed statements the export adds: the source's own.
        XCTAssertEqual(reader.header.statements.count, 1)
        var withStatements = header
        withStatements.statements = reader.header.statements
        XCTAssertEqual(reader.header, withStatements)
        var read: [RowChange] = []
        try reader.forEachChange { read.append($0) }
        XCTAssertEqual(read, expected)

        // And it imports into a replica that never saw any of it, twice without effect.
        let receiver = try replica("receiver", rows: false)
        let cacheBefore = try receiver.database.scalar("PRAGMA cache_size")
        let result = try BundleExchange.importBundle(path: file, into: receiver, trust: trust)
        XCTAssertEqual(result.outcome, .applied)
        XCTAssertEqual(result.signer, "alice")
        XCTAssertEqual(
            try receiver.database.scalar("PRAGMA cache_size"), cacheBefore, "the import gives the connection back its own page cache")
        for table in ["vals", "pairs"] { XCTAssertEqual(try rows(receiver, table), try rows(source, table), table) }
        // Bookkeeping moves with acknowledgements (`_sqsync_changes` forgets what every peer
        // holds); the data and its metadata must not.
        let bookkeeping: Set<String> = ["_sqsync_sites", "_sqsync_acks", "_sqsync_changes"]
        let once = try snapshot(receiver).filter { !bookkeeping.contains($0.key) }
        XCTAssertEqual(try BundleExchange.importBundle(path: file, into: receiver, trust: trust).summary.changes, 0)
        XCTAssertEqual(try snapshot(receiver).filter { !bookkeeping.contains($0.key) }, once)
    }

    // MARK: Corruption corpus

    /// The ways a bundle can be refused: every one must throw a BundleError from the reader,
    /// `verify` or `forEachChange`, and an import must leave the replica exactly as it was.
    private func assertRefused(
        _ bytes: [UInt8], _ what: String, kinds: Set<BundleError.Kind> = [.corrupt, .untrusted],
        into receiver: Replica, line: UInt = #line
    ) throws {
        let file = path("case-\(UUID().uuidString.prefix(8)).sqsb")
        XCTAssertTrue(FileManager.default.createFile(atPath: file, contents: Data(bytes)))
        defer { try? FileManager.default.removeItem(atPath: file) }
        do {
            let reader = try BundleReader(path: file)
            try reader.verify(trust: trust)
            var count = 0
            try reader.forEachChange { _ in count += 1 }
            XCTFail("\(what): accepted (\(count) rows)", line: line)
        } catch let error as BundleError {
            XCTAssertTrue(kinds.contains(error.kind), "\(what): \(error.kind) \(error)", line: line)
        } catch {
            XCTFail("\(what): threw \(type(of: error)) instead of a BundleError: \(error)", line: line)
        }
        let before = try snapshot(receiver)
        XCTAssertThrowsError(
            try BundleExchange.importBundle(path: file, into: receiver, trust: trust), "\(what): imported", line: line
        ) {
            XCTAssertTrue(($0 as? BundleError).map { kinds.contains($0.kind) } ?? false, "\(what): \($0)", line: line)
        }
        XCTAssertEqual(try snapshot(receiver), before, "\(what): the import changed the replica", line: line)
    }

    private func receiver() throws -> Replica {
        let receiver = try replica("fresh-\(UUID().uuidString.prefix(4))", rows: false)
        try receiver.database.execute("INSERT INTO vals VALUES ('local', 1, 'mine')")
        try receiver.fold()
        return receiver
    }

    func testDamagedFilesAreRefusedAndChangeNothing() throws {
        let source = try replica("source", rows: true)
        let good = Array(try Data(contentsOf: URL(fileURLWithPath: try export(source, "good.sqsb"))))
        let payloadLength = try BundleReader(path: path("good.sqsb")).payloadLength
        let fresh = try receiver()

        // Single bit flips: every region (magic, version, header, records, end, signature,
        // length, trailer magic), the rest spread evenly.
        var positions: Set<Int> = [
            0, 7, 8, 9, 10, 11, 20, payloadLength - 2, payloadLength - 1, payloadLength,
            payloadLength + 20, good.count - 60, good.count - 16, good.count - 15, good.count - 12, good.count - 1,
        ]
        for step in 0..<26 { positions.insert(step * (good.count - 1) / 25) }
        XCTAssertGreaterThanOrEqual(positions.count, 38)
        for position in positions.sorted() {
            var bytes = good
            bytes[position] ^= UInt8(1 << (position % 8))
            try assertRefused(bytes, "bit \(position % 8) of byte \(position) of \(good.count) flipped", into: fresh)
        }
        for length in [
            0, 1, 8, 20, payloadLength / 2, payloadLength - 1, payloadLength, payloadLength + 1,
            good.count - 16, good.count - 11, good.count - 1,
        ] {
            try assertRefused(Array(good.prefix(length)), "truncated to \(length) of \(good.count) bytes", into: fresh)
        }
        try assertRefused(good + [0], "one trailing byte", into: fresh)
        try assertRefused(good + Array("SQSYNC-SIG\n".utf8), "a second trailer", into: fresh)
        try assertRefused([], "empty file", into: fresh)
        var random = SystemRandomNumberGenerator()
        try assertRefused((0..<4096).map { _ in UInt8.random(in: 0...255, using: &random) }, "random bytes", into: fresh)
        try assertRefused(
            Array("SQSYNCB\0".utf8) + (0..<100).map { _ in UInt8.random(in: 0...255, using: &random) }
                + Array("SQSYNC-SIG\n".utf8),
            "magic, noise and a trailer", into: fresh)

        // Well formed, but signed by a key the receiver does not trust.
        // (From another replica: `source` itself signs with its own key only.)
        let other = try replica("other", rows: true)
        let untrusted = Array(try Data(contentsOf: URL(fileURLWithPath: try export(other, "other.sqsb", key: otherKey))))
        try assertRefused(untrusted, "untrusted signer", kinds: [.untrusted], into: fresh)
        // The trusted key, but a signature made for another purpose.
        let payload = Array(good.prefix(payloadLength))
        try assertRefused(try signed(payload, namespace: "git"), "signature in namespace git", kinds: [.untrusted], into: fresh)
        try assertRefused(
            try signed(payload, namespace: "sqsync", key: otherKey), "payload re-signed by an untrusted key",
            kinds: [.untrusted], into: fresh)
        // A bundle with the signature cut off and the payload alone.
        try assertRefused(payload, "unsigned payload", into: fresh)
        let heldFolder = directory + "/." + URL(fileURLWithPath: fresh.path).lastPathComponent + "-sqsync-held"
        XCTAssertFalse(FileManager.default.fileExists(atPath: heldFolder), "nothing was held")
    }

    /// Payload + SSHSIG trailer, as BundleWriter lays it out.
    private func signed(_ payload: [UInt8], namespace: String = "sqsync", key: SigningKey? = nil) throws -> [UInt8] {
        let blob = try SSHSignature.sign(messageDigest: SHA512.hash(data: payload), namespace: namespace, key: key ?? self.key)
            .blob
        let length = UInt32(blob.count)
        return payload + blob + [
            UInt8(length >> 24), UInt8(length >> 16 & 0xff), UInt8(length >> 8 & 0xff), UInt8(length & 0xff),
        ]
            + Array("SQSYNC-SIG\n".utf8)
    }

    private func varint(_ value: Int) -> [UInt8] {
        var bytes: [UInt8] = [], rest = UInt64(value)
        while rest >= 0x80 { bytes.append(UInt8(rest & 0x7f) | 0x80); rest >>= 7 }
        return bytes + [UInt8(rest)]
    }

    /// A payload taken apart: everything before the records, and the records as one plain
    /// stream (version 2 stores them in deflate blocks).
    private struct PayloadParts {
        var prefix: [UInt8]
        var records: [UInt8]
        /// Offset of the header-length varint and its value.
        var headerLengthOffset: Int
        var headerLength: Int
    }

    private func parts(of payload: [UInt8]) throws -> PayloadParts {
        var offset = 10
        func varintAt(_ position: inout Int) -> Int {
            var value = 0, shift = 0
            while true {
                let byte = payload[position]
                value |= Int(byte & 0x7f) << shift
                position += 1
                if byte & 0x80 == 0 { return value }
                shift += 7
            }
        }
        let headerLengthOffset = offset
        let headerLength = varintAt(&offset)
        let recordsStart = offset + headerLength
        var position = recordsStart
        var records: [UInt8] = []
        while true {
            let raw = varintAt(&position), compressedLength = varintAt(&position)
            if raw == 0 { break }
            var block: [UInt8] = []
            try BlockCompression.inflate(
                Array(payload[position..<(position + compressedLength)]), rawLength: raw, into: &block, path: "test")
            records += block
            position += compressedLength
        }
        XCTAssertEqual(position, payload.count, "the payload ends with the empty block")
        return PayloadParts(
            prefix: Array(payload[..<recordsStart]), records: records, headerLengthOffset: headerLengthOffset,
            headerLength: headerLength)
    }

    /// Records packed back into one deflate block and the end block, as the writer does.
    private func packed(_ prefix: [UInt8], _ records: [UInt8]) throws -> [UInt8] {
        let compressed = try BlockCompression.compress(records)
        return prefix + varint(records.count) + varint(compressed.count) + compressed + [0, 0]
    }

    /// Validly signed by a trusted key, but not a bundle this reader understands: the reader
    /// must still refuse, and an import that got as far as applying rows must roll back.
    func testValidlySignedButMalformedPayloadsAreRefused() throws {
        let source = try replica("source", rows: true)
        let file = try export(source, "good.sqsb")
        let reader = try BundleReader(path: file)
        XCTAssertEqual(reader.version, 2)
        let payload = Array(try Data(contentsOf: URL(fileURLWithPath: file)).prefix(reader.payloadLength))
        var count = 0
        try reader.forEachChange { _ in count += 1 }
        XCTAssertLessThan(count, 128, "the end record's count is one byte here")
        let parts = try parts(of: payload)
        let records = parts.records, prefix = parts.prefix
        XCTAssertEqual(Array(records.suffix(2)), [0, UInt8(count)])
        XCTAssertEqual(payload[9], 0, "version 2 bundles name no capability")
        let fresh = try receiver()

        // Control: the same records packed and signed here are accepted, so the cases below
        // are refused for what they change and not for how they were signed or packed.
        let control = path("control.sqsb")
        XCTAssertTrue(FileManager.default.createFile(atPath: control, contents: Data(try signed(packed(prefix, records)))))
        let controlReader = try BundleReader(path: control)
        XCTAssertEqual(try controlReader.verify(trust: trust), "alice")
        var controlCount = 0
        try controlReader.forEachChange { _ in controlCount += 1 }
        XCTAssertEqual(controlCount, count)

        var version3 = payload
        version3[8] = 3
        try assertRefused(try signed(version3), "format version 3", kinds: [.corrupt], into: fresh)

        var capability = payload
        capability.replaceSubrange(9...9, with: [1] + varint(15) + Array("zstd-compressed".utf8))
        try assertRefused(try signed(capability), "unknown capability", kinds: [.corrupt], into: fresh)

        var moreRecords = records
        moreRecords[moreRecords.count - 1] = UInt8(count + 1)
        try assertRefused(try signed(packed(prefix, moreRecords)), "end count one too high", kinds: [.corrupt], into: fresh)
        var fewerRecords = records
        fewerRecords[fewerRecords.count - 1] = UInt8(count - 1)
        try assertRefused(try signed(packed(prefix, fewerRecords)), "end count one too low", kinds: [.corrupt], into: fresh)
        try assertRefused(
            try signed(packed(prefix, records + [0])), "a byte after the end record", kinds: [.corrupt], into: fresh)
        try assertRefused(try signed(payload + [0]), "a byte after the end block", kinds: [.corrupt], into: fresh)
        try assertRefused(
            try signed(packed(prefix, Array(records.dropLast(2)))), "no end record", kinds: [.corrupt], into: fresh)
        try assertRefused(try signed(Array(payload.dropLast(2))), "no end block", kinds: [.corrupt], into: fresh)

        // Decompression bombs: a block that inflates past what it declares, and a block that
        // declares more than a block may hold, are refused before they are inflated further.
        let bomb = try BlockCompression.compress(records + [UInt8](repeating: 0, count: 4 << 20))
        try assertRefused(
            try signed(prefix + varint(records.count) + varint(bomb.count) + bomb + [0, 0]),
            "a block that inflates past its declared length", kinds: [.corrupt], into: fresh)
        let oversized = try BlockCompression.compress([UInt8](repeating: 0, count: (1 << 20) + 1))
        try assertRefused(
            try signed(prefix + varint((1 << 20) + 1) + varint(oversized.count) + oversized + [0, 0]),
            "a block declaring more than 1 MiB", kinds: [.corrupt], into: fresh)
        // Blocks that each keep their word but together inflate far past their size: one text
        // value 100 MB long, of zeros.
        var bombRecords: [UInt8] = [0x01, 0, 1, 3] + varint(100_000_000)
        bombRecords += [UInt8](repeating: 0, count: (1 << 20) - bombRecords.count)
        let first = try BlockCompression.compress(bombRecords)
        let zeros = try BlockCompression.compress([UInt8](repeating: 0, count: 1 << 20))
        var blocks = prefix + varint(1 << 20) + varint(first.count) + first
        for _ in 1..<70 { blocks += varint(1 << 20) + varint(zeros.count) + zeros }
        try assertRefused(try signed(blocks + [0, 0]), "records inflating 256 times their size", kinds: [.corrupt], into: fresh)
        let bombFile = path("bomb.sqsb")
        XCTAssertTrue(FileManager.default.createFile(atPath: bombFile, contents: Data(try signed(blocks + [0, 0]))))
        let bombReader = try BundleReader(path: bombFile)
        try bombReader.verify(trust: trust)
        XCTAssertThrowsError(try bombReader.forEachChange { _ in }) { error in
            XCTAssertTrue("\(error)".contains("decompression bomb"), "\(error)")
        }

        var garbled = try packed(prefix, records)
        garbled[prefix.count + 8] ^= 0xff
        try assertRefused(try signed(garbled), "a garbled compressed block", kinds: [.corrupt], into: fresh)

        // Unknown record flag bits in the first record.
        for bit in [0x20, 0x40, 0x80] as [UInt8] {
            var flagged = records
            flagged[0] |= bit
            try assertRefused(try signed(packed(prefix, flagged)), "record flag \(bit)", kinds: [.corrupt], into: fresh)
        }
        var notARecord = records
        notARecord[0] &= ~0x01
        if notARecord[0] != 0 {
            try assertRefused(
                try signed(packed(prefix, notARecord)), "record without the row bit", kinds: [.corrupt], into: fresh)
        }

        // The header's length written in a longer (non-canonical) varint: either refused, or
        // read exactly as the canonical form.
        var padded = payload
        let canonical = varint(parts.headerLength)
        var long = canonical
        long[long.count - 1] |= 0x80
        long.append(0)
        padded.replaceSubrange(parts.headerLengthOffset..<(parts.headerLengthOffset + canonical.count), with: long)
        let paddedFile = path("padded.sqsb")
        XCTAssertTrue(FileManager.default.createFile(atPath: paddedFile, contents: Data(try signed(padded))))
        var original: [RowChange] = []
        try reader.forEachChange { original.append($0) }
        do {
            let paddedReader = try BundleReader(path: paddedFile)
            try paddedReader.verify(trust: trust)
            var read: [RowChange] = []
            try paddedReader.forEachChange { read.append($0) }
            XCTAssertEqual(read, original, "a padded header length must not shift the records")
        } catch let error as BundleError {
            XCTAssertEqual(error.kind, .corrupt)
        }
    }

    /// A block may end anywhere in a record, inside a varint (Int64.min takes ten bytes), a
    /// text or a REAL: the reader decodes a value in place when its block holds all of it, and
    /// across blocks byte by byte. Every cut must give the same changes.
    func testRecordsCutAtAnyByteReadTheSame() throws {
        let file = try export(try replica("source", rows: true), "whole.sqsb")
        let reader = try BundleReader(path: file)
        let payload = Array(try Data(contentsOf: URL(fileURLWithPath: file)).prefix(reader.payloadLength))
        var expected: [RowChange] = []
        try reader.forEachChange { expected.append($0) }
        XCTAssertTrue(expected.contains { $0.columns.contains { $0.value == .integer(Int64.min) } })
        let parts = try parts(of: payload)
        // Int64.min as stored: the integer tag, then its zigzag form, nine 0xff and a 0x01. A
        // tenth byte above 1 would carry bits past 64: the varint is too long.
        let minimum: [UInt8] = [BundleCodec.ValueTag.integer.rawValue] + Array(repeating: 0xff, count: 9) + [0x01]
        guard let at = (0...(parts.records.count - minimum.count)).first(where: {
            Array(parts.records[$0..<($0 + minimum.count)]) == minimum
        }) else { return XCTFail("Int64.min not found in the records") }
        var tooLong = parts.records
        tooLong[at + minimum.count - 1] = 0x02
        func cut(_ records: [UInt8], into blockSize: Int) throws -> BundleReader {
            var payload = parts.prefix
            var rest = records[...]
            while !rest.isEmpty {
                let block = Array(rest.prefix(blockSize))
                rest = rest.dropFirst(blockSize)
                let compressed = try BlockCompression.compress(block)
                payload += varint(block.count) + varint(compressed.count) + compressed
            }
            let file = path("cut-\(UUID().uuidString.prefix(8)).sqsb")
            XCTAssertTrue(FileManager.default.createFile(atPath: file, contents: Data(try signed(payload + [0, 0]))))
            let reader = try BundleReader(path: file)
            XCTAssertEqual(try reader.verify(trust: trust), "alice")
            return reader
        }
        for blockSize in Array(1...11) + [parts.records.count] {
            var changes: [RowChange] = []
            try cut(parts.records, into: blockSize).forEachChange { changes.append($0) }
            XCTAssertEqual(changes, expected, "records in blocks of \(blockSize) bytes")
            XCTAssertThrowsError(try cut(tooLong, into: blockSize).forEachChange { _ in }, "blocks of \(blockSize) bytes") {
                XCTAssertTrue("\($0)".contains("varint too long"), "\($0)")
            }
        }
    }

    /// A bundle written by the previous format (version 1: records stored as they are) is
    /// still read and applied, so sites can upgrade one at a time.
    func testVersionOneBundlesAreStillRead() throws {
        let source = try replica("source", rows: true)
        let file = try export(source, "good.sqsb")
        let reader = try BundleReader(path: file)
        let payload = Array(try Data(contentsOf: URL(fileURLWithPath: file)).prefix(reader.payloadLength))
        let parts = try parts(of: payload)
        // Format 1 ends the header at the tables: drop format 2's learned events (none here)
        // schema version (0) and signed statements.
        let headerStart = parts.headerLengthOffset + varint(parts.headerLength).count
        var statements = varint(reader.header.statements.count)
        for statement in reader.header.statements { statements += varint(statement.count) + statement }
        let tail = 2 + statements.count
        XCTAssertEqual(Array(parts.prefix.suffix(tail)), [0, 0] + statements, "no learned events, version 0, then the statements")
        var versionOne =
            Array(parts.prefix[..<parts.headerLengthOffset]) + varint(parts.headerLength - tail)
            + Array(parts.prefix[headerStart..<(parts.prefix.count - tail)]) + parts.records
        versionOne[8] = 1
        let oldFile = path("version1.sqsb")
        XCTAssertTrue(FileManager.default.createFile(atPath: oldFile, contents: Data(try signed(versionOne))))
        let oldReader = try BundleReader(path: oldFile)
        XCTAssertEqual(oldReader.version, 1)
        try oldReader.verify(trust: trust)
        var original: [RowChange] = [], read: [RowChange] = []
        try reader.forEachChange { original.append($0) }
        try oldReader.forEachChange { read.append($0) }
        XCTAssertEqual(read, original)
        XCTAssertLessThan(reader.payloadLength - statements.count, versionOne.count, "version 2 is smaller")

        let fresh = try receiver()
        _ = try BundleExchange.importBundle(path: oldFile, into: fresh, trust: trust)
        for table in ["vals", "pairs"] {
            let all = "SELECT * FROM \(table) WHERE \(table == "vals" ? "id" : "a") != 'local' ORDER BY 1, 2"
            XCTAssertEqual(try fresh.database.valueRows(all), try source.database.valueRows(all), table)
        }
        XCTAssertFalse(try fresh.database.valueRows("SELECT * FROM vals").isEmpty)
    }

    // MARK: Merge policies

    func testPoliciesAndCounterContributionsRoundTrip() throws {
        func counted(_ name: String) throws -> Replica {
            let replica = try Replica.initialize(path: path(name + ".db"), name: name).replica
            try replica.database.execute("CREATE TABLE stock (id TEXT PRIMARY KEY, qty INTEGER, seen, note TEXT)")
            try replica.track(["stock"], allowIntegerPrimaryKey: false)
            try replica.setPolicy(.counter, table: "stock", column: "qty")
            try replica.setPolicy(.max, table: "stock", column: "seen")
            return replica
        }
        let source = try counted("counted")
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

        let reader = try BundleReader(path: file)
        try reader.verify(trust: trust)
        let payload = Array(try Data(contentsOf: URL(fileURLWithPath: file)).prefix(reader.payloadLength))
        XCTAssertEqual(Array(payload[9..<(9 + 2 + 14)]), [1] + varint(14) + Array("merge-policies".utf8))
        XCTAssertEqual(reader.header.tables, header.tables)
        var read: [RowChange] = []
        try reader.forEachChange { read.append($0) }
        XCTAssertEqual(read, expected)

        let receiver = try counted("receiver")
        XCTAssertEqual(try BundleExchange.importBundle(path: file, into: receiver, trust: trust).outcome, .applied)
        let all = "SELECT * FROM stock ORDER BY id"
        XCTAssertEqual(try receiver.database.valueRows(all), try source.database.valueRows(all))
        XCTAssertEqual(try receiver.database.valueRows(all)[1], [.text("tent"), .integer(7), .integer(4), .text("a")])
    }

    // MARK: Streaming

    func testLargeBundleStreams() throws {
        let source = try Replica.initialize(path: path("large.db"), name: "large").replica
        try source.database.execute(
            """
            CREATE TABLE big (id TEXT PRIMARY KEY, n INTEGER, t TEXT);
            WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 200000)
            INSERT INTO big SELECT printf('row-%06d', i), i, 'text ' || i FROM c;
            """)
        XCTAssertEqual(try source.track(["big"], allowIntegerPrimaryKey: false).map(\.rows), [200_000])
        let result = try BundleExchange.export(
            replica: source, since: Knowledge(), key: key, to: path("large.sqsb"), intoDirectory: false)
        XCTAssertEqual(result.rows, 200_000)

        let reader = try BundleReader(path: result.path)
        try reader.verify(trust: trust)
        var count = 0, sum: Int64 = 0
        var last: SQLValue = .null
        try reader.forEachChange { change in
            count += 1
            if case .integer(let n)? = change.columns.first?.value { sum += n }
            last = change.key[0]
        }
        XCTAssertEqual(count, 200_000)
        XCTAssertEqual(sum, 200_000 * 200_001 / 2, "every row's value arrived")
        XCTAssertNotEqual(last, .null)
    }
}
