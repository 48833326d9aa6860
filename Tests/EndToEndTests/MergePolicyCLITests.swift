import Foundation
import TestSupport
import XCTest

/// Merge policies per column (issue 11), through the built binary and outside writers.
///
/// Covers `sqsync policy` (set, list, `--json`, errors that change nothing); `counter` columns,
/// whose writes from any writer (the `sqlite3` shell, Python's `sqlite3` module) travel as deltas
/// that add up in every import order, through relays and duplicates, restart with a row's new
/// life after delete and re-insert, refuse non-numbers, and survive `purge` folding them;
/// `max`/`min` columns, which keep the greatest/least value and log the loser; bundles held while
/// two replicas disagree on a column's policy; and a seeded property test: four replicas, random
/// counter writes, deletes, re-inserts and exchanges converge, and without deletes every row ends
/// at exactly its start plus the sum of all deltas.
///
/// `SQSYNC_PROPERTY_SEEDS=N` runs the property test for seeds 1...N (default 2),
/// `SQSYNC_PROPERTY_STEPS` changes its number of random steps (default 40).
final class MergePolicyCLITests: XCTestCase {
    private typealias Site = (db: String, name: String)

    private var h: Harness!

    private static let schema = """
        CREATE TABLE stock(id TEXT PRIMARY KEY, item TEXT, qty INTEGER NOT NULL DEFAULT 0, weight REAL, seen INTEGER, low INTEGER);
        INSERT INTO stock VALUES ('tent', 'tent', 10, 1.5, 1, 100), ('rope', 'rope', 0, 0.0, 0, 50);
        """

    override func setUpWithError() throws { h = try Harness() }

    override func tearDown() { h = nil }

    // MARK: helpers

    /// A with `policies` set (table `stock`), then `clones` cloned from it, which copies the policies.
    private func makeSites(
        policies: [(column: String, policy: String)], clones: [String] = ["B"],
        file: StaticString = #filePath, line: UInt = #line
    ) throws -> [Site] {
        let a = try h.makeReplica("A", schema: Self.schema)
        for (column, policy) in policies {
            try h.ok(["policy", a, "stock", column, policy], file: file, line: line)
        }
        var sites: [Site] = [(a, "A")]
        for name in clones {
            let clone = try h.cloneReplica(a, as: name)
            sites.append((clone, name))
        }
        return sites
    }

    /// One cell, typed (`quote()`): `14`, `2.5`, `'many'`, `NULL`; empty when the row is missing.
    private func value(
        _ db: String, _ column: String, of id: String = "tent", file: StaticString = #filePath, line: UInt = #line
    ) throws -> String {
        try h.sqlite(db, "SELECT quote(\"\(column)\") FROM stock WHERE id = '\(id)';", file: file, line: line)
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    private func assertValue(
        _ sites: [Site], _ column: String, _ expected: String, of id: String = "tent", _ context: String,
        file: StaticString = #filePath, line: UInt = #line
    ) throws {
        for site in sites {
            XCTAssertEqual(
                try value(site.db, column, of: id, file: file, line: line), expected,
                "\(context): stock.\(column) of \(id) on \(site.name)", file: file, line: line)
        }
    }

    /// Every site exports everything, then imports every other site's bundle; `rounds` times,
    /// so that the acknowledgements travel too.
    private func exchangeAll(_ sites: [Site], rounds: Int = 1, file: StaticString = #filePath, line: UInt = #line) throws {
        for _ in 0..<rounds {
            let bundles = try sites.map { try h.export($0.db, as: $0.name) }
            for (i, target) in sites.enumerated() {
                let others = bundles.enumerated().filter { $0.offset != i }.map(\.element)
                try h.ok(["import", target.db] + others, key: target.name, file: file, line: line)
            }
        }
    }

    /// A plain file copy of `db` (with its WAL when there is one), to replay imports on the same state.
    private func snapshot(_ db: String, as name: String) throws -> String {
        let copy = try h.copyFile(db, to: name)
        try? FileManager.default.removeItem(atPath: copy + "-wal")
        try? FileManager.default.removeItem(atPath: copy + "-shm")
        if FileManager.default.fileExists(atPath: db + "-wal") { _ = try h.copyFile(db + "-wal", to: name + "-wal") }
        return copy
    }

    /// `policy DB` as a set of `TABLE.COLUMN POLICY` lines.
    private func listedPolicies(_ db: String, file: StaticString = #filePath, line: UInt = #line) throws -> Set<String> {
        let result = try h.ok(["policy", db], file: file, line: line)
        return Set(result.stdout.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty })
    }

