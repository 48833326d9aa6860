import Bundle
import ChangeLog
import Crypto
import FoundationEssentials
import Glibc
import SQLiteDatabase

/// What a replica remembers of one mailbox, in its own database (tables of metadata
/// migrations 1, 2 and 7): the bundles it imported from there, the ones it uploaded, the
/// acknowledgement files it verified, and the last sync there that found nothing to do.
struct MailboxState {
    let replica: Replica
    /// The mailbox as the user named it (a folder, an `ssh://` address).
    let mailbox: String
    private var database: Database { replica.database }

    init(_ replica: Replica, mailbox: String) throws {
        try MailboxTables.ready(replica)
        self.replica = replica
        self.mailbox = mailbox
    }

    // MARK: Bundles imported from any mailbox

    /// What this replica noted of each mailbox bundle it read, in one pass over the table.
    struct BundleMarks {
        /// Imported, with the knowledge each carried.
        var seen: [String: Knowledge] = [:]
        /// Encrypted to other keys only (``markUnaddressed(bundle:)``).
        var unaddressed: Set<String> = []
        /// Waiting for a readers' key, with the key file's size each saw (``markWaitingForKey(bundle:keyFileSize:)``).
        var waiting: [String: Int] = [:]
    }

    func bundleMarks() throws -> BundleMarks {
        var marks = BundleMarks()
        for row in try database.rows(MailboxSQL.seenBundles) {
            let name = try row.string("name"), knowledge = try row.string("knowledge")
            if knowledge == Self.unaddressed {
                marks.unaddressed.insert(name)
            } else if knowledge.hasPrefix(Self.waitingForKey) {
                marks.waiting[name] = Int(knowledge.dropFirst()) ?? -1
            } else {
                marks.seen[name] = (try? Knowledge(parsing: knowledge)) ?? Knowledge()
            }
        }
        return marks
    }

    /// Mailbox bundle names already imported, with the knowledge each carried.
    func seenBundles() throws -> [String: Knowledge] { try bundleMarks().seen }

    func markSeen(bundle name: String, knowledge: Knowledge) throws {
        try database.run(MailboxSQL.markSeen, .text(name), .text(knowledge.description))
    }

    /// Bundles encrypted to other keys only. Not read again: a bundle re-encrypted for this
    /// replica too gets another name (its recipients are part of it). Never taken as held.
    private static let unaddressed = "-"

    func markUnaddressed(bundle name: String) throws {
        try database.run(MailboxSQL.markSeen, .text(name), .text(Self.unaddressed))
    }

    /// Bundles encrypted to a readers' key this replica could not open when they were read
    /// (none under that name, a damaged file, one not for this replica's key), with the key
    /// file's size then (-1: none): read again once the mailbox shows that name with another
    /// size (``MailboxSync/bundlesWhoseKeyChanged(_:)``), never marked as not addressed for
    /// good, since whoever can write to the folder can replace a key file.
    private static let waitingForKey = "?"

    /// How many bundles wait for a readers' key: counted in SQL, since every sync reports it
    /// and the other marks carry a knowledge each.
    func bundlesWaitingForKey() throws -> Int {
        Int(try database.int64(MailboxSQL.countWaitingForKey, .text(Self.waitingForKey + "%")))
    }

    /// The readers' key files in the mailbox that bundles wait on and this replica could not
    /// open (damaged, or not for its key): what its acknowledgement reports, so that their
    /// writers move to a key it can open.
    func keysNotOpened() throws -> [String] {
        try database.rows(MailboxSQL.keysNotOpened, .text(mailbox), .text(Self.waitingForKey + "-1"), .text(Self.waitingForKey + "%"))
            .map { try $0.string("key") }
    }

    func markWaitingForKey(bundle name: String, keyFileSize: Int?) throws {
        try database.run(MailboxSQL.markSeen, .text(name), .text(Self.waitingForKey + String(keyFileSize ?? -1)))
    }

    /// Forgets names no longer in any mailbox listing, so the list stays small.
    func forgetSeen(keeping names: Set<String>) throws {
        for row in try database.rows(MailboxSQL.seenBundles) where !names.contains(try row.string("name")) {
            try database.run(MailboxSQL.forgetSeen, .text(try row.string("name")))
        }
    }

    // MARK: Readers' keys

    /// A readers' key this replica opened (or made) in this mailbox.
    struct KnownReadersKey {
        var key: ReadersKey
        /// ``ReadersKey/fullReadersDigest(_:)`` of its readers.
        var readersDigest: String
        /// SHA-256 of its file as published or opened.
        var fileHash: String
        var madeHere: Bool
        /// This replica's syncs in a row that found no bundle naming it.
        var unneeded: Int64
    }

