import Foundation
import TestSupport
import XCTest

/// Labels, scopes and grants (docs/SCOPES.md) through the built binary, with the `sqlite3`
/// shell as the writer: a star (HQ without a scope, three depots each with one region) and a
/// chain (HQ → depot → camp), rows moving out, in and back, a field replica's denied writes,
/// and admin statements from keys that are not admin keys, in bundles written by hand.
final class ScopeCLITests: XCTestCase {
    private var h: Harness!
    private var keys: [String: HandKey] = [:]

    private static let schema = """
        CREATE TABLE orders(id TEXT PRIMARY KEY, region TEXT NOT NULL, qty INTEGER, note TEXT);
        CREATE TABLE lines(id TEXT PRIMARY KEY, order_id TEXT REFERENCES orders(id), region TEXT NOT NULL, item TEXT);
        CREATE TABLE prices(item TEXT PRIMARY KEY, price REAL);
        INSERT INTO orders VALUES ('o1', 'north', 1, 'first north'), ('o2', 'south', 2, 'first south'),
            ('o3', 'east', 3, 'first east'), ('o4', 'north', 4, 'second north');
        INSERT INTO lines VALUES ('l1', 'o1', 'north', 'bolts'), ('l2', 'o1', 'north', 'nuts'), ('l3', 'o2', 'south', 'rope');
        INSERT INTO prices VALUES ('bolts', 1.5), ('nuts', 0.25);
        """

    override func setUpWithError() throws {
        h = try Harness()
    }

    override func tearDown() { h = nil }

    /// HQ with an admin key (namespaces="sqsync,sqsync-admin") and every table tracked, and
    /// `others` cloned from it with keys of their own, trusted for `sqsync` only.
    @discardableResult
    private func world(_ others: [String]) throws -> [String: String] {
        let admin = try h.handKey("HQ", trusted: false)
        try h.trust(admin.adminSignersLine)
        keys["HQ"] = admin
        let hq = h.path("HQ.db")
        try h.sqlite(hq, Self.schema)
        try h.ok(["init", hq, "--name", "HQ"], key: "HQ")
        try h.ok(["track", hq, "--all"])
        var dbs = ["HQ": hq]
        for name in others {
            keys[name] = try h.handKey(name)
            dbs[name] = h.path("\(name).db")
            try h.ok(["clone", hq, dbs[name]!, "--name", name], key: name)
        }
        return dbs
    }

