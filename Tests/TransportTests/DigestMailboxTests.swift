import Bundle
import ChangeLog
import Foundation
import SQLiteDatabase
import XCTest

@testable import Transport

/// Every mailbox bundle relays every origin's changes, and supersedes the bundles it carries
/// all of: in steady state a sync reads the newest bundle or two, whatever the number of
/// replicas, and the mailbox holds as many (docs/PERFORMANCE.md, "A thousand replicas").
final class DigestMailboxTests: XCTestCase {
    private var folder = ""
    private var replicas: [Replica] = []
    private var keys: [SigningKey] = []
    private var trust: AllowedSigners!
    private var mailbox: Mailbox!
    private var written = 0

    override func setUpWithError() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("sqsync-digest-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder + "/box", withIntermediateDirectories: true)
        let database = try Database(path: folder + "/r0.db")
        try database.execute("CREATE TABLE t (id TEXT PRIMARY KEY, v TEXT)")
        let count = 12
        keys = (0..<count).map { SigningKey.generate(comment: "r\($0)") }
        trust = try AllowedSigners(
            text: keys.enumerated().map { AllowedSigners.line(principal: "r\($0.offset)", key: $0.element.publicKey) }
                .joined(separator: "\n"))
        let first = try Replica.initialize(
            path: folder + "/r0.db", name: "r0", knowledgeID: ReplicaIdentity.knowledgeID(for: keys[0].publicKey)
        ).replica
        try first.track(["t"], allowIntegerPrimaryKey: false)
        replicas = [first]
        for index in 1..<count {
            replicas.append(
                try first.clone(
                    to: folder + "/r\(index).db", name: "r\(index)", knowledgeID: ReplicaIdentity.knowledgeID(for: keys[index].publicKey)))
        }
        mailbox = Mailbox(transport: DirectoryTransport(root: folder + "/box"))
    }

    override func tearDown() {
        replicas = []
        try? FileManager.default.removeItem(atPath: folder)
    }

    private func bundles() -> [String] {
        let outbox = folder + "/box/sqsync/outbox"
        return ((try? FileManager.default.contentsOfDirectory(atPath: outbox)) ?? []).flatMap { sender in
            ((try? FileManager.default.contentsOfDirectory(atPath: outbox + "/" + sender)) ?? []).filter { $0.hasSuffix(".sqsb") }
                .map { sender + "/" + $0 }
        }
    }

