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
    private var family: ReplicaFamily!
    private var replicas: [String: Replica] {
        get { family.replicas }
        set { family.replicas = newValue }
    }
    private var keys: [String: SigningKey] { family.keys }

    override func setUpWithError() throws {
        family = try ReplicaFamily(
            ["hq", "hub", "north", "south", "w"], schema: "CREATE TABLE orders (id TEXT PRIMARY KEY, region TEXT NOT NULL, item TEXT)",
            tables: ["orders"], folder: "sqsync-relay")
    }

    override func tearDown() { family?.removeFiles() }

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
            replica: sender, since: try receiver.knowledge(), key: keys[from]!, to: family.directory + "/bundles", intoDirectory: true,
            receiver: receiver.knowledgeID, scope: try KeyBinding.adminRules(of: sender).scope(of: receiver.knowledgeID))
        _ = try BundleExchange.importBundle(path: exported.path, into: receiver, trust: family.trust)
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
