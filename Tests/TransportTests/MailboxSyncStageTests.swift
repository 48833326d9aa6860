import Bundle
import ChangeLog
import Foundation
import SQLiteDatabase
import XCTest

@testable import Transport

/// Each stage of a sync (``MailboxSync``) on a ``MemoryTransport``, alone: what the earlier
/// stages would have set is set by hand, and each test asserts on what its stage wrote to the
/// mailbox or the replica, and on nothing it did not.
final class MailboxSyncStageTests: XCTestCase {
    private var folder = ""
    private var a: Replica!
    private var b: Replica!
    private let keyA = SigningKey.generate(comment: "a")
    private let keyB = SigningKey.generate(comment: "b")
    private var trust: AllowedSigners!
    private var transport: MemoryTransport!
    private var mailbox: Mailbox!

    override func setUpWithError() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("sqsync-stages-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let database = try Database(path: folder + "/a.db")
        try database.execute("CREATE TABLE t (id TEXT PRIMARY KEY, v TEXT)")
        a = try Replica.initialize(
            path: folder + "/a.db", name: "a", knowledgeID: ReplicaIdentity.knowledgeID(for: keyA.publicKey)
        ).replica
        try a.track(["t"], allowIntegerPrimaryKey: false)
        b = try a.clone(to: folder + "/b.db", name: "b", knowledgeID: ReplicaIdentity.knowledgeID(for: keyB.publicKey))
        trust = try AllowedSigners(
            text: [AllowedSigners.line(principal: "a", key: keyA.publicKey), AllowedSigners.line(principal: "b", key: keyB.publicKey)]
                .joined(separator: "\n"))
        transport = MemoryTransport()
        mailbox = Mailbox(transport: transport)
    }

    override func tearDown() {
        a = nil
        b = nil
        try? FileManager.default.removeItem(atPath: folder)
    }

    private func run(_ replica: Replica, _ key: SigningKey) throws -> MailboxSync {
        try replica.fold()
        return try MailboxSync(mailbox: mailbox, replica: replica, key: key, trust: try KeyBinding.trust(trust, replica: replica))
    }

    private func files(under prefix: String) -> [String] {
        transport.files.keys.filter { $0.hasPrefix(prefix) }.sorted()
    }

