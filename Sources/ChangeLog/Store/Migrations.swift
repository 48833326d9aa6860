import SQLiteDatabase

/// The tables ChangeLog keeps inside a replica, created by numbered migrations. A migration
/// that has shipped is never edited: a later change gets a new number. (Versions up to 15
/// once also created Bundle's and Transport's tables; those modules now create them, from the
/// same SQL, by their own migrations: ``ModuleMigrations``. Editing those versions changed
/// nothing for a database that had applied them, and the modules' migrations create what a
/// database that had not yet applied them lacks.)
enum MetadataSQL {
    static let migrations: [(version: Int, sql: String)] = [
        (
            1,
            """
            CREATE TABLE "_sqsync_migrations" (
                "version" INTEGER PRIMARY KEY,
                "applied_at" TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
            );

            -- One row. "site" is this replica's row in _sqsync_sites, "seq" its last local
            -- sequence number, "hlc" the hybrid logical clock (ms) last used or seen.
            -- "applying" is 1 only inside sqsync's own import transaction, so that the
            -- triggers stay silent for changes that came from peers.
            CREATE TABLE "_sqsync_replica" (
                "id" INTEGER PRIMARY KEY CHECK ("id" = 0),
                "site" INTEGER NOT NULL,
                "seq" INTEGER NOT NULL,
                "hlc" INTEGER NOT NULL,
                "applying" INTEGER NOT NULL DEFAULT 0
            );

            -- Every replica this one has heard of, itself included. "known_seq" is this
            -- replica's knowledge of that site (its version vector entry). "reported_seq" and
            -- "reported_hlc" are the site's own clock as it last reported it: a replica's own
            -- clock never goes back, so a report that does means a copied file.
            -- "forgotten_seq": deletions of that site up to this seq were purged here, so a
            -- replica that knows less of that site cannot be brought up to date by a bundle.
            CREATE TABLE "_sqsync_sites" (
                "site" INTEGER PRIMARY KEY,
                "knowledge_id" TEXT NOT NULL UNIQUE,
                "name" TEXT,
                "known_seq" INTEGER NOT NULL DEFAULT 0,
                "forgotten_seq" INTEGER NOT NULL DEFAULT 0,
                "last_heard" TEXT,
                "reported_seq" INTEGER,
                "reported_hlc" INTEGER,
                "retired" INTEGER NOT NULL DEFAULT 0
            );

            -- The last knowledge each peer acknowledged: peer holds site's changes up to seq.
            CREATE TABLE "_sqsync_acks" (
                "peer" INTEGER NOT NULL,
                "site" INTEGER NOT NULL,
                "seq" INTEGER NOT NULL,
                PRIMARY KEY ("peer", "site")
            ) WITHOUT ROWID;

            CREATE TABLE "_sqsync_tables" (
                "tid" INTEGER PRIMARY KEY,
                "name" TEXT NOT NULL UNIQUE
            );

            -- Stable column ids: triggers and cell clocks refer to "cid", so adding a column
            -- never renumbers the others.
            CREATE TABLE "_sqsync_columns" (
                "tid" INTEGER NOT NULL,
                "cid" INTEGER NOT NULL,
                "name" TEXT NOT NULL,
                "is_pk" INTEGER NOT NULL,
                PRIMARY KEY ("tid", "cid"),
                UNIQUE ("tid", "name")
            );

            -- One entry per row ever seen, live or deleted: the row's causal length "cl"
            -- (odd: alive, even: deleted) and the clock of the insert or delete that set it.
            -- "pk" is the key value itself for one-column keys, quote(a)||','||quote(b)… for
            -- composite keys.
            CREATE TABLE "_sqsync_rows" (
                "tid" INTEGER NOT NULL,
                "pk" NOT NULL,
                "cl" INTEGER NOT NULL,
                "hlc" INTEGER NOT NULL,
                "site" INTEGER NOT NULL,
                "seq" INTEGER NOT NULL,
                PRIMARY KEY ("tid", "pk")
            ) WITHOUT ROWID;

            -- One entry per column value written after its row's insert. A column without an
            -- entry carries the clock of the row's entry. Entries of deleted rows are removed.
            CREATE TABLE "_sqsync_cells" (
                "tid" INTEGER NOT NULL,
                "pk" NOT NULL,
                "cid" INTEGER NOT NULL,
                "hlc" INTEGER NOT NULL,
                "site" INTEGER NOT NULL,
                "seq" INTEGER NOT NULL,
                PRIMARY KEY ("tid", "pk", "cid")
            ) WITHOUT ROWID;

            -- Every change that lost a conflict, kept for the user to read.
            CREATE TABLE "_sqsync_conflicts" (
                "id" INTEGER PRIMARY KEY,
                "recorded_at" TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
                "kind" TEXT NOT NULL,
                "table_name" TEXT NOT NULL,
                "pk" TEXT NOT NULL,
                "column_name" TEXT,
                "lost_value",
                "lost_row" TEXT,
                "lost_site" TEXT NOT NULL,
                "lost_hlc" INTEGER NOT NULL,
                "won_site" TEXT,
                "won_hlc" INTEGER
            );
            -- (The tables Bundle and Transport keep from this version on are created by
            -- those modules: Bundle/Store/BundleTables.swift, Transport/MailboxTables.swift.)
            """
        ),
        (
            2,
            """
            -- The capture log: each trigger appends one row (TriggerSQL). "op" 0 is an insert,
            -- 1 a delete, 2 + w an update of the columns whose bits are set in "mask" (word w).
            -- "stamp" is the wall clock in ms. Every fold empties it (numberPendingChanges).
            CREATE TABLE "_sqsync_log" (
                "id" INTEGER PRIMARY KEY,
                "tid" INTEGER NOT NULL,
                "op" INTEGER NOT NULL,
                "pk" NOT NULL,
                "mask" INTEGER NOT NULL DEFAULT 0,
                "stamp" INTEGER NOT NULL
            );

            -- Recent changes by origin and sequence number, so that export and status read what
            -- peers lack without reading every entry. Written by the fold and by imports, never
            -- on an application's write; a change leaves once every live peer acknowledged it.
            -- "changes_from": this table holds every change of that site after that seq.
            CREATE TABLE "_sqsync_changes" (
                "site" INTEGER NOT NULL,
                "seq" INTEGER NOT NULL,
                "tid" INTEGER NOT NULL,
                "pk" NOT NULL,
                PRIMARY KEY ("site", "seq", "tid", "pk")
            ) WITHOUT ROWID;
            ALTER TABLE "_sqsync_sites" ADD COLUMN "changes_from" INTEGER NOT NULL DEFAULT 0;
            -- 1 once the replica's triggers write the log (Replica.adoptCaptureLog).
            ALTER TABLE "_sqsync_replica" ADD COLUMN "capture_log" INTEGER NOT NULL DEFAULT 0;

            -- When this replica last learned of each other replica's changes (LearningEvent): its
            -- knowledge of "site" went from "previous" to "reached" by an import made while its
            -- own seq was "own_seq". Exports carry it, so a peer can tell which of its values
            -- this replica overwrote without having seen them.
            CREATE TABLE "_sqsync_learned" (
                "site" INTEGER PRIMARY KEY,
                "previous" INTEGER NOT NULL,
                "reached" INTEGER NOT NULL,
                "own_seq" INTEGER NOT NULL
            );
            -- (The tables Bundle and Transport keep from this version on are created by
            -- those modules: Bundle/Store/BundleTables.swift, Transport/MailboxTables.swift.)

            -- Deletions waiting for purge, for status and purge without reading every entry.
            CREATE INDEX "_sqsync_tombstones" ON "_sqsync_rows" ("site", "seq") WHERE "cl" % 2 = 0;
            """
        ),
        (
            3,
            """
            -- A column a migration dropped keeps its id, marked, so peers' changes to it are
            -- ignored rather than held (Replica+Refresh).
            ALTER TABLE "_sqsync_columns" ADD COLUMN "dropped" INTEGER NOT NULL DEFAULT 0;

            -- The checksum of a live row's values when sqsync last captured or applied them
            -- (RowChecksum); NULL when unknown.
            ALTER TABLE "_sqsync_rows" ADD COLUMN "sum" INTEGER;

            -- Each peer's schema version (PRAGMA user_version) as its last bundle said.
            ALTER TABLE "_sqsync_sites" ADD COLUMN "schema_version" INTEGER;

            -- Every tracked value as captured when `refresh --before-migration` ran, until the
            -- `refresh` that ends the migration compares the tables with it.
            CREATE TABLE "_sqsync_snapshot" (
                "tid" INTEGER NOT NULL,
                "cid" INTEGER NOT NULL,
                "pk" NOT NULL,
                "value",
                PRIMARY KEY ("tid", "cid", "pk")
            ) WITHOUT ROWID;
            """
        ),
        (
            4,
            """
            -- The key each replica signs with (an OpenSSH public key line), pinned by the first
            -- validly signed bundle, statement or acknowledgement file seen from it, and moved
            -- only by a key move signed with the pinned key (docs/KEYS.md).
            ALTER TABLE "_sqsync_sites" ADD COLUMN "signing_key" TEXT;
            -- (The tables Bundle and Transport keep from this version on are created by
            -- those modules: Bundle/Store/BundleTables.swift, Transport/MailboxTables.swift.)
            """
        ),
        (
            5,
            """
            -- Each column's merge policy (MergePolicy): 'lww', 'counter', 'max' or 'min'.
            ALTER TABLE "_sqsync_columns" ADD COLUMN "policy" TEXT NOT NULL DEFAULT 'lww';

            -- A counter's delta (new − old) in a log row of operation -1 (TriggerSQL), whose
            -- "mask" is then the column id.
            ALTER TABLE "_sqsync_log" ADD COLUMN "delta";

            -- Counter columns: each replica's contribution to a cell in the row's current life.
            -- "total" is the sum of that replica's deltas after its "folded" mark (what it had
            -- folded into the row's base when it wrote them); "seq" and "hlc" are its latest
            -- delta's. The column's value is its base plus every entry's total, so the base is
            -- never stored: it is the value minus the entries. Entries go with the row's life,
            -- and `purge` folds (drops) those their replica has folded (docs/MERGE_RULES.md).
            CREATE TABLE "_sqsync_counters" (
                "tid" INTEGER NOT NULL,
                "pk" NOT NULL,
                "cid" INTEGER NOT NULL,
                "site" INTEGER NOT NULL,
                "total" NOT NULL,
                "folded" INTEGER NOT NULL,
                "hlc" INTEGER NOT NULL,
                "seq" INTEGER NOT NULL,
                PRIMARY KEY ("tid", "pk", "cid", "site")
            ) WITHOUT ROWID;

            -- Up to which of its own sequence numbers each replica folded its counter entries,
            -- and its own sequence number when it said so, as its signed acknowledgement
            -- statement says (this replica's own: set by purge). Another replica's entries are
            -- folded here only once this replica holds all that replica's changes up to
            -- "counters_folded_at", so both fold the same entries.
            ALTER TABLE "_sqsync_sites" ADD COLUMN "counters_folded" INTEGER NOT NULL DEFAULT 0;
            ALTER TABLE "_sqsync_sites" ADD COLUMN "counters_folded_at" INTEGER NOT NULL DEFAULT 0;
            """
        ),
        (
            6,
            """
            -- The version of the trigger SQL installed (TriggerSQL.version): opening a replica
            -- whose triggers an older sqsync wrote rewrites them (Replica.upgradeTriggers).
            ALTER TABLE "_sqsync_replica" ADD COLUMN "trigger_version" INTEGER NOT NULL DEFAULT 0;
            """
        ),
        (
            7,
            """
            -- (The tables Bundle and Transport keep from this version on are created by
            -- those modules: Bundle/Store/BundleTables.swift, Transport/MailboxTables.swift.)
            """
        ),
        (
            8,
            """
            -- The capture log without NOT NULL constraints: a constraint that can fail makes
            -- SQLite open a statement journal for every update and delete of a tracked row, a
            -- copy of each page the statement touches. Only the triggers and sqsync write the
            -- log, and neither writes NULL where the fold needs a value. "stamp" is the wall
            -- clock as the triggers read it, julianday('now') (REAL), or in ms (INTEGER) from
            -- other writers; the fold turns both into ms (FoldSQL.readLog).
            -- legacy_alter_table keeps the rename from rewriting (or checking) the triggers,
            -- which name "_sqsync_log" and so write to the new table.
            PRAGMA legacy_alter_table = ON;
            CREATE TABLE "_sqsync_log_8" (
                "id" INTEGER PRIMARY KEY,
                "tid" INTEGER,
                "op" INTEGER,
                "pk",
                "mask" INTEGER DEFAULT 0,
                "stamp",
                "delta"
            );
            INSERT INTO "_sqsync_log_8" ("id", "tid", "op", "pk", "mask", "stamp", "delta")
                SELECT "id", "tid", "op", "pk", "mask", "stamp", "delta" FROM "_sqsync_log";
            DROP TABLE "_sqsync_log";
            ALTER TABLE "_sqsync_log_8" RENAME TO "_sqsync_log";
            PRAGMA legacy_alter_table = OFF;
            """
        ),
        (
            9,
            """
            -- A row's column clocks move into its entry, packed (CellClocks): one
            -- "_sqsync_cells" entry per column repeated the row's key, most of its bytes.
            -- NULL: every column carries the row's own clock. Clocks of rows without an
            -- entry named nothing a peer could be sent, and go.
            ALTER TABLE "_sqsync_rows" ADD COLUMN "cells" BLOB;
            UPDATE "_sqsync_rows" SET "cells" = (
                SELECT sqsync_pack_cells(c."cid", c."hlc", c."site", c."seq", "_sqsync_rows"."hlc", "_sqsync_rows"."site")
                FROM "_sqsync_cells" c
                WHERE c."tid" = "_sqsync_rows"."tid" AND c."pk" = "_sqsync_rows"."pk")
            WHERE "cl" % 2 = 1;
            DROP TABLE "_sqsync_cells";
            """
        ),
        (
            10,
            """
            -- Smaller entries. The row checksum keeps 32 bits (RowChecksum: the 64-bit value's
            -- halves XORed, as a signed integer), 4 bytes instead of 8; SQL has no XOR, so
            -- a ^ b is (a & ~b) | (~a & b). Column clocks are stored relative to their row's
            -- clock and site (CellClocks format 2).
            UPDATE "_sqsync_rows" SET "sum" = (
                SELECT "u" - (("u" & 0x80000000) << 1) FROM (
                    SELECT (("sum" & ~("sum" >> 32)) | (~"sum" & ("sum" >> 32))) & 0xFFFFFFFF AS "u"))
            WHERE "sum" IS NOT NULL;
            UPDATE "_sqsync_rows" SET "cells" = sqsync_cells_repack("cells", "hlc", "site")
            WHERE "cells" IS NOT NULL;
            """
        ),
        (
            11,
            """
            -- Keys in the metadata take their compact form (MetadataKey): UUIDs in 16 bytes,
            -- BLOBs behind a 0x00 byte. The capture log keeps the stored key.
            \(compactKeys(of: "_sqsync_rows", columns: ["tid", "pk", "cl", "hlc", "site", "seq", "sum", "cells"]))
            \(compactKeys(of: "_sqsync_changes", columns: ["site", "seq", "tid", "pk"]))
            \(compactKeys(of: "_sqsync_counters", columns: ["tid", "pk", "cid", "site", "total", "folded", "hlc", "seq"]))
            \(compactKeys(of: "_sqsync_snapshot", columns: ["tid", "cid", "pk", "value"]))
            """
        ),
        (
            12,
            """
            -- Deletions waiting for purge, in key order: an import writes its tombstones in its
            -- bundle's key order, so each goes next to the one before, where in (site, seq)
            -- order each went to a place of its own (a peer deleted in any order). Status and
            -- purge read every tombstone either way, and their counts and tests need only the
            -- columns the index holds.
            DROP INDEX IF EXISTS "_sqsync_tombstones";
            CREATE INDEX "_sqsync_tombstones" ON "_sqsync_rows" ("tid", "pk", "site", "seq") WHERE "cl" % 2 = 0;
            """
        ),
        (
            13,
            """
            -- (The tables Bundle and Transport keep from this version on are created by
            -- those modules: Bundle/Store/BundleTables.swift, Transport/MailboxTables.swift.)

            -- What this replica held of a peer when it retired it: that peer's changes after
            -- it are refused, whoever relays them.
            ALTER TABLE "_sqsync_sites" ADD COLUMN "retired_seq" INTEGER;
            UPDATE "_sqsync_sites" SET "retired_seq" = "known_seq" WHERE "retired" = 1;
            """
        ),
        (
            14,
            """
            -- The most any merged change set's origin held of each site: once this replica holds
            -- that much of every site (and purged nothing), a change it knows of but has no trace
            -- of was made by a copied database. Unknown for what was merged before: 2^62 keeps
            -- that check off for sites known at the upgrade.
            ALTER TABLE "_sqsync_sites" ADD COLUMN "needed_seq" INTEGER NOT NULL DEFAULT 0;
            UPDATE "_sqsync_sites" SET "needed_seq" = 4611686018427387904
            WHERE "site" != (SELECT "site" FROM "_sqsync_replica") AND "known_seq" > 0;
            """
        ),
        (
            15,
            """
            -- Admin statements (labels, scopes, grants: docs/SCOPES.md), each verified against an
            -- admin key before it is kept; "act" is what it says, "signed" its bytes as signed.
            CREATE TABLE "_sqsync_admin" (
                "id" BLOB PRIMARY KEY,
                "issued" INTEGER NOT NULL,
                "act" TEXT NOT NULL,
                "signed" BLOB NOT NULL
            ) WITHOUT ROWID;

            -- This replica's own changes after "after_seq" were made under the admin statements
            -- "statements" (their ids, sorted and joined): peers judge them by those.
            CREATE TABLE "_sqsync_admin_epochs" (
                "after_seq" INTEGER PRIMARY KEY,
                "statements" BLOB NOT NULL
            );

            -- What the statements make of each table here: its label expression, and what this
            -- replica's own grants allow on it (JSON; NULL: everything).
            ALTER TABLE "_sqsync_tables" ADD COLUMN "label" TEXT;
            ALTER TABLE "_sqsync_tables" ADD COLUMN "grants" TEXT;
            -- (The tables Bundle and Transport keep from this version on are created by
            -- those modules: Bundle/Store/BundleTables.swift, Transport/MailboxTables.swift.)

            -- The admin statements each origin named for its latest changes merged here: its later
            -- changes must name at least those (a key cannot shed its grants).
            CREATE TABLE "_sqsync_admin_claims" (
                "site" INTEGER PRIMARY KEY,
                "last" INTEGER NOT NULL,
                "statements" BLOB NOT NULL
            );

            -- Rows that left this replica's scope: their entries stay (a stale copy cannot come
            -- back), their rows are gone, and no one deleted them.
            CREATE TABLE "_sqsync_ghosts" (
                "tid" INTEGER NOT NULL,
                "pk" NOT NULL,
                PRIMARY KEY ("tid", "pk")
            ) WITHOUT ROWID;

            -- Rows in their second life or later: a reader whose scope a row left is told so
            -- without reading every row.
            CREATE INDEX "_sqsync_relives" ON "_sqsync_rows" ("tid", "site", "seq") WHERE "cl" >= 3;
            """
        ),
        (
            16,
            """
            -- This replica's latest checkpoint (docs/BUNDLE_FORMAT.md, "What a relay keeps"): a
            -- segment of its own with every current change from its first, after which relays
            -- drop its older segments. "checkpoint_seq": the last change it covered (0: none yet);
            -- "checkpoint_records": how many rows it carried. No segment of its own spans a
            -- checkpoint: a receiver behind one gets a checkpoint too.
            ALTER TABLE "_sqsync_replica" ADD COLUMN "checkpoint_seq" INTEGER NOT NULL DEFAULT 0;
            ALTER TABLE "_sqsync_replica" ADD COLUMN "checkpoint_records" INTEGER NOT NULL DEFAULT 0;

            -- A purge keeps a deletion's entry (its row's causal length and its delete's stamp),
            -- marked purged by "cells" = x'' (docs/MERGE_RULES.md, "Purge"); only deletions still
            -- waiting for a peer stay in the index status and purge read.
            DROP INDEX IF EXISTS "_sqsync_tombstones";
            CREATE INDEX "_sqsync_tombstones" ON "_sqsync_rows" ("tid", "pk", "site", "seq")
                WHERE "cl" % 2 = 0 AND "cells" IS NULL;
            """
        ),
        (
            17,
            """
            -- The file this replica lives in ("device:inode:machine:path"), recorded when it is
            -- first opened: a file copied with cp has the same identity in another file, found
            -- when it is next opened. "copied_at": this replica's own sequence number then, up
            -- to which the copy and the original share a history (NULL: not a copy)
            -- (CopiedFiles.swift). "first_heard": when this replica first took a bundle a
            -- site sent (NULL: never, or before 0.4), so that one its key made later shows an
            -- older one silent (Peer.succeededBy).
            ALTER TABLE "_sqsync_replica" ADD COLUMN "file_id" TEXT;
            ALTER TABLE "_sqsync_replica" ADD COLUMN "copied_at" INTEGER;
            ALTER TABLE "_sqsync_sites" ADD COLUMN "first_heard" TEXT;
            """
        ),
        (
            18,
            """
            -- The first change of each origin merged here that named each admin statement:
            -- a replica holding that origin's changes through it holds the statement
            -- (AdminEvidence.swift).
            CREATE TABLE "_sqsync_admin_named" (
                "statement" BLOB NOT NULL,
                "site" INTEGER NOT NULL,
                "first_seq" INTEGER NOT NULL,
                PRIMARY KEY ("statement", "site")
            ) WITHOUT ROWID;

            -- What a replica provably held: its own changes after "own_seq" were made knowing
            -- the statement, because it signed knowledge that covers a change naming it.
            CREATE TABLE "_sqsync_admin_known" (
                "site" INTEGER NOT NULL,
                "statement" BLOB NOT NULL,
                "own_seq" INTEGER NOT NULL,
                PRIMARY KEY ("site", "statement")
            ) WITHOUT ROWID;

            -- The latest knowledge each replica signed, and its own sequence number then: read
            -- again when a statement is first seen named, which may come after the evidence.
            CREATE TABLE "_sqsync_admin_evidence" (
                "site" INTEGER PRIMARY KEY,
                "own_seq" INTEGER NOT NULL,
                "knowledge" TEXT NOT NULL
            );

            -- A ghost's key as the triggers write it, so that a grant trigger can refuse an
            -- insert over it (they cannot call sqsync's functions).
            ALTER TABLE "_sqsync_ghosts" ADD COLUMN "stored_pk";
            UPDATE "_sqsync_ghosts" SET "stored_pk" = sqsync_stored_key("pk");
            CREATE INDEX "_sqsync_ghosts_stored" ON "_sqsync_ghosts" ("tid", "stored_pk");
            """
        ),
        (
            19,
            """
            -- Own changes left out of bundles because a value in them is larger than a bundle
            -- may carry (WithheldValues.swift): the row's whole life ("cid" 0) or one column's
            -- value, with the sequence number of the change left out. Each export logs them
            -- again, as new changes, once they fit.
            CREATE TABLE "_sqsync_withheld" (
                "tid" INTEGER NOT NULL,
                "pk" NOT NULL,
                "cid" INTEGER NOT NULL,
                "seq" INTEGER NOT NULL,
                PRIMARY KEY ("tid", "pk", "cid")
            ) WITHOUT ROWID;
            """
        ),
        (
            20,
            """
            -- The labels a row of a labelled table has had, in any life, at any replica heard
            -- from (Reach.swift): a JSON list. Its deletions and departures go only to readers
            -- whose scope meets it; an entry without one goes to every reader.
            CREATE TABLE "_sqsync_reach" (
                "tid" INTEGER NOT NULL,
                "pk" NOT NULL,
                "labels" TEXT NOT NULL,
                PRIMARY KEY ("tid", "pk")
            ) WITHOUT ROWID;
            """
        ),
        (
            21,
            """
            -- A number every change to sqsync's own state tables raises, through triggers each
            -- reader of it checks are in place (Generation.swift); and the number the last
            -- pass over the acknowledgements ran at, so that a fold with nothing new skips it.
            CREATE TABLE "_sqsync_generation" (
                "n" INTEGER NOT NULL,
                "horizon_at" INTEGER NOT NULL
            );
            INSERT INTO "_sqsync_generation" ("n", "horizon_at") VALUES (1, 0);
            """
        ),
        (
            22,
            """
            -- The value that won a conflict, beside the one that lost; and whether the loser's
            -- own value is known here at all (a replica's insert carries every column, a
            -- column it took from another replica since under the insert's stamp).
            ALTER TABLE "_sqsync_conflicts" ADD COLUMN "won_value";
            ALTER TABLE "_sqsync_conflicts" ADD COLUMN "lost_value_known" INTEGER NOT NULL DEFAULT 1;
            -- Every sync asks whether changes were signed as this replica (Conflicts.swift).
            CREATE INDEX "_sqsync_conflicts_signed_as" ON "_sqsync_conflicts" ("lost_site", "lost_hlc")
                WHERE "kind" = 'signed as this replica';
            """
        ),
        (
            23,
            """
            -- Each origin's highest-numbered change this replica merged, and its clock: one
            -- replica's later number always has the later clock, so a change that disagrees
            -- with it was signed by a second file or key under that identity (OriginNumbering.swift).
            ALTER TABLE "_sqsync_sites" ADD COLUMN "top_seq" INTEGER;
            ALTER TABLE "_sqsync_sites" ADD COLUMN "top_hlc" INTEGER;
            -- Every sync repeats what it found numbered twice (Conflicts.swift).
            CREATE INDEX "_sqsync_conflicts_numbered_twice" ON "_sqsync_conflicts" ("lost_site")
                WHERE "kind" = 'numbered twice';
            """
        ),
        (
            24,
            """
            -- Each segment admitted reads what its origin's own changes named, up to its last
            -- number (AdminEvidenceSQL.held).
            CREATE INDEX "_sqsync_admin_named_by_site" ON "_sqsync_admin_named" ("site", "first_seq");
            """
        ),
    ]