    func readersKeys() throws -> [String: KnownReadersKey] {
        var known: [String: KnownReadersKey] = [:]
        for row in try database.rows(MailboxSQL.readersKeys, .text(mailbox)) {
            let name = try row.string("name")
            guard let key = try? ReadersKey(name: name, secret: try row.blob("secret")) else { continue }
            known[name] = KnownReadersKey(
                key: key, readersDigest: try row.string("readers"), fileHash: try row.string("file_hash"),
                madeHere: try row.int64("made_here") != 0, unneeded: try row.int64("unneeded"))
        }
        return known
    }

    /// `key` as opened (or made): its readers are known.
    func rememberReadersKey(_ key: ReadersKey, fileHash: String, madeHere: Bool) throws {
        try database.run(
            MailboxSQL.rememberReadersKey, .text(mailbox), .text(key.name), .text(key.readersFullDigest),
            .blob(key.secretBytes), .text(fileHash), .integer(madeHere ? 1 : 0))
    }

    /// Counts a sync that found no bundle naming `name` (`unneeded`), or starts again.
    func markReadersKey(_ name: String, unneeded: Bool) throws {
        try database.run(MailboxSQL.markReadersKeyUnneeded, .integer(unneeded ? 1 : 0), .text(mailbox), .text(name))
    }

    func forgetReadersKey(_ name: String) throws {
        try database.run(MailboxSQL.forgetReadersKey, .text(mailbox), .text(name))
    }

    /// The readers' key each bundle noted is encrypted to ("" for none).
    func bundleReadersKeys() throws -> [String: String] {
        var keys: [String: String] = [:]
        for row in try database.rows(MailboxSQL.bundleReadersKeys, .text(mailbox)) {
            keys[try row.string("bundle")] = try row.string("key")
        }
        return keys
    }

    func noteBundleReadersKey(bundle: String, key: String?) throws {
        try database.run(MailboxSQL.noteBundleReadersKey, .text(mailbox), .text(bundle), .text(key ?? ""))
    }

    /// Forgets bundles no longer listed.
    func forgetBundleReadersKeys(keeping bundles: Set<String>) throws {
        for bundle in try bundleReadersKeys().keys where !bundles.contains(bundle) {
            try database.run(MailboxSQL.forgetBundleReadersKey, .text(mailbox), .text(bundle))
        }
    }

    // MARK: Acknowledgement files

    /// The acknowledgement files this mailbox last showed, by replica: file name and text.
    func cachedAcknowledgements() throws -> [String: (file: String, text: String)] {
        var cached: [String: (file: String, text: String)] = [:]
        for row in try database.rows(MailboxSQL.cachedAcknowledgements, .text(mailbox)) {
            cached[try row.string("replica")] = (try row.string("file"), try row.string("text"))
        }
        return cached
    }

    /// Remembers an acknowledgement file that was verified (or written) here.
    func cacheAcknowledgement(replica knowledgeID: String, file: String, text: String) throws {
        try database.run(MailboxSQL.cacheAcknowledgement, .text(mailbox), .text(knowledgeID), .text(file), .text(text))
    }

    // MARK: Uploads

    /// The statements of replicas that do not read this mailbox that the last bundle this
    /// replica left for one scope group carried (``BundleExchange/carriedWords(of:except:)``):
    /// it leaves another only when they change, so chained mailboxes go quiet again.
    func relayedWords(scope: String) throws -> String? {
        try database.row(MailboxSQL.relayedWords, .text(mailbox), .text(scope)).map { try $0.string("words") }
    }

    func recordRelayedWords(_ words: String, scope: String) throws {
        try database.run(MailboxSQL.recordRelayedWords, .text(mailbox), .text(scope), .text(words))
    }

    /// Bundles this replica left in the mailbox's outbox: a file there with a matching name
    /// that it did not upload (planted by whoever can write to the folder) is never kept.
    func uploadedBundles() throws -> Set<String> {
        Set(try database.rows(MailboxSQL.uploads, .text(mailbox)).map { try $0.string("file") })
    }

    /// Whether a sync through this mailbox ever got as far as writing to it: it then holds
    /// this replica's acknowledgement, and a mailbox that shows none has gone (a stick not
    /// mounted, a folder moved aside) rather than never been.
    func syncedHereBefore() throws -> Bool {
        try database.int64(MailboxSQL.syncedHereBefore, .text(mailbox)) == 1
    }

    /// Every bundle name this replica uploaded, to any mailbox.
    func uploadedAnywhere() throws -> Set<String> {
        Set(try database.rows(MailboxSQL.uploadsAnywhere).map { try $0.string("file") })
    }