    private func rows(_ replica: Replica) throws -> Int64 { try replica.database.int64(#"SELECT count(*) FROM "t""#) }

    /// Replica `index` writes a row and syncs; returns how many bundles it imported.
    @discardableResult
    private func writeAndSync(_ index: Int) throws -> Int { try writeAndSyncReport(index).imported.count }

    private func writeAndSyncReport(_ index: Int) throws -> SyncReport {
        written += 1
        try replicas[index].database.run(#"INSERT INTO "t" VALUES (?, ?)"#, .text(UUID().uuidString), .text("r\(index)"))
        let report = try mailbox.sync(replica: replicas[index], key: keys[index], trust: trust)
        XCTAssertTrue(report.rejected.isEmpty && report.refused.isEmpty, "\(report.rejected) \(report.refused)")
        return report
    }

    /// Once every replica has said what it holds, each sync reads at most two bundles and
    /// leaves at most two in the mailbox; one away for rounds takes everything from one sync.
    func testASyncReadsTheNewestBundlesNotOnePerReplica() throws {
        let away = 5
        for round in 0..<6 {
            for index in replicas.indices where !(round >= 2 && round < 5 && index == away) {
                let imported = try writeAndSync(index)
                if round >= 2 {
                    XCTAssertLessThanOrEqual(imported, 2, "round \(round), r\(index) read \(imported) bundles")
                    XCTAssertLessThanOrEqual(bundles().count, 2, "round \(round), after r\(index): \(bundles())")
                }
            }
            if round == 4 {
                // Three rounds away: every other replica wrote three rows meanwhile.
                let imported = try writeAndSync(away)
                XCTAssertLessThanOrEqual(imported, 2, "the replica back from three rounds away read \(imported) bundles")
                XCTAssertEqual(try rows(replicas[away]), Int64(written), "the replica back took everything in one sync")
            }
        }
        for replica in replicas { _ = try mailbox.sync(replica: replica, key: keys[Int(replica.name.dropFirst())!], trust: trust) }
        for replica in replicas { XCTAssertEqual(try rows(replica), Int64(written), replica.name) }
    }

    /// The one bundle that carries everything is lost (a file deleted by hand, a stick
    /// formatted): its writer leaves it again at its next sync, and nobody lacks a row.
    func testALostBundleIsLeftAgainByItsWriter() throws {
        for _ in 0..<2 { for index in replicas.indices { try writeAndSync(index) } }
        for index in 0..<4 { try writeAndSync(index) }
        for bundle in bundles() { try FileManager.default.removeItem(atPath: folder + "/box/sqsync/outbox/" + bundle) }
        for _ in 0..<2 { for index in replicas.indices { try writeAndSync(index) } }
        for replica in replicas { _ = try mailbox.sync(replica: replica, key: keys[Int(replica.name.dropFirst())!], trust: trust) }
        for replica in replicas { XCTAssertEqual(try rows(replica), Int64(written), replica.name) }
    }

    /// A sync reads at most so many acknowledgement files not read before (here 3 of 11):
    /// with the rest counted as they were last read, every replica still gets every row, and
    /// tombstones are still purged once every replica has said it holds them.
    func testASyncReadsAFewAcknowledgementsAndStillConverges() throws {
        Mailbox.acknowledgementsReadPerSync = 3
        defer { Mailbox.acknowledgementsReadPerSync = 64 }
        var mostRead = 0
        // In the first round, each sync reads the acknowledgements of the readers first in
        // knowledge ID order: syncing in the reverse order, those are the last few to sync, who
        // hold nearly everything. Every bundle must count the readers it did not read as
        // holding nothing, so that the first to sync, back, takes every row from the newest.
        let firstRound = replicas.indices.sorted { replicas[$0].knowledgeID > replicas[$1].knowledgeID }
        for round in 0..<6 {
            for index in round == 0 ? firstRound : Array(replicas.indices) {
                let report = try writeAndSyncReport(index)
                if round >= 4 { mostRead = max(mostRead, report.filesRead) }
            }
            if round == 0 {
                let first = firstRound[0]
                _ = try mailbox.sync(replica: replicas[first], key: keys[first], trust: trust)
                XCTAssertEqual(try rows(replicas[first]), Int64(written), "r\(first), first to sync, after one round")
            }
        }
        // Three acknowledgements and the newest bundle or two.
        XCTAssertLessThanOrEqual(mostRead, 5, "files read by one sync")
        XCTAssertGreaterThan(mostRead, 0)
        try replicas[0].database.run(#"DELETE FROM "t" WHERE "v" = 'r0'"#)
        written -= 6
        // Rounds until r0 has read every replica's word that it holds the deletions (a dry
        // run purges them all), which takes a few: each sync reads three acknowledgements.
        for _ in 0..<8 {
            for index in replicas.indices { try writeAndSync(index) }
            if try replicas[0].purge(dryRun: true).heldBackBy.isEmpty { break }
        }
        for replica in replicas { _ = try mailbox.sync(replica: replica, key: keys[Int(replica.name.dropFirst())!], trust: trust) }
        for replica in replicas { XCTAssertEqual(try rows(replica), Int64(written), replica.name) }
        let tombstones = try replicas[0].database.int64(#"SELECT count(*) FROM "_sqsync_rows" WHERE "cl" % 2 = 0"#)
        let purged = try replicas[0].purge(dryRun: false)
        XCTAssertGreaterThan(tombstones, 0)
        XCTAssertEqual(purged.heldBackBy.map(\.name), [], "every replica acknowledged every deletion")
        XCTAssertEqual(purged.tombstones, Int(tombstones), "\(tombstones) tombstones: all purged")
    }
}
