import Foundation
import SQLiteDatabase
import XCTest

/// keygen, init, track/untrack, status, doctor/refresh, clone, and bad input, through the built binary.
final class CaptureCLITests: XCTestCase {
    private var h: Harness!

    override func setUpWithError() throws { h = try Harness() }
    override func tearDown() { h = nil }

    private func triggers(_ db: String, table: String) throws -> [String] {
        try h.sqlite(
            db,
            "SELECT name FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = '\(table)' AND name LIKE '\\_sqsync\\_%' ESCAPE '\\' ORDER BY name;"
        )
        .split(separator: "\n").map(String.init)
    }

    private func trackedTables(_ db: String) throws -> [String: Int] {
        let tables = try h.okJSON(["status", db])["tables"] as? [[String: Any]] ?? []
        var result: [String: Int] = [:]
        for table in tables { result[table["name"] as? String ?? "?"] = table["rows"] as? Int ?? -1 }
        return result
    }

    // MARK: keygen

    func testKeygenWritesPrivateKey0600AndPublicKeyAndPrintsAllowedSignersLine() throws {
        let key = h.path("keys/carol_ed25519")
        let result = try h.sqsync(["keygen", "--out", key, "--name", "carol"])
        XCTAssertEqual(result.status, 0, result.stderr)

        let attributes = try FileManager.default.attributesOfItem(atPath: key)
        XCTAssertEqual((attributes[.posixPermissions] as? NSNumber)?.intValue, 0o600, "private key must be 0600")
        let privateText = try String(contentsOfFile: key, encoding: .utf8)
        XCTAssertTrue(privateText.hasPrefix("-----BEGIN OPENSSH PRIVATE KEY-----"), privateText)

        let pub = try String(contentsOfFile: key + ".pub", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        let pubFields = pub.split(separator: " ").map(String.init)
        XCTAssertGreaterThanOrEqual(pubFields.count, 2)
        XCTAssertEqual(pubFields.first, "ssh-ed25519")

        // stdout is exactly one allowed_signers line: principal, optional options, key type, the same key blob.
        let lines = result.stdout.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, 1, result.stdout)
        let fields = (lines.first ?? "").split(separator: " ").map(String.init)
        XCTAssertEqual(fields.first, "carol")
        XCTAssertTrue(fields.contains("ssh-ed25519"), lines.first ?? "")
        XCTAssertEqual(fields.last, pubFields[1], "the allowed_signers line must carry the .pub key")

        // OpenSSH itself reads the private key and derives the same public key.
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/ssh-keygen") {
            let derived = try Harness.run("/usr/bin/ssh-keygen", ["-y", "-f", key])
            XCTAssertEqual(derived.status, 0, derived.stderr)
            XCTAssertEqual(derived.stdout.split(separator: " ").dropFirst().first.map(String.init), pubFields[1])
        }

