import Bundle
import ChangeLog
import Foundation
import SQLiteDatabase
import XCTest

@testable import Transport

/// A sync that sees the mailbox and the replica as a sync that found nothing to do left them
/// stops there (Mailbox.sync); any change to a folder, the replica or the keys makes it sync.
final class QuietMailboxTests: XCTestCase {
    private var folder = ""
    private var a: Replica!, b: Replica!
    private let keyA = SigningKey.generate(comment: "a"), keyB = SigningKey.generate(comment: "b")
    private var trust: AllowedSigners!
    private var mailbox: Mailbox!

    /// Longer than DirectoryTransport.settleMargin for file times with a fraction.
    private func settle() { usleep(250_000) }

    override func setUpWithError() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("sqsync-quiet-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder + "/box", withIntermediateDirectories: true)
        let database = try Database(path: folder + "/a.db")
        try database.execute("CREATE TABLE t (id TEXT PRIMARY KEY, v TEXT); INSERT INTO t VALUES ('1', 'one');")
        a = try Replica.initialize(path: folder + "/a.db", name: "A").replica
        try a.track(["t"], allowIntegerPrimaryKey: false)
        b = try a.clone(to: folder + "/b.db", name: "B")
        trust = try AllowedSigners(
            text: AllowedSigners.line(principal: "A", key: keyA.publicKey) + "\n"
                + AllowedSigners.line(principal: "B", key: keyB.publicKey))
        mailbox = Mailbox(transport: DirectoryTransport(root: folder + "/box"))
        // These tests change folders by hand, as no sqsync does: every sync compares every folder
        // (testAMarkedMailboxStopsAtItsMark sets it back).
        Mailbox.markTrustedFor = 0
        for _ in 0..<2 {
            _ = try mailbox.sync(replica: a, key: keyA, trust: trust)
            _ = try mailbox.sync(replica: b, key: keyB, trust: trust)
        }
        settle()
        if try (mailbox.transport as? StampedFolders)?.settledFolderStamps(in: "sqsync/outbox") == nil {
            throw XCTSkip("\(folder): a file system whose folder times sqsync does not take as stamps")
        }
    }

    override func tearDown() {
        Mailbox.markTrustedFor = 600_000
        a = nil
        b = nil
        try? FileManager.default.removeItem(atPath: folder)
    }

    private func syncB(trust: AllowedSigners? = nil) throws -> SyncReport {
        try mailbox.sync(replica: b, key: keyB, trust: trust ?? self.trust)
    }

    /// Settles the folders, then syncs B until a sync stops at the comparison: at most two full
    /// syncs (one reads what the last sync of A left, one finds nothing to do), and the next one
    /// stops there too.
    private func quietB(file: StaticString = #filePath, line: UInt = #line) throws {
        settle()
        var fullSyncs = 0
        while try !syncB().unchanged {
            fullSyncs += 1
            guard fullSyncs <= 2 else { return XCTFail("a sync with nothing new still lists", file: file, line: line) }
        }
        XCTAssertGreaterThan(fullSyncs, 0, "the last change was seen by a full sync", file: file, line: line)
        XCTAssertTrue(try syncB().unchanged, file: file, line: line)
    }

    /// Asserts that `change` leaves the folders unsettled, when the check comes soon enough
    /// after it to tell (a loaded machine may take longer than the margin to fsync).
    private func assertUnsettledRightAfter(
        _ transport: DirectoryTransport, _ change: () throws -> Void, file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let start = Date()
        try change()
        let stamps = try transport.settledFolderStamps(in: "outbox")
        if Date().timeIntervalSince(start) < 0.08 { XCTAssertNil(stamps, "\(stamps ?? [:])", file: file, line: line) }
    }

    /// Sets a folder's modification time to 2300-01-01, past where nanoseconds fit in 64 bits.
    private func dateIntoTheFuture(_ path: String) {
        var times = [timespec(tv_sec: 10_413_792_000, tv_nsec: 0), timespec(tv_sec: 10_413_792_000, tv_nsec: 0)]
        XCTAssertEqual(utimensat(AT_FDCWD, path, &times, 0), 0, String(cString: strerror(errno)))
    }

