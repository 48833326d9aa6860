import ChangeLog
import SQLiteDatabase
import Crypto
import FoundationEssentials
import Glibc

/// Bundles verified but not yet applicable (they carry a column or table this replica
/// lacks). Each is copied into a folder beside the database, so it is still there after
/// the USB stick it came on has gone, and listed in `_sqsync_held` for `status`.
struct HeldBundles {
    let replica: Replica

    init(replica: Replica) throws {
        try BundleTables.ready(replica)
        self.replica = replica
    }

    var folder: String {
        let url = URL(fileURLWithPath: replica.path)
        return url.deletingLastPathComponent().path + "/." + url.lastPathComponent + "-sqsync-held"
    }

    /// The signed body digest names the bundle: the same bundle is held once.
    static func digestText(_ reader: BundleReader) throws -> String {
        hexString(reader.envelope.bodyDigest)
    }

    func hold(_ reader: BundleReader, reason: String) throws {
        let digest = try Self.digestText(reader)
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let copy = folder + "/" + digest.prefix(32) + ".sqsb"
        if reader.path != copy {
            try? FileManager.default.removeItem(atPath: copy)
            // The bytes verified (decrypted, if it came encrypted), not the file's name.
            do {
                try reader.copyWhole(to: copy)
            } catch let error as BundleError {
                throw BundleError(.io, "\(copy): cannot keep the held bundle: \(error.description)")
            }
        }
        try replica.database.run(
            #"INSERT INTO "_sqsync_held" ("digest", "path", "sender", "reason") VALUES (?, ?, ?, ?) ON CONFLICT DO UPDATE SET "reason" = excluded."reason""#,
            .text(digest), .text(copy), .text(reader.envelope.sender.id), .text(reason))
    }

    func release(digestOf reader: BundleReader) throws {
        guard try replica.database.int64(#"SELECT count(*) FROM "_sqsync_held""#) > 0 else { return }
        let digest = try Self.digestText(reader)
        for row in try replica.database.rows(#"SELECT "path" FROM "_sqsync_held" WHERE "digest" = ?"#, .text(digest)) {
            try? FileManager.default.removeItem(atPath: try row.string("path"))
        }
        try replica.database.run(#"DELETE FROM "_sqsync_held" WHERE "digest" = ?"#, .text(digest))
    }

    /// Drops a held bundle that can never apply, leaving the reason in the conflict log.
    func forget(path: String, because reason: String) throws {
        try replica.database.run(#"DELETE FROM "_sqsync_held" WHERE "path" = ?"#, .text(path))
        try? FileManager.default.removeItem(atPath: path)
        try replica.recordDroppedBundle(path: path, reason: reason)
    }

    func all() throws -> [(path: String, reason: String)] {
        try replica.database.rows(#"SELECT "path", "reason" FROM "_sqsync_held" ORDER BY "held_at""#).map {
            (try $0.string("path"), try $0.string("reason"))
        }
    }
}