    /// `policy DB --json`, as the same `TABLE.COLUMN POLICY` strings.
    private func jsonPolicies(_ db: String, file: StaticString = #filePath, line: UInt = #line) throws -> Set<String> {
        let json = try h.okJSON(["policy", db], file: file, line: line)
        guard let entries = json["policies"] as? [[String: Any]] else {
            XCTFail("no \"policies\" array in \(json)", file: file, line: line)
            return []
        }
        return Set(
            entries.map {
                "\($0["table"] as? String ?? "?").\($0["column"] as? String ?? "?") \($0["policy"] as? String ?? "?")"
            })
    }

    private func held(_ db: String) throws -> [[String: Any]] {
        try h.okJSON(["status", db])["held"] as? [[String: Any]] ?? []
    }

    private func counterRows(_ db: String) throws -> Int {
        // Site 0 is each cell's folded sum; the others are the replicas' entries.
        let count = try h.sqlite(db, #"SELECT count(*) FROM "_sqsync_counters" WHERE "site" != 0;"#)
        return Int(count.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    /// A conflict's `lost_value` as text, whether the JSON holds it as a number or a string.
    private func text(_ value: Any?) -> String {
        switch value {
        case let string as String: return string
        case let number as NSNumber: return number.stringValue
        default: return "NULL"
        }
    }

    /// Runs one statement with Python's `sqlite3` module and commits: another outside writer.
    private func python(_ db: String, _ sql: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let script = """
            import sqlite3, sys
            connection = sqlite3.connect(sys.argv[1])
            connection.execute(sys.argv[2])
            connection.commit()
            connection.close()
            """
        let result = try Harness.run("/usr/bin/python3", ["-c", script, db, sql])
        XCTAssertEqual(result.status, 0, "python3 `\(sql)` failed: \(result.stderr)", file: file, line: line)
    }

    /// A later wall-clock millisecond than anything written so far.
    private func tick() { usleep(20_000) }

    // MARK: 1. the policy command

    func testPolicyListSetAndErrors() throws {
        let a = try h.makeReplica("A", schema: Self.schema)
        let fresh = try h.ok(["policy", a])
        XCTAssertEqual(fresh.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "", "only defaults: nothing listed")
        let emptyJSON = try h.okJSON(["policy", a])
        XCTAssertEqual((emptyJSON["policies"] as? [Any])?.count, 0, "an empty array when every column is lww: \(emptyJSON)")

        try h.ok(["policy", a, "stock", "qty", "counter"])
        try h.ok(["policy", a, "stock", "seen", "max"])
        try h.ok(["policy", a, "stock", "low", "min"])
        let all: Set = ["stock.qty counter", "stock.seen max", "stock.low min"]
        XCTAssertEqual(try listedPolicies(a), all)
        XCTAssertEqual(try jsonPolicies(a), all)

        // Setting the same policy again is idempotent: nothing in the database changes.
        try h.ok(["status", a])
        let settled = try h.fullDump(a)
        try h.ok(["policy", a, "stock", "qty", "counter"])
        XCTAssertEqual(try h.fullDump(a), settled, "setting a column's policy to what it is changes nothing")

        // Back to the default: no longer listed.
        try h.ok(["policy", a, "stock", "seen", "lww"])
        let remaining: Set = ["stock.qty counter", "stock.low min"]
        XCTAssertEqual(try listedPolicies(a), remaining, "lww is the default and is not listed")
        XCTAssertEqual(try jsonPolicies(a), remaining)

        // A clone carries the policies.
        let b = try h.cloneReplica(a, as: "B")
        XCTAssertEqual(try listedPolicies(b), remaining, "clone copies the policies")

        // Errors: exit 1, one line naming the database, nothing changed.
        try h.sqlite(
            a,
            "CREATE TABLE notes(id TEXT PRIMARY KEY, body INTEGER); INSERT INTO notes VALUES ('n', 1); INSERT INTO stock(id, item, qty, weight) VALUES ('peg', 'peg', 3, NULL);"
        )
        try h.ok(["status", a])  // number the shell's insert, so the dumps compare sqsync's tables at rest
        let before = try h.fullDump(a)
        let failures: [(arguments: [String], why: String, says: String?)] = [
            (["stock_x", "qty", "max"], "unknown table", nil),
            (["notes", "body", "max"], "untracked table", nil),
            (["stock", "nosuch", "max"], "unknown column", nil),
            (["stock", "id", "max"], "primary-key column", nil),
            (["stock", "item", "counter"], "counter on a column holding text", "not a number"),
            (["stock", "weight", "counter"], "counter on a column holding a NULL", "not a number"),
        ]
        for failure in failures {
            let result = try h.sqsync(["policy", a] + failure.arguments)
            XCTAssertEqual(result.status, 1, "\(failure.why): \(result.stderr)")
            XCTAssertEqual(result.stderrLines.count, 1, "\(failure.why): one line: \(result.stderr)")
            XCTAssertTrue(result.stderr.contains("A.db"), "\(failure.why): the message names the database: \(result.stderr)")
            if let says = failure.says {
                XCTAssertTrue(result.stderr.contains(says), "\(failure.why): \(result.stderr)")
            }
        }
        let badName = try h.sqsync(["policy", a, "stock", "qty", "sum"])
        XCTAssertEqual(badName.status, 2, "an unknown policy name is a usage error: \(badName.stderr)")
        XCTAssertFalse(badName.stderr.isEmpty, "a usage error says what is wrong")

        XCTAssertEqual(try h.fullDump(a), before, "failed policy commands change nothing")
        XCTAssertEqual(try listedPolicies(a), remaining)
    }

    // MARK: 2. counters add up in every order

    func testThreeReplicasCountersAddUpInEveryOrder() throws {
        // D is cloned too and never writes: it receives all three bundles in every order.
        let sites = try makeSites(
            policies: [("qty", "counter"), ("weight", "counter")], clones: ["B", "C", "D"])
        let (a, b, c) = (sites[0], sites[1], sites[2])
        try assertValue(sites, "qty", "10", "after clone")

        // Offline writes through the shell, relative and absolute, both directions.
        try h.sqlite(a.db, "UPDATE stock SET qty = qty - 3 WHERE id = 'tent';")
        try h.sqlite(
            a.db, "UPDATE stock SET qty = qty + 1 WHERE id = 'tent'; UPDATE stock SET weight = weight + 0.5 WHERE id = 'tent';")
        try h.sqlite(b.db, "UPDATE stock SET qty = qty + 5 WHERE id = 'tent';")
        try h.sqlite(
            b.db, "UPDATE stock SET qty = 20 WHERE id = 'tent'; UPDATE stock SET weight = weight - 0.25 WHERE id = 'tent';")
        try h.sqlite(
            c.db,
            "BEGIN; UPDATE stock SET qty = qty - 2 WHERE id = 'tent'; UPDATE stock SET qty = qty - 2 WHERE id = 'tent'; COMMIT;")
        try h.sqlite(c.db, "UPDATE stock SET weight = 2.0 WHERE id = 'tent';")
        try h.sqlite(c.db, "UPDATE stock SET weight = weight + 0.25 WHERE id = 'tent';")

        let deltaA = -3 + 1
        let deltaB = 5 + (20 - 15)  // the absolute write counts from B's own value then, 15
        let deltaC = -2 - 2
        let expectedQty = 10 + deltaA + deltaB + deltaC
        XCTAssertEqual(expectedQty, 14)
        let weightA = 0.5, weightB = -0.25, weightC = (2.0 - 1.5) + 0.25
        let expectedWeight = 1.5 + weightA + weightB + weightC
        XCTAssertEqual(expectedWeight, 2.5)
        try assertValue([a], "qty", "8", "A's own writes")
        try assertValue([b], "qty", "20", "B's own writes")
        try assertValue([c], "qty", "6", "C's own writes")

        let bundles = try [a, b, c].map { try h.export($0.db, as: $0.name) }
        let orders = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]]
        for (number, order) in orders.enumerated() {
            let label = "order \(order.map { ["A", "B", "C"][$0] }.joined())"
            for (index, site) in sites.enumerated() {
                let copy = try snapshot(site.db, as: "\(site.name)-order\(number).db")
                for from in order where from != index {
                    try h.ok(["import", copy, bundles[from]], key: site.name)
                }
                try assertValue([(copy, site.name)], "qty", "\(expectedQty)", label)
                try assertValue([(copy, site.name)], "weight", "\(expectedWeight)", label)
                if site.name == "D" {
                    // The same deltas again add nothing.
                    try h.ok(["import", copy, bundles[order[0]]], key: site.name)
                    try h.ok(["import", copy] + bundles, key: site.name)
                    try assertValue([(copy, site.name)], "qty", "\(expectedQty)", "\(label), imported twice")
                    try assertValue([(copy, site.name)], "weight", "\(expectedWeight)", "\(label), imported twice")
                }
                try assertValue([(copy, site.name)], "qty", "0", of: "rope", label)
            }
        }

        // Relay on the originals: C gets A's deltas only through B; full bundles repeat everything.
        try h.send((a.db, a.name), to: (b.db, b.name))
        try assertValue([b], "qty", "\(10 + deltaA + deltaB)", "B after A's bundle")
        try h.send((b.db, b.name), to: (c.db, c.name))
        try assertValue([c], "qty", "\(expectedQty)", "C after B relayed A")
        try h.send((c.db, c.name), to: (a.db, a.name))
        try h.send((c.db, c.name), to: (b.db, b.name))
        try assertValue([a, b, c], "qty", "\(expectedQty)", "after the relay")
        try assertValue([a, b, c], "weight", "\(expectedWeight)", "after the relay")
        for site in [a, b, c] {
            XCTAssertEqual(try h.conflicts(site.db).count, 0, "counter merges are not conflicts (\(site.name))")
        }
    }

    // MARK: 3. delete and re-insert start a new life

    func testCounterRestartsWithNewLife() throws {
        let sites = try makeSites(policies: [("qty", "counter")])
        let (a, b) = (sites[0], sites[1])

        // A deletes the row and inserts it anew at 50, while B, not knowing, adds 5 to the old life.
        try h.sqlite(
            a.db, "DELETE FROM stock WHERE id = 'tent'; INSERT INTO stock(id, item, qty) VALUES ('tent', 'new tent', 50);")
        try h.sqlite(b.db, "UPDATE stock SET qty = qty + 5 WHERE id = 'tent';")
        try exchangeAll(sites)
        try assertValue(sites, "qty", "50", "the new life starts from its insert; B's +5 belonged to the old one")
        try assertValue(sites, "item", "'new tent'", "the re-inserted row")

        // Both now write to the new life.
        try h.sqlite(b.db, "UPDATE stock SET qty = qty + 2 WHERE id = 'tent';")
        try h.sqlite(a.db, "UPDATE stock SET qty = qty - 1 WHERE id = 'tent';")
        try exchangeAll(sites)
        try assertValue(sites, "qty", "\(50 + 2 - 1)", "deltas to the new life add up")

        // A delete beats a concurrent increment; a re-insert after seeing it starts from its own value.
        try h.sqlite(a.db, "DELETE FROM stock WHERE id = 'tent';")
        try h.sqlite(b.db, "UPDATE stock SET qty = qty + 3 WHERE id = 'tent';")
        try exchangeAll(sites)
        try assertValue(sites, "qty", "", "the row stays deleted")
        try h.sqlite(b.db, "INSERT INTO stock(id, item, qty) VALUES ('tent', 'third tent', 7);")
        try exchangeAll(sites)
        try assertValue(sites, "qty", "7", "the third life starts at its insert value")
        try h.sqlite(a.db, "UPDATE stock SET qty = qty + 1 WHERE id = 'tent';")
        try exchangeAll(sites, rounds: 2)
        try assertValue(sites, "qty", "8", "and counts from there")
        XCTAssertEqual(try h.dump(a.db, table: "stock", orderBy: "id"), try h.dump(b.db, table: "stock", orderBy: "id"))
    }

    // MARK: 4. every writer is captured

    func testPythonAndShellWritersAreCaptured() throws {
        try requireTools(["/usr/bin/python3"], install: "apt-get install python3")
        let sites = try makeSites(policies: [("qty", "counter")])
        let (a, b) = (sites[0], sites[1])

        try python(b.db, "UPDATE stock SET qty = qty + 4 WHERE id = 'tent'")
        try h.sqlite(a.db, "UPDATE stock SET qty = qty - 1 WHERE id = 'tent';")
        try exchangeAll(sites)
        try assertValue(sites, "qty", "\(10 + 4 - 1)", "Python's +4 and the shell's -1")

        // An absolute write from Python counts from A's value then (13 → 20 is +7).
        try python(a.db, "UPDATE stock SET qty = 20 WHERE id = 'tent'")
        try h.sqlite(b.db, "UPDATE stock SET qty = qty + 1 WHERE id = 'tent';")
        try exchangeAll(sites)
        try assertValue(sites, "qty", "\(13 + 7 + 1)", "Python's absolute write and the shell's +1")
    }

    // MARK: 5. counters hold numbers only

    func testCounterRefusesNonNumericWrite() throws {
        let sites = try makeSites(policies: [("qty", "counter"), ("weight", "counter")])
        let (a, b) = (sites[0], sites[1])

        try h.sqlite(a.db, "UPDATE stock SET qty = 'many' WHERE id = 'tent';")
        try assertValue([a], "qty", "10", "a text write to a counter is undone at once")
        var logged = try h.conflicts(a.db)
        XCTAssertEqual(logged.count, 1, "\(logged)")
        XCTAssertEqual(logged.first?["kind"] as? String, "counter needs a number", "\(logged)")
        XCTAssertEqual(logged.first?["table_name"] as? String, "stock", "\(logged)")
        XCTAssertEqual(logged.first?["column_name"] as? String, "qty", "\(logged)")
        XCTAssertEqual(text(logged.first?["lost_value"]), "many", "\(logged)")

        try h.sqlite(a.db, "UPDATE stock SET weight = NULL WHERE id = 'tent';")
        try assertValue([a], "weight", "1.5", "a NULL write to a counter is undone at once")
        logged = try h.conflicts(a.db)
        XCTAssertEqual(logged.count, 2, "\(logged)")
        XCTAssertEqual(logged.last?["kind"] as? String, "counter needs a number", "\(logged)")
        XCTAssertEqual(logged.last?["column_name"] as? String, "weight", "\(logged)")

        // Nothing of the refused writes travels; later numeric writes still do.
        try h.send((a.db, a.name), to: (b.db, b.name))
        try assertValue([b], "qty", "10", "refused writes are not sent")
        try assertValue([b], "weight", "1.5", "refused writes are not sent")
        try h.sqlite(a.db, "UPDATE stock SET qty = qty + 2, weight = weight + 0.5 WHERE id = 'tent';")
        try exchangeAll(sites)
        try assertValue(sites, "qty", "12", "a numeric write after the refused ones")
        try assertValue(sites, "weight", "2.0", "a numeric write after the refused ones")
        XCTAssertEqual(try h.conflicts(b.db).count, 0, "nothing was refused on B")
    }

    // MARK: 6. max and min

    func testMaxAndMinMerge() throws {
        let sites = try makeSites(policies: [("seen", "max"), ("low", "min")])
        let (a, b) = (sites[0], sites[1])

        // The winners are the older writes, so last-writer-wins would have picked the others.
        try h.sqlite(b.db, "UPDATE stock SET seen = 7 WHERE id = 'tent';")
        try h.sqlite(a.db, "UPDATE stock SET low = 40 WHERE id = 'tent';")
        tick()
        try h.sqlite(a.db, "UPDATE stock SET seen = 5 WHERE id = 'tent';")
        try h.sqlite(b.db, "UPDATE stock SET low = 60 WHERE id = 'tent';")
        try exchangeAll(sites)
        try assertValue(sites, "seen", "7", "max: the greatest value wins")
        try assertValue(sites, "low", "40", "min: the least value wins")

        let atA = try h.conflicts(a.db)
        XCTAssertTrue(
            atA.contains {
                $0["column_name"] as? String == "seen" && text($0["lost_value"]) == "5"
                    && $0["kind"] as? String == "concurrent update"
            }, "A's 5 lost to B's 7 and is logged on A: \(atA)")
        let atB = try h.conflicts(b.db)
        XCTAssertTrue(
            atB.contains {
                $0["column_name"] as? String == "low" && text($0["lost_value"]) == "60"
                    && $0["kind"] as? String == "concurrent update"
            }, "B's 60 lost to A's 40 and is logged on B: \(atB)")

        /// A local write the wrong way is undone at once and logged as `kind`; one the right way stays.
        func checkRefusedWrite(
            _ site: Site, _ column: String, refused: String, kept: String, kind: String, allowed: String,
            line: UInt = #line
        ) throws {
            try h.sqlite(site.db, "UPDATE stock SET \(column) = \(refused) WHERE id = 'tent';")
            try assertValue([site], column, kept, "a write \(kind) is undone", line: line)
            let logged = try h.conflicts(site.db).last
            XCTAssertEqual(logged?["kind"] as? String, kind, "\(String(describing: logged))", line: line)
            XCTAssertEqual(logged?["column_name"] as? String, column, "\(String(describing: logged))", line: line)
            XCTAssertEqual(text(logged?["lost_value"]), refused, "\(String(describing: logged))", line: line)
            try h.sqlite(site.db, "UPDATE stock SET \(column) = \(allowed) WHERE id = 'tent';")
            try assertValue([site], column, allowed, "a write the policy allows stays", line: line)
        }
        try checkRefusedWrite(a, "seen", refused: "3", kept: "7", kind: "below max", allowed: "9")
        try checkRefusedWrite(b, "low", refused: "80", kept: "40", kind: "above min", allowed: "10")

        try exchangeAll(sites)
        try assertValue(sites, "seen", "9", "after the second exchange")
        try assertValue(sites, "low", "10", "after the second exchange")
        XCTAssertEqual(try h.dump(a.db, table: "stock", orderBy: "id"), try h.dump(b.db, table: "stock", orderBy: "id"))
    }

    // MARK: 7. replicas must agree on policies

    func testMismatchedPolicyIsHeldUntilSetAlike() throws {
        let sites = try makeSites(policies: [])  // B is cloned while qty is still lww
        let (a, b) = (sites[0], sites[1])
        try h.ok(["policy", a.db, "stock", "qty", "counter"])
        try h.sqlite(a.db, "UPDATE stock SET qty = qty + 3 WHERE id = 'tent';")
        let bundle = try h.export(a.db, as: a.name)

        let before = try h.dump(b.db, table: "stock", orderBy: "id")
        let result = try h.ok(["import", b.db, bundle], key: b.name)
        for word in ["qty", "counter", "lww", "polic"] {
            XCTAssertTrue(result.stderr.contains(word), "the message must mention \(word): \(result.stderr)")
        }
        XCTAssertEqual(try h.dump(b.db, table: "stock", orderBy: "id"), before, "a held bundle changes nothing")
        var entries = try held(b.db)
        XCTAssertEqual(entries.count, 1, "\(entries)")
        XCTAssertTrue((entries.first?["reason"] as? String ?? "").contains("qty"), "\(entries)")

        // Importing again before agreeing keeps it held, once.
        try h.ok(["import", b.db, bundle], key: b.name)
        XCTAssertEqual(try held(b.db).count, 1)
        try assertValue([b], "qty", "10", "still held")

        try h.ok(["policy", b.db, "stock", "qty", "counter"])
        try h.ok(["import", b.db, bundle], key: b.name)
        entries = try held(b.db)
        XCTAssertEqual(entries.count, 0, "applied once the policies agree: \(entries)")
        try assertValue(sites, "qty", "13", "A's +3 arrived")

        // Both ways from now on.
        try h.sqlite(b.db, "UPDATE stock SET qty = qty - 1 WHERE id = 'tent';")
        try h.sqlite(a.db, "UPDATE stock SET qty = qty + 10 WHERE id = 'tent';")
        try exchangeAll(sites)
        try assertValue(sites, "qty", "22", "deltas from both after agreeing")
        XCTAssertEqual(try held(a.db).count, 0)
    }

    // MARK: 8. purge folds counters

    func testPurgeFoldsCountersAndTheyStillAddUp() throws {
        let sites = try makeSites(policies: [("qty", "counter"), ("weight", "counter")], clones: ["B", "C"])
        let (a, b, c) = (sites[0], sites[1], sites[2])

        try h.sqlite(a.db, "UPDATE stock SET qty = qty - 3, weight = weight + 0.5 WHERE id = 'tent';")
        try h.sqlite(b.db, "UPDATE stock SET qty = qty + 5 WHERE id = 'tent'; UPDATE stock SET qty = 20 WHERE id = 'tent';")
        try h.sqlite(
            b.db, "UPDATE stock SET weight = weight - 0.25 WHERE id = 'tent'; UPDATE stock SET qty = qty + 2 WHERE id = 'rope';")
        try h.sqlite(
            c.db, "UPDATE stock SET qty = qty - 2 WHERE id = 'tent'; UPDATE stock SET qty = qty - 2 WHERE id = 'tent';")
        var expectedQty = 10 - 3 + (5 + 5) - 4  // B's absolute 20 counts from its 15
        var expectedRope = 2
        var expectedWeight = 1.5 + 0.5 - 0.25
        try exchangeAll(sites, rounds: 2)  // the second round carries everyone's acknowledgements
        try assertValue(sites, "qty", "\(expectedQty)", "before purge")
        try assertValue(sites, "qty", "\(expectedRope)", of: "rope", "before purge")
        try assertValue(sites, "weight", "\(expectedWeight)", "before purge")

        for site in sites {
            let rowsBefore = try counterRows(site.db)
            XCTAssertGreaterThan(rowsBefore, 0, "\(site.name) keeps the deltas in _sqsync_counters")
            try h.ok(["purge", site.db], key: site.name)
            XCTAssertLessThan(try counterRows(site.db), rowsBefore, "purge on \(site.name) folds acknowledged deltas")
        }
        try assertValue(sites, "qty", "\(expectedQty)", "purge does not change values")
        try assertValue(sites, "qty", "\(expectedRope)", of: "rope", "purge does not change values")
        try assertValue(sites, "weight", "\(expectedWeight)", "purge does not change values")

        // Later deltas, relative and absolute, still add up exactly.
        try h.sqlite(a.db, "UPDATE stock SET qty = qty + 7 WHERE id = 'tent';")
        try h.sqlite(b.db, "UPDATE stock SET qty = qty - 1, weight = weight + 1 WHERE id = 'tent';")
        try h.sqlite(c.db, "UPDATE stock SET qty = 30 WHERE id = 'tent'; UPDATE stock SET qty = qty + 3 WHERE id = 'rope';")
        let absoluteC = 30 - expectedQty  // C held the converged value when it wrote 30
        expectedQty += 7 - 1 + absoluteC
        expectedRope += 3
        expectedWeight += 1
        try exchangeAll(sites, rounds: 2)
        try assertValue(sites, "qty", "\(expectedQty)", "deltas after purge")
        try assertValue(sites, "qty", "\(expectedRope)", of: "rope", "deltas after purge")
        try assertValue(sites, "weight", "\(expectedWeight)", "deltas after purge")

        // A second purge, then one more exchange: still the same.
        for site in sites { try h.ok(["purge", site.db], key: site.name) }
        try exchangeAll(sites)
        try assertValue(sites, "qty", "\(expectedQty)", "after the second purge")
        try assertValue(sites, "weight", "\(expectedWeight)", "after the second purge")
        for site in sites {
            let doctor = try h.sqsync(["doctor", site.db])
            XCTAssertEqual(doctor.status, 0, "doctor on \(site.name): \(doctor.stderr)")
            XCTAssertEqual(try h.conflicts(site.db).count, 0, "counter merges are not conflicts (\(site.name))")
        }
    }

    // MARK: 9. property: four replicas converge

    func testPropertyFourReplicasConverge() throws {
        let env = ProcessInfo.processInfo.environment
        let seedCount = env["SQSYNC_PROPERTY_SEEDS"].flatMap(Int.init) ?? 2
        let steps = env["SQSYNC_PROPERTY_STEPS"].flatMap(Int.init) ?? 40
        for seed in 1...max(1, seedCount) {
            h = try Harness()  // a fresh folder per seed
            try runSeed(UInt64(seed), steps: steps)
        }
    }

    private func runSeed(_ seed: UInt64, steps: Int) throws {
        var rng = SplitMix64(seed: seed &* 0x2000_0003)
        let sites = try makeSites(policies: [("qty", "counter")], clones: ["B", "C", "D"])
        let ids = ["tent", "rope"]
        var log: [String] = []
        var problems: [String] = []

        func exchange(_ from: Int, _ to: Int, _ label: String) throws {
            let bundle = try h.export(sites[from].db, as: sites[from].name)
            let result = try h.sqsync(["import", sites[to].db, bundle], key: sites[to].name)
            log.append("\(label): \(sites[from].name) -> \(sites[to].name) exit \(result.status)")
            if result.status != 0 {
                problems.append("seed \(seed) \(label): import into \(sites[to].name) exited \(result.status): \(result.stderr)")
            }
        }

        func randomPair() -> (Int, Int) {
            let from = rng.int(sites.count)
            var to = rng.int(sites.count - 1)
            if to >= from { to += 1 }
            return (from, to)
        }

        func relative() -> String { "qty \(rng.chance(50) ? "+" : "-") \(1 + rng.int(9))" }

        /// One step: `sql` on a site when there is one, else an exchange between two random sites.
        func perform(_ label: String, _ target: Int, _ sql: String?) throws {
            if let sql {
                log.append("\(label): \(sites[target].name): \(sql)")
                try h.sqlite(sites[target].db, sql)
            } else {
                let (from, to) = randomPair()
                try exchange(from, to, label)
            }
        }

        /// Two full rounds, after which no import may have failed.
        func settle() throws {
            try exchangeAll(sites, rounds: 2)
            XCTAssertTrue(problems.isEmpty, "seed \(seed): \(problems.prefix(3).joined(separator: "\n"))")
        }

        // Phase 1: deltas, absolute writes, deletes and re-inserts, partial exchanges.
        for step in 0..<steps {
            let label = "s\(step)"
            if rng.chance(65) {
                let target = rng.int(sites.count), id = rng.pick(ids)
                let present = try value(sites[target].db, "qty", of: id) != ""
                let sql: String
                if !present {
                    sql = "INSERT INTO stock(id, item, qty) VALUES ('\(id)', 'again', \(rng.int(50)));"
                } else {
                    switch rng.int(10) {
                    case 0..<5: sql = "UPDATE stock SET qty = \(relative()) WHERE id = '\(id)';"
                    case 5..<8: sql = "UPDATE stock SET qty = \(rng.int(100)) WHERE id = '\(id)';"
                    default: sql = "DELETE FROM stock WHERE id = '\(id)';"
                    }
                }
                try perform(label, target, sql)
            } else {
                try perform(label, 0, nil)
            }
        }
        try settle()
        let dumps = try sites.map { try h.dump($0.db, table: "stock", orderBy: "id") }
        for (site, dump) in zip(sites, dumps).dropFirst() {
            XCTAssertEqual(
                dump, dumps[0],
                "seed \(seed): \(site.name) differs from A\nA:\n\(dumps[0])\(site.name):\n\(dump)\nlog:\n\(log.suffix(30).joined(separator: "\n"))"
            )
        }

        // Phase 2: no deletes, so every row must end at exactly its start plus every delta.
        var missing = false
        for id in ids {
            guard try value(sites[0].db, "qty", of: id) == "" else { continue }
            try h.sqlite(sites[0].db, "INSERT INTO stock(id, item, qty) VALUES ('\(id)', 'phase two', 10);")
            missing = true
        }
        if missing { try exchangeAll(sites) }
        var start: [String: Int] = [:], delta: [String: Int] = [:]
        for id in ids {
            start[id] = try Int(value(sites[0].db, "qty", of: id)) ?? 0
            delta[id] = 0
            try assertValue(sites, "qty", "\(start[id] ?? 0)", of: id, "seed \(seed): start of phase two")
        }
        for step in 0..<(steps / 2) {
            let label = "p\(step)"
            if rng.chance(70) {
                let target = rng.int(sites.count), id = rng.pick(ids)
                let sql: String
                if rng.chance(70) {
                    let amount = (1 + rng.int(9)) * (rng.chance(50) ? 1 : -1)
                    sql = "UPDATE stock SET qty = qty + (\(amount)) WHERE id = '\(id)';"
                    delta[id, default: 0] += amount
                } else {
                    // An absolute write counts from what this replica holds at that moment.
                    let current = try Int(value(sites[target].db, "qty", of: id)) ?? 0
                    let new = rng.int(100)
                    sql = "UPDATE stock SET qty = \(new) WHERE id = '\(id)';"
                    delta[id, default: 0] += new - current
                }
                try perform(label, target, sql)
            } else {
                try perform(label, 0, nil)
            }
        }
        try settle()
        for id in ids {
            let expected = (start[id] ?? 0) + (delta[id] ?? 0)
            try assertValue(sites, "qty", "\(expected)", of: id, "seed \(seed): \(id) = \(start[id] ?? 0) + \(delta[id] ?? 0)")
        }
        for site in sites {
            let doctor = try h.sqsync(["doctor", site.db])
            XCTAssertEqual(doctor.status, 0, "seed \(seed): doctor on \(site.name): \(doctor.stderr)")
        }
    }
}