    /// Records an upload before it is written: a sync killed after writing it still knows the
    /// file is its own.
    func recordUpload(_ file: String) throws {
        try database.run(MailboxSQL.rememberUpload, .text(mailbox), .text(file))
    }

    /// Records the bundles this replica now keeps in the mailbox's outbox, forgetting the rest.
    func rememberUploads(_ files: Set<String>) throws {
        try database.inTransaction {
            try database.run(MailboxSQL.forgetUploads, .text(mailbox))
            for file in files { try database.run(MailboxSQL.rememberUpload, .text(mailbox), .text(file)) }
        }
    }

    // MARK: Quiet syncs

    /// Everything in this replica that a mailbox sync's outcome depends on, as text: what it
    /// knows of each site and the keys pinned to them, its own clock, the bundles it holds
    /// back, key moves, acknowledgement statements and the schema. Two syncs through the
    /// same, unchanged mailbox that see the same text do the same thing. The generation
    /// those tables raise stands for them (reading them cost a line per replica).
    func syncState() throws -> String {
        "\(try replica.generation(watching: Self.syncStateTables)) \(try database.int64(MailboxSQL.schemaVersion))"
    }

    /// The tables whose rows ``syncState()`` stands for.
    static let syncStateTables = [
        "_sqsync_sites", "_sqsync_replica", "_sqsync_acks", "_sqsync_held", "_sqsync_statements", "_sqsync_keys", "_sqsync_segments",
    ]

    /// What the last sync through the mailbox that found nothing to do saw.
    struct QuietSync {
        /// A digest of every replica's folder stamps and this replica's part.
        var inputs: String
        /// The wall clock (ms since 1970) when it was saved.
        var savedAt: Int64
        /// The stamp of the mailbox's own folders (``Transport/markChanged(_:)``).
        var mark: String?
        /// A digest of this replica's part of `inputs`.
        var replicaInputs: String?
        /// The wall clock (ms) when every replica's folder was last compared.
        var fullCheckedAt: Int64
    }

    func lastQuietSync() throws -> QuietSync? {
        try database.row(MailboxSQL.lastQuietSync, .text(mailbox)).map {
            QuietSync(
                inputs: try $0.string("inputs"), savedAt: try $0.int64("saved_at"), mark: try $0.optionalString("mark"),
                replicaInputs: try $0.optionalString("replica_inputs"), fullCheckedAt: try $0.int64("full_checked_at"))
        }
    }

    /// Records a sync through the mailbox that found nothing to do.
    func rememberQuietSync(_ quiet: QuietSync) throws {
        try database.run(
            MailboxSQL.rememberQuietSync, .text(mailbox), .text(quiet.inputs), .integer(quiet.savedAt),
            quiet.mark.map(SQLValue.text) ?? .null, quiet.replicaInputs.map(SQLValue.text) ?? .null, .integer(quiet.fullCheckedAt))
    }

    /// Forgets the last quiet sync, before a sync that may do something.
    func forgetQuietSync() throws {
        try database.run(MailboxSQL.forgetQuietSync, .text(mailbox))
    }

    /// When a folder of this mailbox last changed without its mark (ms), if ever.
    func unmarkedChangeSeenAt() throws -> Int64? {
        try database.optionalInt64(MailboxSQL.unmarkedSeenAt, .text(mailbox))
    }

    func noteUnmarkedChange(at time: Int64) throws {
        try database.run(MailboxSQL.noteUnmarked, .text(mailbox), .integer(time))
    }

    // MARK: Planted files

    /// Files in this mailbox that did not decrypt, verify or parse, by path, as first read.
    func plantedFiles() throws -> [String: PlantedFile] {
        var planted: [String: PlantedFile] = [:]
        for row in try database.rows(MailboxSQL.plantedFiles, .text(mailbox)) {
            planted[try row.string("path")] = PlantedFile(
                size: Int(try row.int64("size")), head: try row.blob("head"), context: try row.string("context"))
        }
        return planted
    }

    func rememberPlanted(_ path: String, _ file: PlantedFile, reason: String, untrustedSigner: Bool, damaged: Bool = false) throws {
        try database.run(
            MailboxSQL.rememberPlanted, .text(mailbox), .text(path), .integer(Int64(file.size)), .blob(file.head), .text(file.context),
            .text(reason), .integer(untrustedSigner ? 1 : 0), .integer(damaged ? 1 : 0))
    }