    func testSettledStampsWaitForTheFolderAndFollowItsChanges() throws {
        let transport = DirectoryTransport(root: folder + "/stamps")
        XCTAssertNil(try transport.settledFolderStamps(in: "outbox"), "a missing folder has no stamps")
        try assertUnsettledRightAfter(transport) {
            try transport.makeDirectories("outbox/x")
            try transport.makeDirectories("outbox/y")
        }
        settle()
        let before = try XCTUnwrap(try transport.settledFolderStamps(in: "outbox"))
        XCTAssertEqual(before.keys.sorted(), ["x", "y"])

        let upload = folder + "/upload"
        try Data("bundle".utf8).write(to: URL(fileURLWithPath: upload))
        try assertUnsettledRightAfter(transport) { try transport.writeFile(from: upload, to: "outbox/x/1.sqsb") }
        settle()
        let after = try XCTUnwrap(try transport.settledFolderStamps(in: "outbox"))
        XCTAssertNotEqual(after["x"], before["x"])
        XCTAssertEqual(after["y"], before["y"])
        try transport.removeFile("outbox/x/1.sqsb")
        settle()
        XCTAssertNotEqual(try transport.settledFolderStamps(in: "outbox")?["x"], after["x"])

        dateIntoTheFuture(folder + "/stamps/outbox/y")
        XCTAssertNil(try transport.settledFolderStamps(in: "outbox"), "a folder dated in the future is never settled")
    }

    func testQuietSyncStopsAtTheStampsAndAnyChangeMakesItSync() throws {
        try quietB()

        // A peer's new bundle.
        try a.database.execute("INSERT INTO t VALUES ('2', 'two')")
        XCTAssertNotNil(try mailbox.sync(replica: a, key: keyA, trust: trust).exported)
        settle()
        let afterPeer = try syncB()
        XCTAssertFalse(afterPeer.unchanged)
        XCTAssertEqual(afterPeer.imported.count, 1)
        XCTAssertEqual(try b.database.optionalString("SELECT v FROM t WHERE id = '2'"), "two")
        try quietB()

        // A write of this replica's own.
        try b.database.execute("UPDATE t SET v = 'uno' WHERE id = '1'")
        let afterWrite = try syncB()
        XCTAssertFalse(afterWrite.unchanged)
        XCTAssertNotNil(afterWrite.exported)
        _ = try mailbox.sync(replica: a, key: keyA, trust: trust)
        try quietB()

        // Other trusted keys.
        let widened = try AllowedSigners(
            text: AllowedSigners.line(principal: "A", key: keyA.publicKey) + "\n"
                + AllowedSigners.line(principal: "B", key: keyB.publicKey) + "\n"
                + AllowedSigners.line(principal: "C", key: SigningKey.generate(comment: "c").publicKey))
        XCTAssertFalse(try syncB(trust: widened).unchanged)
        XCTAssertTrue(try syncB(trust: widened).unchanged)

        // A folder whose stamp changed is listed, even when the change left nothing new in it.
        let outboxA = "\(folder)/box/sqsync/outbox/\(a.knowledgeID)"
        try Data().write(to: URL(fileURLWithPath: outboxA + "/.tmp-gone"))
        try FileManager.default.removeItem(atPath: outboxA + "/.tmp-gone")
        settle()
        XCTAssertFalse(try syncB(trust: widened).unchanged, "the folder's stamp is not the one remembered")
        XCTAssertTrue(try syncB(trust: widened).unchanged)

        // A folder that is not settled (here: dated in the future) is always listed.
        dateIntoTheFuture(outboxA)
        for _ in 0..<2 { XCTAssertFalse(try syncB(trust: widened).unchanged) }
    }

