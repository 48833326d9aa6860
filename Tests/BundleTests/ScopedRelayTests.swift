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

    /// What `sync` gives `to` from `from`: a bundle cut for its scope, from what it holds (or
    /// from `since`, as a thief may choose).
    private func send(_ from: String, _ to: String, since: Knowledge? = nil) throws {
        let sender = replicas[from]!, receiver = replicas[to]!
        let exported = try BundleExchange.export(
            replica: sender, since: try since ?? receiver.knowledge(), key: keys[from]!, to: family.directory + "/bundles", intoDirectory: true,
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

    /// w's statements and grants: w is scoped to north and granted north orders.
    private func grantNorthToW() throws {
        try issue(
            scopes + [
                .scope(replica: replicas["w"]!.knowledgeID, labels: ["north"]),
                .grant(replica: replicas["w"]!.knowledgeID, table: "orders", operations: [.insert, .update], labels: ["north"]),
            ])
    }

    /// The thief's SQL on w's file, as the `sqlite3` shell runs it: grant checks emptied,
    /// statements deleted (and with `rewinding`, w's numbers set back to where the epoch of
    /// its word starts, so that its next change takes the word's number), then `writes`.
    private func thiefAtW(rewinding: Bool, _ writes: String) throws {
        let path = replicas["w"]!.path
        let triggers = try replicas["w"]!.database.valueRows(
            #"SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE '%\_grant\_%' ESCAPE '\'"#
        ).compactMap { $0[0].stringValue }
        XCTAssertFalse(triggers.isEmpty, "w has grant checks to take off")
        let checksTakenOff = triggers.map {
            "DROP TRIGGER \(quoteIdentifier($0)); CREATE TRIGGER \(quoteIdentifier($0)) BEFORE DELETE ON orders WHEN 0 BEGIN SELECT 0; END;\n"
        }.joined()
        let rewind = """
            UPDATE "_sqsync_replica" SET "seq" = (SELECT max("after_seq") FROM "_sqsync_admin_epochs");
            DELETE FROM "_sqsync_changes" WHERE "site" = (SELECT "site" FROM "_sqsync_replica")
                AND "seq" > (SELECT "seq" FROM "_sqsync_replica");

            """
        let shed = """
            DELETE FROM "_sqsync_admin"; DELETE FROM "_sqsync_admin_epochs"; DELETE FROM "_sqsync_admin_claims";
            UPDATE "_sqsync_tables" SET "grants" = NULL;

            """
        try Database(path: path).execute(checksTakenOff + (rewinding ? rewind : "") + shed + writes)
        replicas["w"] = try Replica(path: path)
        try replicas["w"]!.fold()
    }

    /// The thief sets w's numbers back to before its word and inserts a south order under the
    /// word's own number, then sends hq everything w holds: hq, holding w's word under that
    /// number, does not take the order.
    func testAForgedChangeUnderTheNumberOfAWordIsNotTaken() throws {
        try grantNorthToW()
        for (from, to) in [("hq", "w"), ("w", "hq")] { try send(from, to) }
        let word = try holds("hq", of: "w")
        try thiefAtW(rewinding: true, "INSERT INTO orders VALUES ('forged', 'south', 'not granted');")
        XCTAssertEqual(try holds("w", of: "w"), word, "the thief's change took the word's number")
        try send("w", "hq", since: Knowledge())
        XCTAssertEqual(try ids("hq"), [])
    }

    /// hq holds a south order s1, w's word and w's north order w1 after it. The thief sets w's
    /// numbers back to before the word and moves s1 to north under the word's number, which
    /// hq holds: sent everything w holds, hq meets that change for the first time, though its
    /// number is not new here. It denies it, logs the denial and gives s1 a new life, which
    /// brings s1 back to south wherever the move was taken. Before, hq counted the change as
    /// one it had judged already and passed over it in silence.
    func testAForgedChangeUnderANumberHeldIsDeniedAndUndone() throws {
        try grantNorthToW()
        try replicas["hq"]!.database.execute("INSERT INTO orders VALUES ('s1', 'south', 'secret')")
        for (from, to) in [("hq", "w"), ("w", "hq"), ("hq", "south")] { try send(from, to) }
        try replicas["w"]!.database.execute("INSERT INTO orders VALUES ('w1', 'north', 'honest')")
        try send("w", "hq")
        try thiefAtW(rewinding: true, "INSERT INTO orders VALUES ('s1', 'north', 'moved by the thief');")
        XCTAssertLessThan(try holds("w", of: "w"), try holds("hq", of: "w"), "the thief wrote under a number hq holds")
        try send("w", "hq", since: Knowledge())
        let denials = try replicas["hq"]!.database.valueRows(
            #"SELECT "pk" FROM "_sqsync_conflicts" WHERE "kind" LIKE 'denied%'"#
        ).compactMap { $0[0].stringValue }
        XCTAssertEqual(denials, ["'s1'"])
        try send("hq", "south")
        XCTAssertEqual(
            try replicas["south"]!.database.valueRows("SELECT id, region, item FROM orders").map { $0.compactMap(\.stringValue) },
            [["s1", "south", "secret"]])
        XCTAssertEqual(try ids("hq"), ["s1", "w1"])
    }

    /// w writes north order w1 after its word; hq holds it (and w's cut for north), north has
    /// none of w's changes. The thief sets w's numbers back to before the word, writes w2 (its
    /// grant allows it) under the word's number, learns the statements back from hq and sends
    /// hq everything it holds, cut for north too: w2's cut takes the place of the word's at
    /// hq, which merges both files' versions and announces w's writes from where they part.
    /// north, which never held w1 under w's name, receives w1 and w2, as hq holds them.
    func testBothVersionsOfARewoundFilesNumbersReachAScopedReader() throws {
        try grantNorthToW()
        for (from, to) in [("hq", "w"), ("w", "hq")] { try send(from, to) }
        try replicas["w"]!.database.execute("INSERT INTO orders VALUES ('w1', 'north', 'honest')")
        try send("w", "hq")
        try thiefAtW(rewinding: true, "INSERT INTO orders VALUES ('w2', 'north', 'under a used number');")
        try send("w", "hq")
        try send("hq", "w")
        try send("w", "hq", since: Knowledge())
        try send("hq", "north")
        XCTAssertEqual(try ids("hq"), ["w1", "w2"])
        XCTAssertEqual(try ids("north"), ["w1", "w2"])
    }

    /// hub has none of w's changes; hq holds w's word and north order w1. The thief sets w's
    /// numbers back to before the word, writes w2 under the word's number, learns the
    /// statements back from hub and sends hub what it holds: hub takes w2, knowing nothing of
    /// w1. hub passes w's cuts for north on to hq, and hq, whose knowledge of w covers those
    /// numbers, keeps w2's cut in place of the word's. Finding the two files' segments at odds,
    /// hq merges the cut and announces both orders as its own: hub, hq and north all hold w1 and
    /// w2. Before, hq kept the cut only to relay: hq never held w2 nor hub w1.
    func testARelayHoldingEveryRowMergesAnotherFilesCutAndAnnouncesWhatBothWrote() throws {
        try grantNorthToW()
        for (from, to) in [("hq", "hub"), ("hq", "north"), ("north", "hub"), ("hq", "w"), ("w", "hq")] { try send(from, to) }
        try replicas["w"]!.database.execute("INSERT INTO orders VALUES ('w1', 'north', 'honest')")
        try send("w", "hq")
        XCTAssertEqual(try holds("hub", of: "w"), 0)
        try thiefAtW(rewinding: true, "INSERT INTO orders VALUES ('w2', 'north', 'under a used number');")
        for (from, to) in [("hub", "w"), ("w", "hub"), ("hub", "hq"), ("hq", "hub"), ("hq", "north")] { try send(from, to) }
        XCTAssertEqual(try ids("hub"), ["w1", "w2"])
        XCTAssertEqual(try ids("hq"), ["w1", "w2"])
        XCTAssertEqual(try ids("north"), ["w1", "w2"])
    }

    /// w, scoped to north and granted north orders, is in a thief's hands: with SQL alone its
    /// statements are deleted and its grant checks emptied, and it inserts a north order its
    /// grant allows. Knowing no scope, it cuts its changes for none. hq, holding w's word of
    /// its statements, takes the order and announces it as its own, cut for north: north
    /// receives it. The same changes merged again at hq (relayed back by hub) announce nothing.
    func testAThiefsAllowedWriteReachesItsScopeFromAReplicaHoldingEveryRow() throws {
        try grantNorthToW()
        for (from, to) in [("hq", "w"), ("w", "hq"), ("hq", "hub"), ("hq", "north"), ("north", "hq")] { try send(from, to) }
        try thiefAtW(rewinding: false, "INSERT INTO orders VALUES ('w9', 'north', 'within the grant');")
        try send("w", "hq")
        let announced = try holds("hq", of: "hq")
        try send("hq", "north")
        XCTAssertEqual(try ids("north"), ["w9"])
        try send("w", "hub")
        try send("hub", "hq")
        XCTAssertEqual(try holds("hq", of: "hq"), announced, "hq announced the same changes again")
    }
}
