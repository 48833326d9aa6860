import ChangeLog
import Foundation
import SQLiteDatabase

/// An app's schema migration under sqsync (the README's "Migrating the schema"): `refresh
/// --before-migration`, the migration, then `refresh`, which finds the values the migration
/// wrote while no trigger ran. Against the same migration on a plain SQLite copy. The
/// migration adds a column, fills it, and edits one row in ten, so refresh compares every
/// kept value with the table's and logs a tenth of the rows. Keys as UUIDs (`items`) and as
/// integers (a rowid table with an index on a column, as Chinook's tables have): refresh's
/// joins must look up sqsync's metadata by each row's key, never scan the table (or a
/// column's index, which SQLite may find cheaper) once per kept value.
enum MigrationBench {
    static let migration = """
        ALTER TABLE items ADD COLUMN color TEXT;
        UPDATE items SET color = 'red';
        UPDATE items SET note = note || ' (migrated)' WHERE qty % 10 = 0;
        """
    static let integerKeys = """
        CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, qty INTEGER, price REAL, note TEXT, updated INTEGER);
        CREATE INDEX items_by_qty ON items (qty);
        """

    static func run(folder: String, keys: [String]) throws {
        print("Migration (\(keys.count) rows): refresh --before-migration, the migration, refresh")
        print("                                          plain SQLite    tracked   tracked/plain time (median of \(max(1, Bench.repeats)))")
        try measure("UUID keys", folder: folder, keys: keys.map(SQLValue.text), schema: Bench.schema)
        try measure("integer keys", folder: folder, keys: keys.indices.map { .integer(Int64($0 + 1)) }, schema: integerKeys)
        print("")
    }

    private static func measure(_ label: String, folder: String, keys: [SQLValue], schema: String) throws {
        var plainTimes: [Double] = [], trackedTimes: [Double] = []
        var logged = 0
        for _ in 0..<max(1, Bench.repeats) {
            let plain = try Bench.openDatabase(folder + "/migration-plain.db", schema: schema)
            try Bench.insertAll(plain, keys: keys)
            plainTimes.append(try Bench.time { try plain.inTransaction { try plain.execute(migration) } })

            let path = folder + "/migration-tracked.db"
            try Bench.insertAll(try Bench.openDatabase(path, schema: schema), keys: keys)
            let replica = try Replica.initialize(path: path, name: "migrating").replica
            try replica.track(["items"], allowIntegerPrimaryKey: true)
            var result: RefreshResult?
            trackedTimes.append(
                try Bench.time {
                    _ = try replica.prepareMigration()
                    try replica.database.inTransaction { try replica.database.execute(migration) }
                    result = try replica.refresh()
                })
            logged = result?.capturedUpdates ?? 0
        }
        let plain = plainTimes.sorted()[plainTimes.count / 2], tracked = trackedTimes.sorted()[trackedTimes.count / 2]
        Bench.line(
            "  \(label)", String(format: "%10.3f s", plain), String(format: "%8.3f s", tracked), tracked / plain,
            "(\(logged) values logged)")
    }
}
