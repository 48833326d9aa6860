import Foundation
import SQLiteDatabase
import TestSupport
import XCTest

@testable import Bundle
@testable import ChangeLog

/// How a change cut for a scope reaches its reader through relays (docs/SCOPES.md, "Knowledge
/// and relaying under a scope"), between real bundle files: hq (an admin key) and hub without
/// a scope, north and south scoped to their region, and w, a writer that meets only hub.
final class ScopedRelayTests: XCTestCase {
    private var directory = ""
    private var replicas: [String: Replica] = [:]
    private var keys: [String: SigningKey] = [:]
    private var trust: AllowedSigners!
    private static let names = ["hq", "hub", "north", "south", "w"]

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqsync-relay-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory + "/bundles", withIntermediateDirectories: true)
        let hands = Self.names.map { HandKey($0) }
        for hand in hands {
            try hand.write(to: directory + "/\(hand.name).key")
            keys[hand.name] = try SigningKey.load(path: directory + "/\(hand.name).key")
        }
        trust = try AllowedSigners(
            text: ([hands[0].adminSignersLine] + hands.dropFirst().map(\.allowedSignersLine)).joined(separator: "\n") + "\n")
        let hq = try Replica.initialize(
            path: directory + "/hq.db", name: "hq", knowledgeID: ReplicaIdentity.knowledgeID(for: keys["hq"]!.publicKey)
        ).replica
        try hq.database.execute("CREATE TABLE orders (id TEXT PRIMARY KEY, region TEXT NOT NULL, item TEXT)")
        try hq.track(["orders"], allowIntegerPrimaryKey: false)
        replicas["hq"] = hq
        for name in Self.names.dropFirst() {
            replicas[name] = try hq.clone(
                to: directory + "/\(name).db", name: name, knowledgeID: ReplicaIdentity.knowledgeID(for: keys[name]!.publicKey))
        }
    }

    override func tearDown() { try? FileManager.default.removeItem(atPath: directory) }

    private func issue(_ acts: [AdminAct]) throws {
        for act in acts { try replicas["hq"]!.issueAdminStatement(try SignedAdminStatement.sign(act, key: keys["hq"]!).stored) }
    }

    private var scopes: [AdminAct] {
        [
            .label(table: "orders", expression: "region"),
            .scope(replica: replicas["north"]!.knowledgeID, labels: ["north"]),
            .scope(replica: replicas["south"]!.knowledgeID, labels: ["south"]),
        ]
    }

    /// What `sync` gives `to` from `from`: a bundle cut for its scope, from what it holds.
    private func send(_ from: String, _ to: String) throws {
        let sender = replicas[from]!, receiver = replicas[to]!
        let exported = try BundleExchange.export(
            replica: sender, since: try receiver.knowledge(), key: keys[from]!, to: directory + "/bundles", intoDirectory: true,
            receiver: receiver.knowledgeID, scope: try KeyBinding.adminRules(of: sender).scope(of: receiver.knowledgeID))
        _ = try BundleExchange.importBundle(path: exported.path, into: receiver, trust: trust)
    }

    private func ids(_ name: String) throws -> [String] {
        try replicas[name]!.database.valueRows("SELECT id FROM orders ORDER BY id").compactMap { $0[0].stringValue }
    }

    private func holds(_ name: String, of writer: String) throws -> Int64 {
        try replicas[name]!.knowledge()[replicas[writer]!.knowledgeID]
    }

    /// w writes before the scopes exist, and hub takes it whole: no cut for north was made.
    /// Once w hears (through hub) that north holds none of its changes, its next bundle to hub
    /// carries its changes cut for north from there, and hub passes them on. Before, north
    /// never held any of w's changes: each later cut began where hub stood.
    func testChangesMadeBeforeTheScopesReachAScopedReaderThroughARelay() throws {
        try replicas["w"]!.database.execute("INSERT INTO orders VALUES ('w1', 'north', 'bolts'), ('w2', 'south', 'nuts')")
        try send("w", "hub")
        try issue(scopes)
        for (from, to) in [("hq", "hub"), ("hub", "north"), ("hub", "south"), ("hub", "w"), ("north", "hub"), ("south", "hub"), ("hub", "w")] {
            try send(from, to)
        }
        try replicas["w"]!.database.execute("INSERT INTO orders VALUES ('w3', 'north', 'washers')")
        for (from, to) in [("w", "hub"), ("hub", "north"), ("hub", "south")] { try send(from, to) }
        XCTAssertEqual(try ids("north"), ["w1", "w3"])
        XCTAssertEqual(try ids("south"), ["w2"])
        XCTAssertEqual(try holds("north", of: "w"), try holds("w", of: "w"))
    }

    /// w's south order goes w → hub → hq → south: two replicas without a scope in a row. hub
    /// passes w's cut for south on to hq with w's full changes, and hq to south. Before, a
    /// relay gave a reader without a scope only full segments, so south never received it.
    func testCutsCrossAChainOfReplicasWithoutAScope() throws {
        try issue(scopes)
        for (from, to) in [("hq", "hub"), ("hq", "south"), ("hub", "w"), ("south", "hq"), ("hq", "hub"), ("hub", "w")] {
            try send(from, to)
        }
        try replicas["w"]!.database.execute("INSERT INTO orders VALUES ('w1', 'south', 'bolts'), ('w2', 'north', 'nuts')")
        for (from, to) in [("w", "hub"), ("hub", "hq"), ("hq", "south")] { try send(from, to) }
        XCTAssertEqual(try ids("south"), ["w1"])
        XCTAssertEqual(try holds("south", of: "w"), try holds("w", of: "w"))
    }

    /// w, scoped to north and granted north orders, is in a thief's hands: with SQL alone its
    /// statements are deleted and its grant checks emptied, and it inserts a north order its
    /// grant allows. Knowing no scope, it cuts its changes for none. hq, holding w's word of
    /// its statements, takes the order and announces it as its own, cut for north: north
    /// receives it. The same changes merged again at hq (relayed back by hub) announce nothing.
    func testAThiefsAllowedWriteReachesItsScopeFromAReplicaHoldingEveryRow() throws {
        try issue(
            scopes + [
                .scope(replica: replicas["w"]!.knowledgeID, labels: ["north"]),
                .grant(replica: replicas["w"]!.knowledgeID, table: "orders", operations: [.insert, .update], labels: ["north"]),
            ])
        for (from, to) in [("hq", "w"), ("w", "hq"), ("hq", "hub"), ("hq", "north"), ("north", "hq")] { try send(from, to) }
        let path = replicas["w"]!.path
        let triggers = try replicas["w"]!.database.valueRows(
            #"SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE '%\_grant\_%' ESCAPE '\'"#
        ).compactMap { $0[0].stringValue }
        XCTAssertFalse(triggers.isEmpty, "w has grant checks to take off")
        try Database(path: path).execute(
            triggers.map { "DROP TRIGGER \(quoteIdentifier($0)); CREATE TRIGGER \(quoteIdentifier($0)) BEFORE DELETE ON orders WHEN 0 BEGIN SELECT 0; END;" }
                .joined() + """
                DELETE FROM "_sqsync_admin"; DELETE FROM "_sqsync_admin_epochs"; DELETE FROM "_sqsync_admin_claims";
                UPDATE "_sqsync_tables" SET "grants" = NULL;
                INSERT INTO orders VALUES ('w9', 'north', 'within the grant');
                """)
        replicas["w"] = try Replica(path: path)
        try send("w", "hq")
        let announced = try holds("hq", of: "hq")
        try send("hq", "north")
        XCTAssertEqual(try ids("north"), ["w9"])
        try send("w", "hub")
        try send("hub", "hq")
        XCTAssertEqual(try holds("hq", of: "hq"), announced, "hq announced the same changes again")
    }
}
