import ChangeLog

/// The tables Transport keeps in a replica: what it remembers of each mailbox
/// (``MailboxState``). ChangeLog runs the migrations (``ModuleMigrations``); version 1 takes
/// over the tables an older sqsync made through ChangeLog's migrations 1, 2 and 7.
enum MailboxTables {
    /// Makes sure this replica has Transport's tables; cheap after the first call on a replica.
    static func ready(_ replica: Replica) throws { try replica.migrate(migrations) }

    static let migrations = ModuleMigrations(
        module: "Transport", offset: 2000,
        steps: [
            .init(
                1,
                """
                -- Bundle files already imported from a mailbox, with the knowledge they carried, so
                -- a sync neither fetches them again nor keeps them once every reader holds them.
                CREATE TABLE IF NOT EXISTS "_sqsync_seen_bundles" (
                    "name" TEXT PRIMARY KEY,
                    "knowledge" TEXT NOT NULL,
                    "seen_at" TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
                );

                -- Bundles this replica uploaded to a mailbox: only those are kept in its outbox.
                CREATE TABLE IF NOT EXISTS "_sqsync_mailbox_uploads" (
                    "mailbox" TEXT NOT NULL,
                    "file" TEXT NOT NULL,
                    PRIMARY KEY ("mailbox", "file")
                ) WITHOUT ROWID;

                -- The newest acknowledgement file read (or written) per mailbox and replica, with its
                -- verified text: a quiet sync reads a listing, not every replica's file again.
                CREATE TABLE IF NOT EXISTS "_sqsync_mailbox_acks" (
                    "mailbox" TEXT NOT NULL,
                    "replica" TEXT NOT NULL,
                    "file" TEXT NOT NULL,
                    "text" TEXT NOT NULL,
                    PRIMARY KEY ("mailbox", "replica")
                ) WITHOUT ROWID;

                -- Per mailbox, a digest of what the last sync through it that found nothing to do
                -- saw (every folder's stamp, this replica's sync state, the keys): a sync that sees
                -- the same has nothing to do either, and stops there (Mailbox.sync). "saved_at" is
                -- the wall clock (ms) then: a clock that went back since could stamp a change alike.
                CREATE TABLE IF NOT EXISTS "_sqsync_quiet_syncs" (
                    "mailbox" TEXT PRIMARY KEY,
                    "inputs" TEXT NOT NULL,
                    "saved_at" INTEGER NOT NULL
                );
                """),
            .init(
                2,
                """
                -- Files a mailbox showed that did not decrypt, verify or parse, by path in the
                -- mailbox, size and SHA-256 of their first 4 KiB, and "context", a digest of the
                -- trust and key they were judged with: not read again while the mailbox shows
                -- that name with that size and the context is the same (Mailbox.sync).
                CREATE TABLE IF NOT EXISTS "_sqsync_planted_files" (
                    "mailbox" TEXT NOT NULL,
                    "path" TEXT NOT NULL,
                    "size" INTEGER NOT NULL,
                    "head" BLOB NOT NULL,
                    "context" TEXT NOT NULL,
                    PRIMARY KEY ("mailbox", "path")
                ) WITHOUT ROWID;
                """),
            .init(
                3,
                """
                -- Why each planted file was refused (the message a sync printed), and whether
                -- for a signer not trusted here: `status` lists those, with the line to add.
                ALTER TABLE "_sqsync_planted_files" ADD COLUMN "reason" TEXT NOT NULL DEFAULT '';
                ALTER TABLE "_sqsync_planted_files" ADD COLUMN "untrusted_signer" INTEGER NOT NULL DEFAULT 0;
                """),
            .init(
                4,
                """
                -- Readers' keys of a mailbox this replica opened (docs/BUNDLE_FORMAT.md, "Readers'
                -- keys"), by file name, with their secret, so each key file is read once. "readers":
                -- SHA-256 of the readers' sorted keys, which a writer compares with its recipients.
                -- "file_hash": SHA-256 of the file as published or opened: a writer uses the key only
                -- while the mailbox still holds that very file. "made_here": this replica made it, so
                -- this replica removes its file once no bundle needs it; "unneeded": how many of this
                -- replica's syncs in a row found no bundle naming it (the file goes at the second).
                CREATE TABLE IF NOT EXISTS "_sqsync_readers_keys" (
                    "mailbox" TEXT NOT NULL,
                    "name" TEXT NOT NULL,
                    "readers" TEXT NOT NULL,
                    "secret" BLOB NOT NULL,
                    "file_hash" TEXT NOT NULL,
                    "made_here" INTEGER NOT NULL,
                    "unneeded" INTEGER NOT NULL DEFAULT 0,
                    PRIMARY KEY ("mailbox", "name")
                ) WITHOUT ROWID;

                -- The readers' key each bundle read from (or left in) a mailbox is encrypted to, ''
                -- for none: a key's maker removes it only once no bundle listed there names it.
                CREATE TABLE IF NOT EXISTS "_sqsync_bundle_readers_keys" (
                    "mailbox" TEXT NOT NULL,
                    "bundle" TEXT NOT NULL,
                    "key" TEXT NOT NULL,
                    PRIMARY KEY ("mailbox", "bundle")
                ) WITHOUT ROWID;
                """),
            .init(
                5,
                """
                -- What else the last quiet sync saw: "mark", the stamp of the mailbox's own
                -- folders, which every writer renews after each change (Transport.markChanged);
                -- "replica_inputs", a digest of this replica's part of "inputs"; and
                -- "full_checked_at", the wall clock (ms) when it last compared every replica's
                -- folder. While the mark and this replica are the same, and that comparison is
                -- recent, a sync stops after one stamp.
                ALTER TABLE "_sqsync_quiet_syncs" ADD COLUMN "mark" TEXT;
                ALTER TABLE "_sqsync_quiet_syncs" ADD COLUMN "replica_inputs" TEXT;
                ALTER TABLE "_sqsync_quiet_syncs" ADD COLUMN "full_checked_at" INTEGER NOT NULL DEFAULT 0;

                -- Mailboxes where a folder changed and the mark did not (a writer of an older
                -- sqsync, or a file put there by hand), with the wall clock (ms) when last seen:
                -- every sync compares every folder there for a while (Mailbox.unmarkedWritersRemembered).
                CREATE TABLE IF NOT EXISTS "_sqsync_unmarked_mailboxes" (
                    "mailbox" TEXT PRIMARY KEY,
                    "seen_at" INTEGER NOT NULL
                );
                """),
            .init(
                6,
                """
                -- Whether a refused file was damaged (truncated, or not a bundle at all) rather
                -- than refused for its signer or its content: this replica's acknowledgement
                -- names damaged bundles, so that their writer leaves them again.
                ALTER TABLE "_sqsync_planted_files" ADD COLUMN "damaged" INTEGER NOT NULL DEFAULT 0;
                """),
            .init(
                7,
                """
                -- Per mailbox and scope group, the acknowledgement statements of replicas that do
                -- not read there that this replica's last bundle carried (their "replica:counter"
                -- list): a writer leaves a bundle for them only when they change.
                CREATE TABLE IF NOT EXISTS "_sqsync_relayed_words" (
                    "mailbox" TEXT NOT NULL,
                    "scope" TEXT NOT NULL,
                    "words" TEXT NOT NULL,
                    PRIMARY KEY ("mailbox", "scope")
                );
                """),
        ])

    /// What a copy made by `clone` must not inherit: the original's mailbox history.
    static let perFileState = [
        "_sqsync_seen_bundles", "_sqsync_mailbox_acks", "_sqsync_mailbox_uploads", "_sqsync_quiet_syncs", "_sqsync_planted_files",
        "_sqsync_readers_keys", "_sqsync_bundle_readers_keys", "_sqsync_unmarked_mailboxes", "_sqsync_relayed_words",
    ]
}