    /// A new empty folder in the harness's, for a mailbox.
    private func folder(_ name: String) throws -> String {
        let path = h.path(name)
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// Runs an admin command with HQ's admin key.
    private func admin(_ arguments: [String]) throws {
        try h.ok(arguments + [], key: "HQ")
    }

    /// The rows of a table at a replica, and at HQ those with the given regions.
    private func rows(_ db: String, _ table: String, regions: [String]? = nil) throws -> String {
        let filter = regions.map { " WHERE region IN (\($0.map { "'\($0)'" }.joined(separator: ", ")))" } ?? ""
        return try h.sqlite(db, "SELECT * FROM \(table)\(filter) ORDER BY 1;")
    }

    private func rounds(_ dbs: [(String, String)], _ stick: String, times: Int = 2) throws {
        for _ in 0..<times { for (name, db) in dbs { try h.syncOK(db, as: name, stick) } }
    }

    /// Each depot ends holding exactly HQ's rows of its region, with HQ's values, and the
    /// unlabelled table whole.
    private func assertDepots(_ dbs: [String: String], _ scopes: [String: [String]], file: StaticString = #filePath, line: UInt = #line)
        throws
    {
        let hq = dbs["HQ"]!
        for (name, regions) in scopes {
            for table in ["orders", "lines"] {
                XCTAssertEqual(
                    try rows(dbs[name]!, table), try rows(hq, table, regions: regions), "\(name).\(table)", file: file, line: line)
            }
            XCTAssertEqual(try rows(dbs[name]!, "prices"), try rows(hq, "prices"), "\(name).prices", file: file, line: line)
            let doctor = try h.sqsync(["doctor", dbs[name]!])
            XCTAssertEqual(doctor.status, 0, "doctor \(name): \(doctor.stderr)", file: file, line: line)
        }
    }

    // MARK: the star

    /// HQ holds everything; N, S and E each receive one region through one stick. A row moved
    /// to another region (with its lines) leaves one depot and reaches the other whole, and
    /// comes back whole; a depot's own write to another region reaches HQ and that region's
    /// depot, then leaves the depot; a scope that grows brings the new region's rows.
    func testStarOfThreeScopedDepots() throws {
        let dbs = try world(["N", "S", "E"])
        let hq = dbs["HQ"]!
        try admin(["label", hq, "orders", "region"])
        try admin(["label", hq, "lines", "region"])
        let scopes = ["N": ["north"], "S": ["south"], "E": ["east"]]
        for (name, regions) in scopes { try admin(["scope", hq, name] + regions) }
        let listed = try h.ok(["scope", hq]).stdout
        XCTAssertTrue(listed.contains("N (") && listed.contains("north"), listed)
        let stick = try folder("stick")
        let order = ["HQ", "N", "S", "E"].map { ($0, dbs[$0]!) }
        try rounds(order, stick)
        try assertDepots(dbs, scopes)

        // HQ moves o1 and its lines from north to south: N loses them, S gets them whole.
        try h.sqlite(hq, "UPDATE orders SET region = 'south', note = 'moved south' WHERE id = 'o1'; UPDATE lines SET region = 'south' WHERE order_id = 'o1';")
        let movedAway = Int(try h.sqlite(hq, "SELECT 1 + count(*) FROM lines WHERE order_id = 'o1';").trimmingCharacters(in: .whitespacesAndNewlines))
        XCTAssertEqual(movedAway, 3, "o1 and its two lines")
        var leftAtN = 0, movedOutAtN = 0, changedAtN = 0
        for _ in 0..<2 {
            for (name, db) in order {
                let result = try h.syncOK(db, as: name, stick, ["--json"])
                if name == "N" {
                    leftAtN += h.json(result)["rows_left_scope"] as? Int ?? 0
                    movedOutAtN += h.json(result)["rows_moved_out"] as? Int ?? 0
                    changedAtN += h.json(result)["changes_in"] as? Int ?? 0
                }
            }
        }
        XCTAssertLessThanOrEqual(leftAtN, movedAway ?? 0, "removed after they arrived, or as they did")
        XCTAssertEqual(movedOutAtN, movedAway, "N's sync reports every row that moved out of its scope")
        XCTAssertEqual(changedAtN, 0, "not as changed")
        try assertDepots(dbs, scopes)
        XCTAssertTrue(try rows(dbs["S"]!, "orders").contains("o1|south|1|moved south"))
        XCTAssertFalse(try rows(dbs["N"]!, "lines").contains("l1"))

        // And back: N has it whole again.
        try h.sqlite(hq, "UPDATE orders SET region = 'north', qty = 11 WHERE id = 'o1'; UPDATE lines SET region = 'north' WHERE order_id = 'o1';")
        try rounds(order, stick)
        try assertDepots(dbs, scopes)
        XCTAssertTrue(try rows(dbs["N"]!, "orders").contains("o1|north|11|moved south"))

        // N writes a south order (it has no grants, so it may): HQ and S get it, N lets it go.
        try h.sqlite(dbs["N"]!, "INSERT INTO orders VALUES ('n-s', 'south', 7, 'written at N');")
        try rounds(order, stick, times: 3)
        XCTAssertTrue(try rows(hq, "orders").contains("n-s|south|7|written at N"))
        try assertDepots(dbs, scopes)

        // E's scope grows to north: HQ starts new lives for the north rows, which reach E whole.
        try admin(["scope", hq, "E", "east", "north"])
        try rounds(order, stick)
        try assertDepots(dbs, ["N": ["north"], "S": ["south"], "E": ["east", "north"]])
    }

    /// Each depot meets only HQ, on a stick of its own. N writes a south order: HQ keeps N's
    /// changes cut for S's scope and hands them on, so S gets it; N lets it go.
    func testAHubWithoutAScopeRelaysBetweenDepotsThatNeverMeet() throws {
        let dbs = try world(["N", "S"])
        let (hq, north, south) = (dbs["HQ"]!, dbs["N"]!, dbs["S"]!)
        try admin(["label", hq, "orders", "region"])
        try admin(["scope", hq, "N", "north"])
        try admin(["scope", hq, "S", "south"])
        let (stickN, stickS) = (try folder("stick-n"), try folder("stick-s"))
        func round() throws {
            try h.syncOK(hq, as: "HQ", stickN)
            try h.syncOK(north, as: "N", stickN)
            try h.syncOK(hq, as: "HQ", stickS)
            try h.syncOK(south, as: "S", stickS)
        }
        for _ in 0..<2 { try round() }
        try h.sqlite(north, "INSERT INTO orders VALUES ('n-s', 'south', 8, 'from N for S');")
        for _ in 0..<2 { try round() }
        XCTAssertTrue(try rows(south, "orders").contains("n-s|south|8|from N for S"))
        // S's signed acknowledgement reaches N through HQ in S's next bundle (a replica with
        // nothing to send leaves only an acknowledgement file, which N never reads): then N
        // knows every peer has its write, and lets the row go.
        try h.sqlite(south, "UPDATE orders SET note = 'seen at S' WHERE id = 'o2';")
        for _ in 0..<4 { try round() }
        XCTAssertTrue(try rows(hq, "orders").contains("n-s|south|8|from N for S"))
        XCTAssertEqual(try rows(south, "orders"), try rows(hq, "orders", regions: ["south"]))
        XCTAssertEqual(try rows(north, "orders"), try rows(hq, "orders", regions: ["north"]))
    }

    // MARK: the chain

    /// HQ and a depot share a folder; the depot and a camp share a stick. The camp's scope
    /// lies within the depot's, so the depot relays HQ's changes for the camp; the camp's own
    /// changes reach the depot.
    func testChainHQDepotCamp() throws {
        let dbs = try world(["D"])
        let (hq, depot) = (dbs["HQ"]!, dbs["D"]!)
        keys["C"] = try h.handKey("C")
        let camp = h.path("C.db")
        try h.ok(["clone", depot, camp, "--name", "C"], key: "C")
        try admin(["label", hq, "orders", "region"])
        try admin(["label", hq, "lines", "region"])
        try admin(["scope", hq, "D", "north", "north-camp"])
        try admin(["scope", hq, try h.knowledgeID(camp), "north-camp"])
        try h.sqlite(hq, "INSERT INTO orders VALUES ('c1', 'north-camp', 5, 'for the camp'), ('s9', 'south', 9, 'not for them');")
        let (shared, stick) = (try folder("folder"), try folder("stick"))
        func round() throws {
            try h.syncOK(hq, as: "HQ", shared)
            try h.syncOK(depot, as: "D", shared)
            try h.syncOK(depot, as: "D", stick)
            try h.syncOK(camp, as: "C", stick)
        }
        for _ in 0..<3 { try round() }
        XCTAssertEqual(try rows(depot, "orders"), try rows(hq, "orders", regions: ["north", "north-camp"]))
        XCTAssertEqual(try rows(camp, "orders"), try rows(hq, "orders", regions: ["north-camp"]))
        XCTAssertEqual(try rows(camp, "lines"), "")

        // HQ changes the camp's row: it reaches the camp through the depot.
        try h.sqlite(hq, "UPDATE orders SET qty = 50 WHERE id = 'c1';")
        for _ in 0..<2 { try round() }
        XCTAssertEqual(try rows(camp, "orders"), "c1|north-camp|50|for the camp\n")
        // The camp's own change reaches the depot.
        try h.sqlite(camp, "UPDATE orders SET note = 'counted at camp' WHERE id = 'c1';")
        for _ in 0..<2 { try round() }
        let atDepot = try rows(depot, "orders")
        XCTAssertTrue(atDepot.contains("c1|north-camp|50|counted at camp"), atDepot)
        for db in [depot, camp] { try h.ok(["doctor", db]) }
    }

    // MARK: grants

    /// F may update north orders only. Its own writes beyond that fail in the writer, naming
    /// the grant. Writes it makes with the grant triggers dropped reach HQ and G as denied
    /// changes: applied nowhere, listed by `conflicts` the same way at both; F's later
    /// allowed change still arrives, and HQ and G agree.
    func testADeniedWriteIsRefusedTheSameWayEverywhere() throws {
        let dbs = try world(["F", "G"])
        let (hq, f, g) = (dbs["HQ"]!, dbs["F"]!, dbs["G"]!)
        try admin(["label", hq, "orders", "region"])
        try admin(["grant", hq, "F", "orders", "update", "--label", "north"])
        let granted = try h.ok(["grant", hq]).stdout
        XCTAssertTrue(granted.contains("orders update labels north"), granted)
        // Before F holds the grant it may change anything: this change is judged by the
        // statements F held when it made it, at every replica.
        try h.sqlite(f, "UPDATE orders SET note = 'before the grant' WHERE id = 'o3';")
        let stick = try folder("stick")
        let order = [("HQ", hq), ("F", f), ("G", g)]
        try rounds(order, stick)
        for db in [hq, g] { XCTAssertTrue(try rows(db, "orders").contains("o3|east|3|before the grant")) }

        try h.sqlite(f, "UPDATE orders SET qty = 40 WHERE id = 'o4';")
        let before = try h.fullDump(f)
        for sql in [
            "UPDATE orders SET qty = 99 WHERE id = 'o2';", "INSERT INTO orders VALUES ('f1', 'north', 1, 'x');",
            "DELETE FROM orders WHERE id = 'o1';", "UPDATE orders SET region = 'south' WHERE id = 'o1';",
            "UPDATE prices SET price = 0 WHERE item = 'bolts';",
        ] {
            let result = try Harness.run("/usr/bin/sqlite3", [f, sql])
            XCTAssertNotEqual(result.status, 0, sql)
            XCTAssertTrue(result.stderr.contains("grants do not allow"), result.stderr)
        }
        XCTAssertEqual(try h.fullDump(f), before, "refused writes leave F as it was")

        // A thief with F's database puts triggers that check nothing in place of the grant
        // checks (sync refuses while they are missing) and writes anyway.
        try h.sqlite(
            f,
            """
            DROP TRIGGER "_sqsync_orders_grant_update"; DROP TRIGGER "_sqsync_orders_grant_insert";
            DROP TRIGGER "_sqsync_prices_grant_update";
            CREATE TRIGGER "_sqsync_orders_grant_update" BEFORE UPDATE ON orders WHEN 0 BEGIN SELECT 0; END;
            CREATE TRIGGER "_sqsync_orders_grant_insert" BEFORE INSERT ON orders WHEN 0 BEGIN SELECT 0; END;
            CREATE TRIGGER "_sqsync_prices_grant_update" BEFORE UPDATE ON prices WHEN 0 BEGIN SELECT 0; END;
            UPDATE orders SET qty = 99 WHERE id = 'o2'; INSERT INTO orders VALUES ('f1', 'south', 1, 'forged');
            UPDATE prices SET price = 0 WHERE item = 'bolts';
            """)
        try rounds(order, stick)
        for db in [hq, g] {
            let held = try rows(db, "orders")
            XCTAssertTrue(held.contains("o2|south|2|first south"), held)
            XCTAssertFalse(try rows(db, "orders").contains("f1"))
            XCTAssertTrue(try rows(db, "orders").contains("o4|north|40|second north"), "F's allowed change arrived")
            XCTAssertTrue(try rows(db, "prices").contains("bolts|1.5"))
            // Denied where met first; the other replica may meet the denier's new lives of those
            // rows first, and then logs F's writes as lost to them, or finds them beaten already.
            let named = try h.conflicts(db).filter { ($0["lost_site_name"] as? String) == "F" }
            XCTAssertLessThanOrEqual(named.count, 3, "each logged once at most: \(named)")
            XCTAssertTrue(
                named.allSatisfy { ($0["kind"] as? String ?? "").hasPrefix("denied") || ($0["kind"] as? String) == "update lost to re-insert" },
                "\(named)")
        }
        let deniedAtAll = try [hq, g].map { try h.conflicts($0).filter { ($0["kind"] as? String ?? "").hasPrefix("denied") }.count }
        XCTAssertGreaterThanOrEqual(deniedAtAll.reduce(0, +), 3, "each forged write denied where met first: \(deniedAtAll)")
        // F itself gives up what was denied: HQ's new lives reach it.
        let atF = (orders: try rows(f, "orders"), prices: try rows(f, "prices"))
        XCTAssertTrue(atF.orders.contains("o2|south|2|first south"), atF.orders)
        XCTAssertTrue(atF.prices.contains("bolts|1.5"), atF.prices)
        // F's changes after the denied ones still count: knowledge moved past them.
        try h.ok(["refresh", f])
        try h.sqlite(f, "UPDATE orders SET note = 'after' WHERE id = 'o4';")
        try rounds(order, stick)
        XCTAssertEqual(try rows(hq, "orders"), try rows(g, "orders"))
        XCTAssertTrue(try rows(g, "orders").contains("o4|north|40|after"))
    }

    /// A segment (written by hand, signed by F) that names an admin statement G does not hold
    /// yet, in a bundle that does not carry it (no bundle sqsync writes is so), is refused
    /// once (exit 3), not held for good: nothing merged. Once the statement arrives from HQ,
    /// the same file applies.
    func testChangesNamingAStatementTheBundleDoesNotCarryAreRefusedUntilItIsHeld() throws {
        let dbs = try world(["F", "G"])
        let (hq, f, g) = (dbs["HQ"]!, dbs["F"]!, dbs["G"]!)
        try admin(["label", hq, "prices", "item"])
        let id = try XCTUnwrap(
            Data(hexString: try h.sqlite(hq, #"SELECT hex("id") FROM "_sqsync_admin";"#).trimmingCharacters(in: .whitespacesAndNewlines)))
        let clock = try h.clock(f)
        var bundle = HandBundle(
            sites: [HandSite(id: keys["F"]!.replicaID, name: "F", knowledge: clock.seq + 1)], senderSeq: clock.seq + 1,
            senderHLC: clock.hlc + 1, signer: keys["F"]!)
        bundle.identities = [(0, keys["F"]!.identity)]
        var segment = HandSegment(
            origin: keys["F"]!.replicaID, base: clock.seq, last: clock.seq + 1, created: clock.hlc + 1,
            tables: [("orders", ["id", "region", "qty", "note"], [0])],
            records: [HandRecord(key: [.text("o4")], rowStamp: nil, columns: [(2, .integer(77), HandStamp(hlc: clock.hlc + 1, seq: clock.seq + 1))])],
            signer: keys["F"]!)
        segment.knowledge = [keys["HQ"]!.replicaID: 1]
        segment.adminStatements = [Array(id)]
        bundle.segments = [segment]
        let path = h.path("held.sqsb")
        try bundle.write(to: path)
        let refused = try h.sqsync(["import", g, path], key: "G")
        XCTAssertEqual(refused.status, 3, refused.stderr)
        XCTAssertTrue(refused.stderr.contains("neither this replica holds nor the bundle carries"), refused.stderr)
        XCTAssertEqual(try rows(g, "orders"), try rows(hq, "orders"))
        XCTAssertFalse(try rows(g, "orders").contains("o4|north|77"), "nothing merged")
        XCTAssertEqual((try h.okJSON(["status", g])["held"] as? [Any])?.count, 0, "not held")
        try h.send((hq, "HQ"), to: (g, "G"))
        try h.ok(["import", g, path], key: "G")
        let after = try rows(g, "orders")
        XCTAssertTrue(after.contains("o4|north|77|second north"), after)
    }

    /// F's key, stolen after F's changes named its grant, signs (by hand) a change that names
    /// no admin statement, as if F had never been granted anything: G judges it by the grant
    /// F's earlier changes named, says so, and denies the write; its rows stay. The forged
    /// change took F's next number (F is told when it meets it: StolenIdentityCLITests); F's
    /// later changes still reach G.
    func testAStolenKeyCannotSignAwayItsGrants() throws {
        let dbs = try world(["F", "G"])
        let (hq, f, g) = (dbs["HQ"]!, dbs["F"]!, dbs["G"]!)
        try admin(["label", hq, "orders", "region"])
        try admin(["grant", hq, "F", "orders", "update", "--label", "north"])
        let stick = try folder("stick")
        try rounds([("HQ", hq), ("F", f), ("G", g)], stick)
        try h.sqlite(f, "UPDATE orders SET qty = 41 WHERE id = 'o4';")
        try rounds([("F", f), ("G", g)], stick)
        XCTAssertTrue(try rows(g, "orders").contains("o4|north|41|second north"))

        let clock = try h.clock(f)
        // Its range starting where G's knowledge of F ends, or at 0 (a range G holds already).
        for base in [clock.seq, 0] {
            var bundle = HandBundle(
                sites: [HandSite(id: keys["F"]!.replicaID, name: "F", knowledge: clock.seq + 1)], senderSeq: clock.seq + 1,
                senderHLC: clock.hlc + 1, signer: keys["F"]!)
            bundle.identities = [(0, keys["F"]!.identity)]
            bundle.segments = [
                HandSegment(
                    origin: keys["F"]!.replicaID, base: base, last: clock.seq + 1, created: clock.hlc + 1,
                    tables: [("orders", ["id", "region", "qty", "note"], [0])],
                    records: [
                        HandRecord(
                            key: [.text("o2")], rowStamp: nil, columns: [(2, .integer(666), HandStamp(hlc: clock.hlc + 1, seq: clock.seq + 1))])
                    ], signer: keys["F"]!)
            ]
            let path = h.path("stolen-\(base).sqsb")
            try bundle.write(to: path)
            let before = try rows(g, "orders")
            let result = try h.sqsync(["import", g, path], key: "G")
            XCTAssertEqual(result.status, 0, result.stderr)
            if base == clock.seq { XCTAssertTrue(result.stderr.contains("leave out 2 admin statement"), result.stderr) }
            XCTAssertEqual(try rows(g, "orders"), before, "the forged write is denied")
        }
        let denied = try h.conflicts(g).filter { ($0["kind"] as? String ?? "").hasPrefix("denied") }
        XCTAssertEqual(denied.count, 1, "\(denied)")
        try h.sqlite(f, "UPDATE orders SET note = 'under the forged number' WHERE id = 'o4';")
        try h.sqlite(f, "UPDATE orders SET note = 'still honest' WHERE id = 'o4';")
        try rounds([("F", f), ("G", g)], stick)
        XCTAssertTrue(try rows(g, "orders").contains("o4|north|41|still honest"))
    }

    /// A replica cloned after the statements were made follows them from its first write:
    /// its grants are in its triggers, and rows outside its scope are gone.
    func testACloneFollowsTheStatementsAtOnce() throws {
        try world([])
        let hq = h.path("HQ.db")
        keys["F"] = try h.handKey("F")
        try admin(["label", hq, "orders", "region"])
        try admin(["label", hq, "lines", "region"])
        try admin(["scope", hq, keys["F"]!.replicaID, "north"])
        try admin(["grant", hq, keys["F"]!.replicaID, "orders", "update", "--label", "north"])
        let f = h.path("F.db")
        try h.ok(["clone", hq, f, "--name", "F"], key: "F")
        XCTAssertEqual(try rows(f, "orders"), try rows(hq, "orders", regions: ["north"]))
        let refused = try Harness.run("/usr/bin/sqlite3", [f, "INSERT INTO orders VALUES ('f1', 'north', 1, 'x');"])
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.stderr.contains("grants do not allow insert"), refused.stderr)
        try h.sqlite(f, "UPDATE orders SET qty = 5 WHERE id = 'o1';")
        try h.ok(["doctor", f])
    }

    // MARK: admin keys

    /// A replica's own key, trusted for `sqsync` only, cannot issue statements: the command
    /// exits 1 and stores nothing.
    func testAStatementNeedsAnAdminKey() throws {
        let dbs = try world(["F"])
        let result = try h.sqsync(["scope", dbs["F"]!, "F", "north"], key: "F")
        XCTAssertEqual(result.status, 1, result.stderr)
        XCTAssertTrue(result.stderr.contains("not an admin key") && result.stderr.contains("sqsync-admin"), result.stderr)
        XCTAssertTrue(try h.ok(["scope", dbs["F"]!]).stderr.contains("no replica has a scope"))
        let label = try h.sqsync(["label", dbs["HQ"]!, "orders", "(SELECT 1)"], key: "HQ")
        XCTAssertEqual(label.status, 2, label.stderr)
        XCTAssertTrue(label.stderr.contains("without a subquery"), label.stderr)
        let unknown = try h.sqsync(["grant", dbs["HQ"]!, "F", "orders", "insert,fly"], key: "HQ")
        XCTAssertEqual(unknown.status, 2, unknown.stderr)
    }

    /// Bundles written by hand carrying admin statements: one signed by F's key (trusted for
    /// `sqsync` only), one from HQ's admin key with a byte changed, one HQ signed in the wrong
    /// namespace, and one from HQ whose label would smuggle SQL into every replica's triggers.
    /// Each is refused (exit 3, one line) and the database is unchanged; the same statement
    /// signed properly is taken.
    func testStatementsFromNonAdminKeysInABundleAreRefused() throws {
        let dbs = try world(["F", "G"])
        let g = dbs["G"]!
        let clock = try h.clock(dbs["F"]!)
        let scopeG = #"{"scope":{"replica":"\#(keys["G"]!.replicaID)","labels":["north"]}}"#
        func bundle(_ statement: [UInt8]) -> HandBundle {
            var bundle = HandBundle(
                sites: [HandSite(id: keys["F"]!.replicaID, name: "F", knowledge: clock.seq)], senderSeq: clock.seq,
                senderHLC: clock.hlc, signer: keys["F"]!)
            bundle.identities = [(0, keys["F"]!.identity)]
            bundle.adminStatements = [statement]
            return bundle
        }
        let issued = Int64(Date().timeIntervalSince1970 * 1000)
        var altered = keys["HQ"]!.adminStatement(json: scopeG, issued: issued)
        altered[altered.count - 80] ^= 0x01
        for (statement, words) in [
            (keys["F"]!.adminStatement(json: scopeG, issued: issued), ["not an admin key", keys["F"]!.fingerprint]),
            (altered, ["does not verify"]),
            (keys["HQ"]!.adminStatement(json: scopeG, issued: issued, namespace: "sqsync"), ["does not verify"]),
            (
                keys["HQ"]!.adminStatement(
                    json: #"{"label":{"table":"orders","expression":"region); DROP TABLE orders; --"}}"#, issued: issued),
                ["not one plain expression"]
            ),
        ] {
            let path = h.path("hand-\(UUID().uuidString.prefix(6)).sqsb")
            try bundle(statement).write(to: path)
            let before = try h.fullDump(g)
            let result = try h.sqsync(["import", g, path], key: "G")
            XCTAssertEqual(result.status, 3, result.stderr)
            XCTAssertEqual(result.stderrLines.count, 1, result.stderr)
            for word in words + [path] { XCTAssertTrue(result.stderr.contains(word), "\(word): \(result.stderr)") }
            XCTAssertEqual(try h.fullDump(g), before)
        }
        let good = h.path("good.sqsb")
        try bundle(keys["HQ"]!.adminStatement(json: scopeG, issued: issued)).write(to: good)
        try h.ok(["import", g, good], key: "G")
        XCTAssertTrue(try h.ok(["scope", g]).stdout.contains("north"))
    }
}

extension Data {
    init?(hexString: String) {
        var bytes: [UInt8] = []
        var index = hexString.startIndex
        while index < hexString.endIndex {
            let next = hexString.index(index, offsetBy: 2, limitedBy: hexString.endIndex) ?? hexString.endIndex
            guard let byte = UInt8(hexString[index..<next], radix: 16) else { return nil }
            bytes.append(byte)
            index = next
        }
        self.init(bytes)
    }
}