        // A second keygen on the same path refuses and leaves the key alone.
        let before = h.fileBytes(key)
        let again = try h.sqsync(["keygen", "--out", key, "--name", "carol"])
        XCTAssertEqual(again.status, 1)
        XCTAssertEqual(again.stderrLines.count, 1, again.stderr)
        XCTAssertTrue(again.stderr.contains(key), again.stderr)
        XCTAssertEqual(h.fileBytes(key), before)
    }

    // MARK: init and track

    func testInitIsIdempotent() throws {
        let db = h.path("app.db")
        try h.sqlite(db, "CREATE TABLE t(id TEXT PRIMARY KEY, v TEXT);")
        let first = try h.okJSON(["init", db, "--name", "site1"])
        let dumpAfterFirst = try h.fullDump(db)
        let second = try h.okJSON(["init", db, "--name", "site1"])
        let id = try XCTUnwrap(first["knowledge_id"] as? String)
        XCTAssertNotNil(UUID(uuidString: id), "knowledge ID should be a UUID: \(id)")
        XCTAssertEqual(second["knowledge_id"] as? String, id)
        XCTAssertEqual(first["created"] as? Bool, true)
        XCTAssertEqual(second["created"] as? Bool, false)
        XCTAssertEqual(second["name"] as? String, "site1")
        XCTAssertEqual(try h.fullDump(db), dumpAfterFirst, "a second init must not change anything")
    }

    func testTrackByNameThenAllCapturesExistingRows() throws {
        let db = h.path("app.db")
        try h.sqlite(
            db,
            """
            CREATE TABLE a(id TEXT PRIMARY KEY, v TEXT);
            CREATE TABLE b(k1 TEXT, k2 INTEGER, v REAL, PRIMARY KEY (k1, k2));
            CREATE TABLE "odd name"(id TEXT PRIMARY KEY, v) WITHOUT ROWID;
            INSERT INTO a VALUES ('a1', 'x'), ('a2', 'y');
            INSERT INTO b VALUES ('k', 1, 1.5);
            """)
        try h.ok(["init", db])
        let named = try h.okJSON(["track", db, "a"])
        let tracked = named["tracked"] as? [[String: Any]] ?? []
        XCTAssertEqual(tracked.count, 1)
        XCTAssertEqual(tracked.first?["table"] as? String, "a")
        XCTAssertEqual(tracked.first?["rows_captured"] as? Int, 2)
        XCTAssertEqual(try trackedTables(db), ["a": 2])
        XCTAssertFalse(try triggers(db, table: "a").isEmpty)
        XCTAssertTrue(try triggers(db, table: "b").isEmpty)

        try h.ok(["track", db, "--all"])
        XCTAssertEqual(try trackedTables(db), ["a": 2, "b": 1, "odd name": 0])
        XCTAssertFalse(try triggers(db, table: "b").isEmpty)
        XCTAssertFalse(try triggers(db, table: "odd name").isEmpty)
        XCTAssertTrue(
            try h.sqlite(
                db,
                "SELECT count(*) FROM sqlite_schema WHERE name LIKE '\\_sqsync\\_%' ESCAPE '\\' AND tbl_name NOT LIKE '\\_sqsync\\_%' ESCAPE '\\' AND type = 'table';"
            )
            .hasPrefix("0"), "track --all must not track sqsync's own tables")
    }

    func testTrackTableWithoutPrimaryKeyFailsNamingIt() throws {
        let db = h.path("app.db")
        try h.sqlite(db, "CREATE TABLE loose(x TEXT, y TEXT); INSERT INTO loose VALUES ('1', '2');")
        try h.ok(["init", db])
        let before = try h.fullDump(db)
        let result = try h.sqsync(["track", db, "loose"])
        XCTAssertEqual(result.status, 1, result.stderr)
        XCTAssertEqual(result.stderrLines.count, 1, result.stderr)
        XCTAssertTrue(result.stderr.contains("loose"), result.stderr)
        XCTAssertEqual(try h.fullDump(db), before)
        XCTAssertTrue(try triggers(db, table: "loose").isEmpty)
    }

    func testIntegerPrimaryKeyNeedsFlag() throws {
        let db = h.path("app.db")
        try h.sqlite(db, "CREATE TABLE counters(id INTEGER PRIMARY KEY, n INTEGER); INSERT INTO counters VALUES (1, 10);")
        try h.ok(["init", db])
        let before = try h.fullDump(db)
        let refused = try h.sqsync(["track", db, "counters"])
        XCTAssertEqual(refused.status, 1, refused.stderr)
        XCTAssertEqual(refused.stderrLines.count, 1, refused.stderr)
        XCTAssertTrue(refused.stderr.contains("--allow-integer-pk"), refused.stderr)
        XCTAssertTrue(refused.stderr.contains("counters"), refused.stderr)
        XCTAssertEqual(try h.fullDump(db), before)

        try h.ok(["track", db, "counters", "--allow-integer-pk"])
        XCTAssertEqual(try trackedTables(db), ["counters": 1])
        XCTAssertFalse(try triggers(db, table: "counters").isEmpty)
    }

    func testTrackUnknownTableFails() throws {
        let db = h.path("app.db")
        try h.sqlite(db, "CREATE TABLE t(id TEXT PRIMARY KEY);")
        try h.ok(["init", db])
        let before = try h.fullDump(db)
        let result = try h.sqsync(["track", db, "nosuchtable"])
        XCTAssertEqual(result.status, 1, result.stderr)
        XCTAssertEqual(result.stderrLines.count, 1, result.stderr)
        XCTAssertTrue(result.stderr.contains("nosuchtable"), result.stderr)
        XCTAssertEqual(try h.fullDump(db), before)
    }

    // MARK: status, doctor, refresh

    func testStatusJSONCountsShellWrites() throws {
        let db = try h.makeReplica(
            "A",
            schema: """
                CREATE TABLE notes(id TEXT PRIMARY KEY, body TEXT);
                CREATE TABLE tags(note TEXT, tag TEXT, PRIMARY KEY (note, tag));
                """)
        let id = try h.knowledgeID(db)
        let start = try h.okJSON(["status", db])
        let startSeq = (start["knowledge"] as? [String: Int])?[id] ?? 0
        XCTAssertEqual(start["name"] as? String, "A")

        try h.sqlite(
            db,
            """
            INSERT INTO notes VALUES ('n1', 'one'), ('n2', 'two'), ('n3', 'three');
            INSERT INTO tags VALUES ('n1', 'red'), ('n1', 'blue');
            UPDATE notes SET body = 'TWO' WHERE id = 'n2';
            DELETE FROM notes WHERE id = 'n3';
            """)
        let status = try h.okJSON(["status", db])
        XCTAssertEqual(status["knowledge_id"] as? String, id)
        let tables = Dictionary(
            uniqueKeysWithValues: (status["tables"] as? [[String: Any]] ?? []).map {
                ($0["name"] as? String ?? "?", $0["rows"] as? Int ?? -1)
            })
        XCTAssertEqual(tables, ["notes": 2, "tags": 2])
        let seq = (status["knowledge"] as? [String: Int])?[id] ?? 0
        XCTAssertGreaterThan(seq, startSeq, "captured writes advance this replica's knowledge")
        XCTAssertEqual(status["tombstones"] as? Int, 1, "the delete leaves one tombstone")
        XCTAssertEqual(status["conflicts"] as? Int, 0)
    }

    func testDoctorDetectsMigrationUntilRefresh() throws {
        let db = try h.makeReplica("A", schema: "CREATE TABLE items(id TEXT PRIMARY KEY, a TEXT);")
        try h.ok(["doctor", db])

        try h.sqlite(db, "ALTER TABLE items ADD COLUMN c TEXT;")
        let sick = try h.sqsync(["doctor", db])
        XCTAssertNotEqual(sick.status, 0, "doctor must fail once triggers miss a column")
        XCTAssertTrue(sick.stderr.contains("items"), sick.stderr)
        XCTAssertTrue(sick.stderr.contains("refresh"), sick.stderr)
        let sickJSON = h.json(try h.sqsync(["doctor", db, "--json"]))
        XCTAssertEqual(sickJSON["ok"] as? Bool, false)

        try h.ok(["refresh", db])
        let healthy = try h.sqsync(["doctor", db])
        XCTAssertEqual(healthy.status, 0, healthy.stderr)

        // The refreshed triggers capture the new column: a clone sees it after export/import.
        try h.sqlite(db, "INSERT INTO items VALUES ('i1', 'a', 'c-value');")
        let b = try h.cloneReplica(h.path("A.db"), as: "B")
        XCTAssertEqual(try h.dump(b, table: "items", orderBy: "id"), "'i1'|'a'|'c-value'\n")
    }

    // MARK: imports and the app's own triggers

    /// The app's own triggers (an audit table here, as an FTS index would be kept) fire for
    /// imported rows as for local ones; neither they nor the import become the receiver's
    /// changes, and the `sqlite3` shell's next write on the receiver is captured.
    func testAppTriggersFireForImportedRowsAndImportsAreNotCaptured() throws {
        let schema = """
            CREATE TABLE items(id TEXT PRIMARY KEY, name TEXT);
            CREATE TABLE audit(item TEXT, what TEXT);
            CREATE TRIGGER items_audit_insert AFTER INSERT ON items BEGIN INSERT INTO audit VALUES (NEW.id, 'insert'); END;
            CREATE TRIGGER items_audit_update AFTER UPDATE ON items BEGIN INSERT INTO audit VALUES (NEW.id, 'update'); END;
            """
        let a = try h.makeReplica("A", schema: schema, trackArguments: ["items"])
        let b = try h.cloneReplica(a, as: "B")
        try h.sqlite(a, "INSERT INTO items VALUES ('x', 'one'), ('y', 'two');")
        try h.send((a, "A"), to: (b, "B"))
        try h.sqlite(a, "UPDATE items SET name = 'TWO' WHERE id = 'y';")
        try h.send((a, "A"), to: (b, "B"))
        XCTAssertEqual(try h.dump(b, table: "items", orderBy: "id"), try h.dump(a, table: "items", orderBy: "id"))
        XCTAssertEqual(try h.sqlite(b, "SELECT item || ' ' || what FROM audit ORDER BY rowid;"), "x insert\ny insert\ny update\n")
        XCTAssertEqual(try h.okJSON(["status", b])["local_changes"] as? Int, 0)

        try h.sqlite(b, "UPDATE items SET name = 'ONE' WHERE id = 'x';")
        XCTAssertEqual(try h.okJSON(["status", b])["local_changes"] as? Int, 1)
        try h.send((b, "B"), to: (a, "A"))
        XCTAssertEqual(try h.sqlite(a, "SELECT name FROM items WHERE id = 'x';"), "ONE\n")
        XCTAssertEqual(try h.okJSON(["doctor", b])["ok"] as? Bool, true)
    }

    // MARK: clone and untrack

    func testCloneHasNewIdentityAndSameData() throws {
        let a = try h.makeReplica("A", schema: "CREATE TABLE t(id TEXT PRIMARY KEY, v, w BLOB);")
        try h.sqlite(a, "INSERT INTO t VALUES ('1', 1.5, x'00ff'), ('2', NULL, NULL), ('3', 'héllo', x'');")
        let aStatus = try h.okJSON(["status", a])
        let b = try h.cloneReplica(a, as: "B")
        let bStatus = try h.okJSON(["status", b])
        let aID = try XCTUnwrap(aStatus["knowledge_id"] as? String)
        let bID = try XCTUnwrap(bStatus["knowledge_id"] as? String)
        XCTAssertNotEqual(aID, bID, "a clone is a new replica")
        XCTAssertEqual(bStatus["name"] as? String, "B")
        XCTAssertEqual(try h.dump(b, table: "t", orderBy: "id"), try h.dump(a, table: "t", orderBy: "id"))
        XCTAssertEqual(
            (bStatus["knowledge"] as? [String: Int])?[aID], (aStatus["knowledge"] as? [String: Int])?[aID],
            "the clone knows everything its source knew")
        XCTAssertEqual(try h.knowledgeID(a), aID, "cloning must not change the source's identity")
        // The clone captures its own writes.
        try h.sqlite(b, "UPDATE t SET v = 'b' WHERE id = '2';")
        XCTAssertGreaterThan((try h.okJSON(["status", b])["knowledge"] as? [String: Int])?[bID] ?? 0, 0)
    }

    func testUntrackRemovesTriggers() throws {
        let db = try h.makeReplica(
            "A", schema: "CREATE TABLE keep(id TEXT PRIMARY KEY, v); CREATE TABLE drop_me(id TEXT PRIMARY KEY, v);")
        XCTAssertFalse(try triggers(db, table: "drop_me").isEmpty)
        try h.ok(["untrack", db, "drop_me"])
        XCTAssertEqual(try triggers(db, table: "drop_me"), [], "no _sqsync_ triggers may remain on an untracked table")
        XCTAssertFalse(try triggers(db, table: "keep").isEmpty)
        XCTAssertEqual(try trackedTables(db), ["keep": 0])
        let id = try h.knowledgeID(db)
        let seq = (try h.okJSON(["status", db])["knowledge"] as? [String: Int])?[id]
        try h.sqlite(db, "INSERT INTO drop_me VALUES ('x', 1);")
        XCTAssertEqual(
            (try h.okJSON(["status", db])["knowledge"] as? [String: Int])?[id], seq,
            "writes to an untracked table are not captured")
    }

    // MARK: bad input

    func testMissingDatabaseFileFailsNamingItAndCreatesNothing() throws {
        try h.makeKey("A")
        let missing = h.path("missing.db")
        let commands: [[String]] = [
            ["status", missing], ["track", missing, "--all"], ["untrack", missing, "t"], ["doctor", missing],
            ["refresh", missing], ["conflicts", missing], ["peers", missing], ["export", missing, "-o", h.path("x.sqsb")],
            ["clone", missing, h.path("copy.db")], ["import", missing, h.path("nothing.sqsb")], ["init", missing],
            ["why", missing, "t", "1"],
        ]
        for command in commands {
            let result = try h.sqsync(command, key: "A")
            let label = command.first ?? ""
            XCTAssertEqual(result.status, 1, "\(label): \(result.stderr)")
            XCTAssertEqual(result.stderrLines.count, 1, "\(label): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains("missing.db"), "\(label): \(result.stderr)")
            XCTAssertFalse(FileManager.default.fileExists(atPath: missing), "\(label) created the missing database")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: h.path("x.sqsb")))
        XCTAssertFalse(FileManager.default.fileExists(atPath: h.path("copy.db")))
        let refused = try h.sqsync(["init", missing], key: "A")
        XCTAssertTrue(refused.stderr.contains("--create"), refused.stderr)
        // With --create, a new, empty replica.
        let created = try h.okJSON(["init", missing, "--create", "--name", "fresh"], key: "A")
        XCTAssertEqual(created["created"] as? Bool, true)
        XCTAssertEqual(try h.okJSON(["status", missing])["name"] as? String, "fresh")
    }

    func testFileThatIsNotADatabaseFailsNamingItAndStaysUnchanged() throws {
        try h.makeKey("A")
        let junk = h.path("notes.db")
        var generator = SystemRandomNumberGenerator()
        let text = (0..<200).map { _ in "line \(generator.next() as UInt64) of plain text, not SQLite" }.joined(separator: "\n")
        try text.write(toFile: junk, atomically: true, encoding: .utf8)
        let before = h.fileBytes(junk)
        let bundleSource = try h.makeReplica("B", schema: "CREATE TABLE t(id TEXT PRIMARY KEY);")
        let bundle = try h.export(bundleSource, as: "B")
        let commands: [[String]] = [
            ["init", junk], ["status", junk], ["track", junk, "--all"], ["doctor", junk], ["refresh", junk],
            ["conflicts", junk], ["export", junk, "-o", h.path("x.sqsb")], ["import", junk, bundle],
        ]
        for command in commands {
            let result = try h.sqsync(command, key: "A")
            let label = command.first ?? ""
            XCTAssertEqual(result.status, 1, "\(label): \(result.stderr)")
            XCTAssertEqual(result.stderrLines.count, 1, "\(label): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains("notes.db"), "\(label): \(result.stderr)")
            XCTAssertEqual(h.fileBytes(junk), before, "\(label) changed the file")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: h.path("x.sqsb")))
    }

    func testUsageErrorsExitTwoAndChangeNothing() throws {
        let db = try h.makeReplica("A", schema: "CREATE TABLE t(id TEXT PRIMARY KEY, v);")
        try h.sqlite(db, "INSERT INTO t VALUES ('1', 'one');")
        let dump = try h.fullDump(db)
        let bytes = h.fileBytes(db)
        let out = h.path("out.sqsb")
        try FileManager.default.createDirectory(atPath: h.path("box"), withIntermediateDirectories: true)
        let commands: [[String]] = [
            ["export", db],
            ["export", db, "-o", out, "--to", h.path("box")],
            ["export", db, "-o", out, "--since", "not-knowledge"],
            ["export", db, "-o", out, "--for", "B", "--since", "x:1"],
            ["export", db, "-o", out, "--frobnicate"],
            ["status", db, "--bogus"],
            ["track", db],
            ["import"],
            ["no-such-command", db],
        ]
        for command in commands {
            let result = try h.sqsync(command, key: "A")
            XCTAssertEqual(result.status, 2, "\(command.joined(separator: " ")): \(result.stderr)")
            XCTAssertFalse(result.stderr.isEmpty, "a usage error says what is wrong")
            XCTAssertEqual(h.fileBytes(db), bytes, "\(command.joined(separator: " ")) touched the database file")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: out))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: h.path("box")), [])
        XCTAssertEqual(try h.fullDump(db), dump)
    }
}