    private func value(_ replica: Replica, _ id: String) throws -> String? {
        try replica.database.rows(#"SELECT "v" FROM "t" WHERE "id" = ?"#, .text(id)).first.map { try $0.string("v") }
    }

    /// Look makes this replica's folders, clears its own killed uploads (never another's) and
    /// lists the others' bundles; it reads no file and writes nothing else.
    func testLookListsAndClearsOnlyItsOwnLeftovers() throws {
        let sync = try run(a, keyA)
        try transport.makeDirectories("sqsync/outbox/\(b.knowledgeID)")
        transport.files["sqsync/outbox/\(b.knowledgeID)/1_2_3_abcd.sqsb"] = Data("x".utf8)
        transport.files["sqsync/outbox/\(a.knowledgeID)/.tmp-\(a.knowledgeID)-dead"] = Data()
        transport.files["sqsync/outbox/\(b.knowledgeID)/.tmp-\(b.knowledgeID)-busy"] = Data()
        try sync.look()
        XCTAssertEqual(sync.report.leftoversRemoved, 1)
        XCTAssertNil(transport.files["sqsync/outbox/\(a.knowledgeID)/.tmp-\(a.knowledgeID)-dead"])
        XCTAssertNotNil(transport.files["sqsync/outbox/\(b.knowledgeID)/.tmp-\(b.knowledgeID)-busy"])
        XCTAssertTrue(transport.directories.contains("sqsync/acks/\(a.knowledgeID)"))
        XCTAssertEqual(sync.bundles.map(\.name), ["1_2_3_abcd.sqsb"])
        XCTAssertEqual(sync.filesRead, 0)
    }

    /// Take in merges a listed bundle of another replica and notes it as seen; it writes
    /// nothing to the mailbox.
    func testTakeInImportsAListedBundleAndWritesNothing() throws {
        try b.database.run(#"INSERT INTO "t" VALUES ('k', 'from b')"#)
        _ = try mailbox.sync(replica: b, key: keyB, trust: trust)
        let before = transport.files
        let sync = try run(a, keyA)
        sync.bundles = try transport.listFiles(in: "sqsync/outbox/\(b.knowledgeID)").map { (b.knowledgeID, $0) }
        XCTAssertEqual(sync.bundles.count, 1)
        try sync.takeIn()
        XCTAssertEqual(try value(a, "k"), "from b")
        XCTAssertEqual(sync.report.imported.count, 1)
        XCTAssertEqual(Set(try sync.state.seenBundles().keys), Set(sync.bundles.map(\.name)))
        XCTAssertEqual(transport.files, before, "taking in writes nothing to the mailbox")
    }

    /// Answer leaves one signed acknowledgement of what this replica holds, and counts a
    /// reader whose acknowledgement was never read as holding nothing.
    func testAnswerLeavesOneSignedAcknowledgement() throws {
        try a.database.run(#"INSERT INTO "t" VALUES ('k', 'from a')"#)
        let sync = try run(a, keyA)
        try transport.makeDirectories("sqsync/acks/\(a.knowledgeID)")
        transport.files["sqsync/acks/\(a.knowledgeID)/0_old.ack"] = Data("stale".utf8)
        sync.unreadReaders = [b.knowledgeID]
        XCTAssertTrue(try sync.answer())
        let acks = files(under: "sqsync/acks/\(a.knowledgeID)/")
        XCTAssertEqual(acks.count, 1, "\(acks)")
        let text = String(decoding: try XCTUnwrap(transport.files[acks[0]]), as: UTF8.self)
        let verified = try MailboxAcknowledgement.verified(text, expectedReplica: a.knowledgeID, trust: trust)
        XCTAssertEqual(verified.acknowledgement.knowledge, try a.knowledge())
        XCTAssertEqual(sync.readers[b.knowledgeID], Knowledge())
    }

    /// Leave out writes one bundle for the readers, removes junk from this replica's outbox,
    /// and writes nothing when the same content is there already.
    func testLeaveOutWritesOneBundleNamedByItsContent() throws {
        try a.database.run(#"INSERT INTO "t" VALUES ('k', 'from a')"#)
        let outbox = "sqsync/outbox/\(a.knowledgeID)/"
        let first = try run(a, keyA)
        try transport.makeDirectories(outbox)
        transport.files[outbox + "junk.txt"] = Data("planted".utf8)
        first.knowledge = try a.knowledge()
        first.readers = [b.knowledgeID: Knowledge()]
        XCTAssertTrue(try first.leaveOut())
        XCTAssertEqual(first.keep.count, 1)
        XCTAssertEqual(files(under: outbox), [outbox + first.keep.first!])
        XCTAssertEqual(first.report.warnings.count, 1, "\(first.report.warnings)")

        let second = try run(a, keyA)
        second.knowledge = try a.knowledge()
        second.readers = [b.knowledgeID: Knowledge()]
        XCTAssertTrue(try second.leaveOut())
        XCTAssertEqual(second.keep, first.keep, "the same content keeps its bundle")
        XCTAssertNil(second.report.exported)
    }

    /// Tidy removes this replica's bundles the sync did not keep, and another's bundle once
    /// every reader holds what it carries, and leaves one a reader still lacks.
    func testTidyRemovesWhatNoReaderNeeds() throws {
        try b.database.run(#"INSERT INTO "t" VALUES ('k', 'from b')"#)
        _ = try mailbox.sync(replica: b, key: keyB, trust: trust)
        let othersBundles = files(under: "sqsync/outbox/\(b.knowledgeID)/")
        XCTAssertEqual(othersBundles.count, 1)
        let taking = try run(a, keyA)
        taking.bundles = othersBundles.map { (b.knowledgeID, String($0.split(separator: "/").last!)) }
        try taking.takeIn()

        let lacking = try run(a, keyA)
        lacking.bundles = taking.bundles
        lacking.knowledge = try a.knowledge()
        lacking.readers = [b.knowledgeID: try b.knowledge(), "someone-else": Knowledge()]
        lacking.mine = ["1_1_1_gone.sqsb"]
        transport.files["sqsync/outbox/\(a.knowledgeID)/1_1_1_gone.sqsb"] = Data()
        try lacking.tidy()
        XCTAssertNil(transport.files["sqsync/outbox/\(a.knowledgeID)/1_1_1_gone.sqsb"], "not kept: removed")
        XCTAssertEqual(files(under: "sqsync/outbox/\(b.knowledgeID)/"), othersBundles, "a reader still lacks it")

        let holding = try run(a, keyA)
        holding.bundles = lacking.bundles
        holding.knowledge = try a.knowledge()
        holding.readers = [b.knowledgeID: try b.knowledge()]
        try holding.tidy()
        XCTAssertEqual(holding.report.removed, 1)
        XCTAssertEqual(files(under: "sqsync/outbox/\(b.knowledgeID)/"), [])
    }
}