    /// While the mailbox's mark is as the last quiet sync saw it, a sync stops there without
    /// looking at any replica's folder, and a change another sync made renews the mark. A file
    /// put there by hand (as a writer of an older sqsync would) is seen once every folder is
    /// compared again; from then on, every sync there compares them all.
    func testAMarkedMailboxStopsAtItsMark() throws {
        Mailbox.markTrustedFor = 600_000
        // A third replica's folder, which A's and B's syncs leave as it is.
        let outboxC = "\(folder)/box/sqsync/outbox/cccc"
        try FileManager.default.createDirectory(atPath: outboxC, withIntermediateDirectories: true)
        try quietB()
        try Data("not a bundle".utf8).write(to: URL(fileURLWithPath: outboxC + "/planted.sqsb"))
        settle()
        XCTAssertTrue(try syncB().unchanged, "the mark is unchanged: no folder is looked at")

        try a.database.execute("INSERT INTO t VALUES ('2', 'two')")
        XCTAssertNotNil(try mailbox.sync(replica: a, key: keyA, trust: trust).exported)
        settle()
        let afterPeer = try syncB()
        XCTAssertFalse(afterPeer.unchanged, "a sync's changes renew the mark")
        XCTAssertEqual(try b.database.optionalString("SELECT v FROM t WHERE id = '2'"), "two")
        XCTAssertEqual(afterPeer.rejected.map(\.name), ["planted.sqsb"], "a full sync reads every folder")
        try FileManager.default.removeItem(atPath: outboxC + "/planted.sqsb")
        try quietB()

        try Data("not a bundle".utf8).write(to: URL(fileURLWithPath: outboxC + "/planted-2.sqsb"))
        settle()
        XCTAssertTrue(try syncB().unchanged)
        Mailbox.markTrustedFor = 0
        XCTAssertEqual(try syncB().rejected.map(\.name), ["planted-2.sqsb"], "every folder compared again")
        Mailbox.markTrustedFor = 600_000
        try FileManager.default.removeItem(atPath: outboxC + "/planted-2.sqsb")
        try quietB()
        try Data("not a bundle".utf8).write(to: URL(fileURLWithPath: outboxC + "/planted-3.sqsb"))
        settle()
        XCTAssertEqual(
            try syncB().rejected.map(\.name), ["planted-3.sqsb"], "a mailbox changed without its mark is compared whole from then on")
        try FileManager.default.removeItem(atPath: outboxC + "/planted-3.sqsb")

        // A sync that reuses what the last quiet one read of the replica still sees a write
        // by another connection.
        try quietB()
        let other = try Database(path: folder + "/b.db")
        try other.execute("UPDATE t SET v = 'eins' WHERE id = '1'")
        let afterOther = try syncB()
        XCTAssertFalse(afterOther.unchanged, "a write by another connection")
        XCTAssertNotNil(afterOther.exported)
    }

    /// The replica's own state (what it knows of each site, key pins, held bundles, statements)
    /// is compared by the generation its tables' triggers raise: a change to it made by hand
    /// makes the next sync run, and so does one made while a trigger was missing (the sync
    /// puts the trigger back, raising the generation, before it compares).
    func testAChangeToTheReplicasStateMakesItSyncEvenWithATriggerDropped() throws {
        try quietB()
        let rename = #"UPDATE "_sqsync_sites" SET "name" = ? WHERE "knowledge_id" = ?"#
        try b.database.run(rename, .text("A by hand"), .text(a.knowledgeID))
        XCTAssertFalse(try syncB().unchanged, "a site's row changed")
        XCTAssertTrue(try syncB().unchanged)
        try b.database.execute(#"DROP TRIGGER "_sqsync_generation__sqsync_sites_update""#)
        try quietB()
        try b.database.run(rename, .text("A again"), .text(a.knowledgeID))
        XCTAssertFalse(try syncB().unchanged, "a site's row changed, its trigger put back")
        XCTAssertTrue(try syncB().unchanged)
    }

    /// A clock that went back since the last quiet sync could stamp a change like an old one.
    func testAClockThatWentBackMakesItSync() throws {
        try quietB()
        let state = try MailboxState(b, mailbox: folder + "/box")
        var quiet = try XCTUnwrap(try state.lastQuietSync())
        quiet.savedAt += 3_600_000
        try state.rememberQuietSync(quiet)
        XCTAssertFalse(try syncB().unchanged)
        XCTAssertTrue(try syncB().unchanged)
    }

    /// A sync that refused something is not remembered as quiet; the next one leaves the
    /// refused file unread and counts it (a planted file costs one look).
    func testARejectedBundleCostsOneLook() throws {
        try quietB()
        let outboxA = "\(folder)/box/sqsync/outbox/\(a.knowledgeID)"
        try Data("not a bundle".utf8).write(to: URL(fileURLWithPath: outboxA + "/planted.sqsb"))
        settle()
        let first = try syncB()
        XCTAssertFalse(first.unchanged)
        XCTAssertEqual(first.rejected.map(\.name), ["planted.sqsb"])
        settle()
        let second = try syncB()
        XCTAssertFalse(second.unchanged)
        XCTAssertEqual(second.rejected.map(\.name), [])
        XCTAssertEqual(second.plantedSkipped, ["sqsync/outbox/\(a.knowledgeID)/planted.sqsb"])
        try FileManager.default.removeItem(atPath: outboxA + "/planted.sqsb")
        try quietB()
    }

    /// Trust with a validity window changes meaning with the time alone: such syncs always list.
    func testTrustWithAValidityWindowAlwaysSyncs() throws {
        let windowed = try AllowedSigners(
            text: AllowedSigners.line(principal: "A", key: keyA.publicKey) + "\n"
                + "B valid-before=\"29991231\",namespaces=\"sqsync\" " + keyB.publicKey.openSSHLine)
        settle()
        for _ in 0..<3 { XCTAssertFalse(try syncB(trust: windowed).unchanged) }
    }
}