    /// Bundles in other writers' outboxes here refused as damaged (a stick pulled while one was
    /// written), by file name: this replica's acknowledgement names them.
    func damagedBundles() throws -> [String] {
        // Only a name its outbox's writer gives a bundle: a junk file planted is no news to tell.
        try database.rows(MailboxSQL.damagedBundles, .text(mailbox), .text(Mailbox.outbox + "/%")).compactMap { row in
            let parts = try row.string("path").split(separator: "/")
            guard parts.count >= 2, let name = parts.last, name.hasPrefix(parts[parts.count - 2] + "_") else { return nil }
            return BundleExchange.isBundleFileName(String(name)) ? String(name) : nil
        }.prefix(MailboxAcknowledgement.maxNamedFiles).map { $0 }
    }

    /// Files refused in any mailbox for a signer not trusted here, unchanged since, with the
    /// message their sync printed.
    static func untrustedSignerFiles(of replica: Replica) throws -> [(mailbox: String, path: String, reason: String)] {
        try MailboxTables.ready(replica)
        return try replica.database.rows(MailboxSQL.untrustedSignerFiles).map {
            (try $0.string("mailbox"), try $0.string("path"), try $0.string("reason"))
        }
    }

    /// Forgets one file refused before and read since (the trust or key changed).
    func forgetPlanted(_ path: String) throws {
        try database.run(MailboxSQL.forgetPlanted, .text(mailbox), .text(path))
    }

    /// Forgets planted files no longer listed, so the list stays small.
    func forgetPlanted(keeping paths: Set<String>) throws {
        for path in try plantedFiles().keys where !paths.contains(path) {
            try database.run(MailboxSQL.forgetPlanted, .text(mailbox), .text(path))
        }
    }
}

/// A mailbox file as far as telling it again takes: its size and the SHA-256 of its first
/// 4 KiB, and the trust and key it was judged with (a planted file is not read again until it
/// changes, or `allowed_signers` or the key does: a bundle refused for a line not added yet
/// is read again once it is).
struct PlantedFile: Equatable {
    var size: Int
    var head: [UInt8]
    var context: String

    static let headBytes = 4096

    init(size: Int, head: [UInt8], context: String) {
        self.size = size
        self.head = head
        self.context = context
    }

    /// What files are judged with: the trusted keys and this replica's key.
    static func context(trust: String, key: SSHPublicKey) -> String {
        sha256Hex(trust + "\n" + key.openSSHLine)
    }

    /// The local copy at `path`.
    init(local path: String, context: String) throws {
        self.context = context
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw TransportError(.io, "\(path): cannot open: \(String(cString: strerror(errno)))") }
        defer { close(descriptor) }
        var first = [UInt8](repeating: 0, count: Self.headBytes)
        var filled = 0
        while filled < first.count {
            let count = first.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress! + filled, $0.count - filled, off_t(filled)) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { throw TransportError(.io, "\(path): cannot read: \(String(cString: strerror(errno)))") }
            if count == 0 { break }
            filled += count
        }
        size = Int(lseek(descriptor, 0, SEEK_END))
        head = Array(SHA256.hash(data: first.prefix(filled)))
    }
}

/// The SQL of mailbox state, in one place.
enum MailboxSQL {
    static let readersKeys = """
        SELECT "name", "readers", "secret", "file_hash", "made_here", "unneeded" FROM "_sqsync_readers_keys" WHERE "mailbox" = ?
        """
    static let rememberReadersKey = """
        INSERT OR REPLACE INTO "_sqsync_readers_keys" ("mailbox", "name", "readers", "secret", "file_hash", "made_here")
        VALUES (?, ?, ?, ?, ?, ?)
        """
    static let markReadersKeyUnneeded = """
        UPDATE "_sqsync_readers_keys" SET "unneeded" = CASE WHEN ? THEN "unneeded" + 1 ELSE 0 END WHERE "mailbox" = ? AND "name" = ?
        """
    static let forgetReadersKey = #"DELETE FROM "_sqsync_readers_keys" WHERE "mailbox" = ? AND "name" = ?"#
    static let bundleReadersKeys = #"SELECT "bundle", "key" FROM "_sqsync_bundle_readers_keys" WHERE "mailbox" = ?"#
    static let noteBundleReadersKey = """
        INSERT OR REPLACE INTO "_sqsync_bundle_readers_keys" ("mailbox", "bundle", "key") VALUES (?, ?, ?)
        """
    static let forgetBundleReadersKey = #"DELETE FROM "_sqsync_bundle_readers_keys" WHERE "mailbox" = ? AND "bundle" = ?"#

    static let plantedFiles = #"SELECT "path", "size", "head", "context" FROM "_sqsync_planted_files" WHERE "mailbox" = ?"#

