import Foundation
import XCTest

/// The README's migration recipe (`refresh --before-migration`, migrate, `refresh`) on every
/// kind of schema change cr-sqlite's schema-change tests make (its `crsql_begin_alter` is our
/// `refresh --before-migration`, its `crsql_commit_alter` our `refresh`): add, drop and
/// rename a column, rename the table, a 12-step rebuild, a new primary key. A migrates
/// first and edits a row; B migrates later, each with or without `--before-migration`; then
/// they sync both ways. The edit survives on both, and they agree.
final class MigrationRecipeTests: XCTestCase {
    private static let schema = """
        CREATE TABLE todo(id TEXT PRIMARY KEY, name TEXT, done INTEGER);
        INSERT INTO todo VALUES ('1', 'cook', 0), ('2', 'wash', 0);
        """

    private struct Migration {
        var name: String
        var sql: String
        /// A's edit once migrated, and the query that must then read `expected` on both.
        var edit: String
        var check: String
        var expected: String
        /// Which replicas prepare with `--before-migration` (a dropped column needs it).
        var prepared: (a: Bool, b: Bool) = (true, true)
        var table = "todo"
    }

    private static let rebuild = """
        PRAGMA foreign_keys = OFF;
        BEGIN;
        CREATE TABLE todo_new(id TEXT PRIMARY KEY, name TEXT NOT NULL DEFAULT '', done INTEGER, due TEXT);
        INSERT INTO todo_new(id, name, done) SELECT id, name, done FROM todo;
        DROP TABLE todo;
        ALTER TABLE todo_new RENAME TO todo;
        COMMIT;
        """

    private static let rekey = """
        PRAGMA foreign_keys = OFF;
        BEGIN;
        CREATE TABLE todo_new(id TEXT NOT NULL, list TEXT NOT NULL DEFAULT 'main', name TEXT, done INTEGER, PRIMARY KEY (id, list));
        INSERT INTO todo_new(id, name, done) SELECT id, name, done FROM todo;
        DROP TABLE todo;
        ALTER TABLE todo_new RENAME TO todo;
        COMMIT;
        """

    private static let migrations: [Migration] = [
        Migration(
            name: "add column", sql: "ALTER TABLE todo ADD COLUMN note TEXT;", edit: "UPDATE todo SET note = 'n1' WHERE id = '1';",
            check: "SELECT note FROM todo WHERE id = '1';", expected: "n1"),
        Migration(
            name: "add column, plain refresh", sql: "ALTER TABLE todo ADD COLUMN note TEXT;",
            edit: "UPDATE todo SET note = 'n1' WHERE id = '1';", check: "SELECT note FROM todo WHERE id = '1';", expected: "n1",
            prepared: (false, false)),
        Migration(
            name: "drop column", sql: "ALTER TABLE todo DROP COLUMN done;", edit: "UPDATE todo SET name = 'cook dinner' WHERE id = '1';",
            check: "SELECT name FROM todo WHERE id = '1';", expected: "cook dinner"),
        Migration(
            name: "rename column", sql: "ALTER TABLE todo RENAME COLUMN name TO task;",
            edit: "UPDATE todo SET task = 'cook dinner' WHERE id = '1';", check: "SELECT task FROM todo WHERE id = '1';",
            expected: "cook dinner"),
        Migration(
            name: "rename column, A prepared, B plain", sql: "ALTER TABLE todo RENAME COLUMN name TO task;",
            edit: "UPDATE todo SET task = 'cook dinner' WHERE id = '1';", check: "SELECT task FROM todo WHERE id = '1';",
            expected: "cook dinner", prepared: (true, false)),
        Migration(
            name: "rename column, A plain, B prepared", sql: "ALTER TABLE todo RENAME COLUMN name TO task;",
            edit: "UPDATE todo SET task = 'cook dinner' WHERE id = '1';", check: "SELECT task FROM todo WHERE id = '1';",
            expected: "cook dinner", prepared: (false, true)),
        Migration(
            name: "rename table", sql: "ALTER TABLE todo RENAME TO tasks;", edit: "UPDATE tasks SET name = 'cook dinner' WHERE id = '1';",
            check: "SELECT name FROM tasks WHERE id = '1';", expected: "cook dinner", table: "tasks"),
        Migration(
            name: "rename table, plain refresh", sql: "ALTER TABLE todo RENAME TO tasks;",
            edit: "UPDATE tasks SET name = 'cook dinner' WHERE id = '1';", check: "SELECT name FROM tasks WHERE id = '1';",
            expected: "cook dinner", prepared: (false, false), table: "tasks"),
        Migration(
            name: "12-step rebuild", sql: rebuild, edit: "UPDATE todo SET name = 'cook dinner', due = 'today' WHERE id = '1';",
            check: "SELECT name || '/' || due FROM todo WHERE id = '1';", expected: "cook dinner/today"),
        Migration(
            name: "new primary key", sql: rekey, edit: "UPDATE todo SET name = 'cook dinner' WHERE id = '1';",
            check: "SELECT name || '/' || list FROM todo WHERE id = '1';", expected: "cook dinner/main"),
    ]

