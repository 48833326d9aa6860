import ChangeLog

/// The tables Bundle keeps in a replica, and the migrations that make them (ChangeLog runs
/// them: ``ModuleMigrations``). Each store opens through ``ready(_:)``, so a replica gains them
/// whatever opened it.
///
/// Versions 1–4 take the tables over from an older sqsync, whose ChangeLog migrations (1, 4,
/// 13 and 15) made them: each step makes what is missing and leaves what exists.
enum BundleTables {
    /// Makes sure this replica has Bundle's tables; cheap after the first call on a replica.
    static func ready(_ replica: Replica) throws { try replica.migrate(migrations) }

    /// Whether Bundle has kept anything in this replica yet; reads nothing else, writes nothing.
    static func exist(in replica: Replica) throws -> Bool { try replica.hasMigrated(migrations) }

    static let migrations = ModuleMigrations(
        module: "Bundle", offset: 1000,
        steps: [
            .init(
                1,
                """
                -- Bundles that could not be applied yet (a column or table this replica lacks,
                -- admin statements not held yet), kept by path and retried on every import.
                CREATE TABLE IF NOT EXISTS "_sqsync_held" (
                    "digest" TEXT PRIMARY KEY,
                    "path" TEXT NOT NULL,
                    "sender" TEXT NOT NULL,
                    "reason" TEXT NOT NULL,
                    "held_at" TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
                );
                """),
            .init(
                2, runIf: #"NOT EXISTS (SELECT 1 FROM sqlite_schema WHERE "name" = '_sqsync_keys')"#,
                """
                -- The latest acknowledgement statement each replica signed itself (its own
                -- included): bundles carry them unchanged, and only they say what a replica other
                -- than the sender holds. "counter" grows with every statement a replica signs.
                -- Statements an sqsync before format 3 kept (its text form) cannot travel: gone.
                CREATE TABLE IF NOT EXISTS "_sqsync_statements" (
                    "replica" TEXT PRIMARY KEY,
                    "counter" INTEGER NOT NULL,
                    "statement" BLOB NOT NULL
                );
                DELETE FROM "_sqsync_statements";

                -- Every key a replica signs with, in order: its first (its identity's), then each
                -- one a signed key move led to. A key signs that replica's changes numbered after
                -- "after_seq", up to "until_seq" once it moved away (NULL while it is the current
                -- key; 0 for a key moved away from before format 3, which signs nothing). One key
                -- speaks for one replica. "move" is the signed move that made it current.
                CREATE TABLE "_sqsync_keys" (
                    "key" TEXT PRIMARY KEY,
                    "site" INTEGER NOT NULL,
                    "after_seq" INTEGER NOT NULL,
                    "until_seq" INTEGER,
                    "move" BLOB
                );
                CREATE INDEX "_sqsync_keys_of_site" ON "_sqsync_keys" ("site", "after_seq");
                INSERT OR IGNORE INTO "_sqsync_keys" ("key", "site", "after_seq")
                    SELECT "signing_key", "site", 0 FROM "_sqsync_sites" WHERE "signing_key" IS NOT NULL;
                -- Moves an sqsync before format 3 kept: their old keys sign nothing any more.
                CREATE TABLE IF NOT EXISTS "_sqsync_key_moves" (
                    "from_key" TEXT PRIMARY KEY,
                    "replica" TEXT NOT NULL,
                    "to_key" TEXT NOT NULL,
                    "statement" BLOB NOT NULL
                );
                INSERT OR IGNORE INTO "_sqsync_keys" ("key", "site", "after_seq", "until_seq")
                    SELECT m."from_key", s."site", 0, 0 FROM "_sqsync_key_moves" m
                    JOIN "_sqsync_sites" s ON s."knowledge_id" = m."replica";
                """),
            .init(
                3,
                """
                DROP TABLE IF EXISTS "_sqsync_key_moves";
                """),
            .init(
                4,
                runIf: #"NOT EXISTS (SELECT 1 FROM pragma_table_info('_sqsync_segments') WHERE "name" = 'scope')"#,
                """
                -- Other replicas' signed segments, kept as they came, byte for byte, to relay to
                -- peers that lack them (SegmentStore). "scope": '*' for every row, else the labels
                -- (JSON) the segment was cut for.
                CREATE TABLE "_sqsync_segments_15" (
                    "id" INTEGER PRIMARY KEY,
                    "site" INTEGER NOT NULL,
                    "first" INTEGER NOT NULL,
                    "last" INTEGER NOT NULL,
                    "created_hlc" INTEGER NOT NULL,
                    "records" INTEGER NOT NULL,
                    "scope" TEXT NOT NULL DEFAULT '*',
                    "bytes" BLOB NOT NULL,
                    UNIQUE ("site", "first", "last", "scope")
                );
                CREATE TABLE IF NOT EXISTS "_sqsync_segments" (
                    "id" INTEGER PRIMARY KEY,
                    "site" INTEGER NOT NULL,
                    "first" INTEGER NOT NULL,
                    "last" INTEGER NOT NULL,
                    "created_hlc" INTEGER NOT NULL,
                    "records" INTEGER NOT NULL,
                    "bytes" BLOB NOT NULL
                );
                INSERT INTO "_sqsync_segments_15" ("id", "site", "first", "last", "created_hlc", "records", "bytes")
                  SELECT "id", "site", "first", "last", "created_hlc", "records", "bytes" FROM "_sqsync_segments";
                DROP TABLE "_sqsync_segments";
                ALTER TABLE "_sqsync_segments_15" RENAME TO "_sqsync_segments";
                """),
            .init(
                5,
                """
                -- One key may be the first key of several replicas (IDs made from the key and a
                -- birth, docs/KEYS.md): a key and a replica name a row. "birth": the replica's birth,
                -- on its first key's row (NULL for an ID made from the key alone, or a random one).
                CREATE TABLE "_sqsync_keys_5" (
                    "key" TEXT NOT NULL,
                    "site" INTEGER NOT NULL,
                    "after_seq" INTEGER NOT NULL,
                    "until_seq" INTEGER,
                    "move" BLOB,
                    "birth" BLOB,
                    PRIMARY KEY ("key", "site")
                );
                INSERT INTO "_sqsync_keys_5" ("rowid", "key", "site", "after_seq", "until_seq", "move")
                    SELECT "rowid", "key", "site", "after_seq", "until_seq", "move" FROM "_sqsync_keys";
                DROP TABLE "_sqsync_keys";
                ALTER TABLE "_sqsync_keys_5" RENAME TO "_sqsync_keys";
                CREATE INDEX "_sqsync_keys_of_site" ON "_sqsync_keys" ("site", "after_seq");
                """),
            .init(
                6,
                """
                -- Key moves, which every segment an import admits follows trust through: found
                -- without reading a row per replica (a thousand-replica catch-up read a million).
                CREATE INDEX "_sqsync_keys_moves" ON "_sqsync_keys" ("site", "after_seq") WHERE "move" IS NOT NULL;
                """),
            .init(
                7,
                """
                -- The admin statements each kept segment names, as its origin signed them (sorted
                -- hex IDs, comma-separated; NULL for segments kept before): two segments of one
                -- origin covering a number in common name the same ones, unless two files write
                -- under its identity (SegmentStore.keep).
                ALTER TABLE "_sqsync_segments" ADD COLUMN "words" TEXT;
                """),
        ])

    /// What a copy made by `clone` must not inherit: bundles held beside the original's file.
    static let perFileState = ["_sqsync_held"]
}