    static let rememberPlanted = """
        INSERT OR REPLACE INTO "_sqsync_planted_files" ("mailbox", "path", "size", "head", "context", "reason", "untrusted_signer", "damaged")
        VALUES (?, ?, ?, ?, ?, ?, ?, ?)
        """

    static let damagedBundles = """
        SELECT "path" FROM "_sqsync_planted_files" WHERE "mailbox" = ?1 AND "damaged" = 1 AND "path" LIKE ?2
        ORDER BY "path" LIMIT 1024
        """

    static let untrustedSignerFiles = """
        SELECT "mailbox", "path", "reason" FROM "_sqsync_planted_files"
        WHERE "untrusted_signer" = 1 ORDER BY "mailbox", "path"
        """

    static let forgetPlanted = #"DELETE FROM "_sqsync_planted_files" WHERE "mailbox" = ? AND "path" = ?"#

    static let seenBundles = #"SELECT "name", "knowledge" FROM "_sqsync_seen_bundles""#
    static let countWaitingForKey = #"SELECT count(*) FROM "_sqsync_seen_bundles" WHERE "knowledge" LIKE ?"#
    static let keysNotOpened = """
        SELECT DISTINCT k."key" FROM "_sqsync_seen_bundles" s
        JOIN "_sqsync_bundle_readers_keys" k ON k."bundle" = s."name" AND k."mailbox" = ?1
        WHERE s."knowledge" LIKE ?3 AND s."knowledge" != ?2 AND k."key" IS NOT NULL
        ORDER BY k."key" LIMIT \(MailboxAcknowledgement.maxNamedFiles)
        """
    static let markSeen = #"INSERT OR REPLACE INTO "_sqsync_seen_bundles" ("name", "knowledge") VALUES (?, ?)"#
    static let forgetSeen = #"DELETE FROM "_sqsync_seen_bundles" WHERE "name" = ?"#
    static let cachedAcknowledgements = #"SELECT "replica", "file", "text" FROM "_sqsync_mailbox_acks" WHERE "mailbox" = ?"#
    static let cacheAcknowledgement = """
        INSERT OR REPLACE INTO "_sqsync_mailbox_acks" ("mailbox", "replica", "file", "text") VALUES (?, ?, ?, ?)
        """
    static let uploads = #"SELECT "file" FROM "_sqsync_mailbox_uploads" WHERE "mailbox" = ?"#
    static let relayedWords = #"SELECT "words" FROM "_sqsync_relayed_words" WHERE "mailbox" = ? AND "scope" = ?"#
    static let recordRelayedWords = #"INSERT OR REPLACE INTO "_sqsync_relayed_words" ("mailbox", "scope", "words") VALUES (?, ?, ?)"#
    static let syncedHereBefore = """
        SELECT EXISTS (SELECT 1 FROM "_sqsync_mailbox_acks" WHERE "mailbox" = ?1)
            OR EXISTS (SELECT 1 FROM "_sqsync_mailbox_uploads" WHERE "mailbox" = ?1)
        """
    static let forgetUploads = #"DELETE FROM "_sqsync_mailbox_uploads" WHERE "mailbox" = ?"#
    static let rememberUpload = #"INSERT OR IGNORE INTO "_sqsync_mailbox_uploads" ("mailbox", "file") VALUES (?, ?)"#
    static let uploadsAnywhere = #"SELECT DISTINCT "file" FROM "_sqsync_mailbox_uploads""#
    static let lastQuietSync = """
        SELECT "inputs", "saved_at", "mark", "replica_inputs", "full_checked_at" FROM "_sqsync_quiet_syncs" WHERE "mailbox" = ?
        """
    static let rememberQuietSync = """
        INSERT OR REPLACE INTO "_sqsync_quiet_syncs" ("mailbox", "inputs", "saved_at", "mark", "replica_inputs", "full_checked_at")
        VALUES (?, ?, ?, ?, ?, ?)
        """
    static let unmarkedSeenAt = #"SELECT "seen_at" FROM "_sqsync_unmarked_mailboxes" WHERE "mailbox" = ?"#
    static let noteUnmarked = #"INSERT OR REPLACE INTO "_sqsync_unmarked_mailboxes" ("mailbox", "seen_at") VALUES (?, ?)"#
    static let forgetQuietSync = #"DELETE FROM "_sqsync_quiet_syncs" WHERE "mailbox" = ?"#

    static let schemaVersion = "PRAGMA schema_version"
}

/// The SHA-256 of `text` in hex: the digests a mailbox keeps to tell what it saw before.
func sha256Hex(_ text: String) -> String {
    hexString(SHA256.hash(data: Data(text.utf8)))
}