    /// Gives a table's "pk" column its metadata form. BLOB keys go out and come back, so no
    /// key is ever written over one not yet converted; UUIDs are then converted in place
    /// (a BLOB is all they could have met).
    private static func compactKeys(of table: String, columns: [String]) -> String {
        let quoted = quoteIdentifier(table), aside = quoteIdentifier("\(table)_blob_keys")
        let list = columns.map(quoteIdentifier).joined(separator: ", ")
        let converted = columns.map { $0 == "pk" ? #"sqsync_key("pk")"# : quoteIdentifier($0) }.joined(separator: ", ")
        return """
            CREATE TEMP TABLE \(aside) AS SELECT \(list) FROM \(quoted) WHERE typeof("pk") = 'blob';
            DELETE FROM \(quoted) WHERE typeof("pk") = 'blob';
            UPDATE \(quoted) SET "pk" = sqsync_key("pk") WHERE typeof("pk") = 'text' AND sqsync_key("pk") IS NOT "pk";
            INSERT INTO \(quoted) (\(list)) SELECT \(converted) FROM temp.\(aside);
            DROP TABLE temp.\(aside);
            """
    }

    /// Migration 9 packs the column clocks: unnumbered ones (written by the triggers of
    /// versions before the capture log) are numbered first, as they always were.
    static let packedCellsVersion = 9

    static let changesBeforeTheChangeTable = """
        UPDATE "_sqsync_sites" SET "changes_from" = max("changes_from",
            CASE WHEN "site" = (SELECT "site" FROM "_sqsync_replica") THEN (SELECT "seq" FROM "_sqsync_replica")
                 ELSE "known_seq" END)
        """

    static let wallClockMilliseconds = milliseconds(ofJulianDay: "julianday('now')")

    /// Unix time in ms of a Julian day.
    static func milliseconds(ofJulianDay day: String) -> String {
        "CAST((\(day) - 2440587.5) * 86400000.0 AS INTEGER)"
    }

    /// The wall clock as a capture log row stores it: the bare Julian day, which costs a
    /// trigger less than converting it (the fold converts, `FoldSQL.readLog`).
    static let logStamp = "julianday('now')"
}