    func testEveryKindOfMigrationKeepsAnEditMadeBeforeThePeerMigrates() throws {
        for migration in Self.migrations {
            let h = try Harness()
            let a = try h.makeReplica("A", schema: Self.schema)
            let b = try h.cloneReplica(a, as: "B")
            func migrate(_ db: String, _ name: String, prepared: Bool) throws {
                if prepared { try h.ok(["refresh", db, "--before-migration"], key: name) }
                _ = try h.sqlite(db, migration.sql)
                try h.ok(["refresh", db], key: name)
            }
            try migrate(a, "A", prepared: migration.prepared.a)
            _ = try h.sqlite(a, migration.edit)
            try migrate(b, "B", prepared: migration.prepared.b)
            for _ in 0..<2 {
                try h.send((a, "A"), to: (b, "B"))
                try h.send((b, "B"), to: (a, "A"))
            }
            for db in [a, b] {
                XCTAssertEqual(
                    try h.sqlite(db, migration.check).trimmingCharacters(in: .whitespacesAndNewlines), migration.expected,
                    "\(migration.name): the edit at \(db)")
                XCTAssertEqual(
                    (try h.okJSON(["conflicts", db])["conflicts"] as? [Any])?.count, 0, "\(migration.name): conflicts at \(db)")
                try h.ok(["doctor", db])
            }
            XCTAssertEqual(
                try h.dump(a, table: migration.table, orderBy: "id"), try h.dump(b, table: migration.table, orderBy: "id"),
                migration.name)
        }
    }

    /// A table whose every column is in its key (nothing for `--before-migration` to copy):
    /// between the two steps export refuses all the same, and a key column renamed meanwhile
    /// keeps its rows' history (no delete and re-insert reaches the peer).
    func testAKeyOnlyTableFollowsARenamedKeyColumn() throws {
        let h = try Harness()
        let a = try h.makeReplica(
            "A", schema: "CREATE TABLE tag(item TEXT, label TEXT, PRIMARY KEY (item, label)); INSERT INTO tag VALUES ('1', 'red'), ('2', 'blue');")
        let b = try h.cloneReplica(a, as: "B")
        for (db, name) in [(a, "A"), (b, "B")] {
            try h.ok(["refresh", db, "--before-migration"], key: name)
            let refused = try h.sqsync(["export", db, "-o", h.path("early.sqsb")], key: name)
            XCTAssertEqual(refused.status, 1, refused.stderr)
            XCTAssertTrue(refused.stderr.contains("sqsync refresh"), refused.stderr)
            _ = try h.sqlite(db, "ALTER TABLE tag RENAME COLUMN label TO colour;")
            let refreshed = try h.okJSON(["refresh", db], key: name)
            XCTAssertEqual(refreshed["renamed_columns"] as? [String: String], ["tag.label": "colour"], "\(refreshed)")
            XCTAssertEqual((refreshed["captured"] as? [String: Int])?["deletes"], 0, "\(refreshed)")
        }
        _ = try h.sqlite(a, "INSERT INTO tag VALUES ('3', 'green');")
        try h.send((a, "A"), to: (b, "B"))
        try h.send((b, "B"), to: (a, "A"))
        XCTAssertEqual(try h.dump(a, table: "tag", orderBy: "item"), try h.dump(b, table: "tag", orderBy: "item"))
        XCTAssertEqual(try h.sqlite(b, "SELECT count(*) FROM tag;"), "3\n")
        for db in [a, b] { try h.ok(["doctor", db]) }
    }
}
