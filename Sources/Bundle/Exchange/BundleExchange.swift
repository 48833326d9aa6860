import ChangeLog
import Foundation
import SQLiteDatabase

/// What an export wrote.
public struct ExportResult: Sendable {
    public var path: String
    public var envelope: BundleEnvelope
    /// Row records in the bundle, of every origin.
    public var rows: Int
    public var bytes: Int
}

/// What an import did with one bundle.
public struct ImportResult: Sendable {
    public enum Outcome: Sendable, Equatable {
        case applied
        /// Verified, but waiting for a schema migration; kept beside the database.
        case held(reason: String)
        /// Written by this very replica: nothing in it is new here.
        case ownBundle
    }

    public var path: String
    public var sender: String
    public var senderName: String
    public var signer: String
    /// What the sender held when it wrote the bundle.
    public var senderKnowledge: Knowledge
    public var outcome: Outcome
    public var summary: ApplySummary
    /// What was ignored on the way, one line each.
    public var warnings: [String] = []
    /// Older than a bundle already taken from the same sender (a replayed file): only its
    /// signed changes were merged, none of them new unless a relay missed them.
    public var superseded = false
}

/// Export and import of whole bundles: the glue between a replica and the file format.
/// Export: `Export/BundleExport.swift`. Import, in three stages (read, admit, merge):
/// `Import/BundleImport.swift`, with admission in `Admission/`.
public enum BundleExchange {
    /// `<sender>_<first>-<last>_<suffix>.sqsb`: valid on FAT32 and exFAT. `first` is the first
    /// of the sender's own changes the bundle may carry and `last` the sender's own sequence
    /// number when it wrote it, so a bundle with none of its own changes reads `6-5`: a name
    /// never claims a change its sender had not made. The suffix is random unless given, so
    /// two exports never collide.
    public static func fileName(sender: String, base: Int64, last: Int64, suffix: String? = nil) -> String {
        let suffix = suffix ?? String(format: "%08x", UInt32.random(in: 0...UInt32.max))
        return "\(sender)_\(base + 1)-\(last)_\(suffix).sqsb"
    }

    /// The sender's own sequence number a bundle file name announces (`last`), if it is one of ours.
    public static func senderSeq(ofFileName name: String) -> Int64? {
        let parts = name.split(separator: "_")
        guard parts.count == 3 else { return nil }
        let bounds = parts[1].split(separator: "-").compactMap { Int64($0) }
        guard bounds.count == 2, bounds[0] <= bounds[1] + 1 else { return nil }
        return bounds[1]
    }

    public static func isBundleFileName(_ name: String) -> Bool {
        name.hasSuffix(".sqsb") && !name.hasPrefix(".")
    }

    /// Tables of Bundle's that hold what belongs to one database file alone (bundles held
    /// beside it): a copy made by `clone` starts them empty.
    public static let perFileTables = BundleTables.perFileState

    /// `purge`: drops the tombstones every live peer has acknowledged (``Replica/purge(dryRun:)``)
    /// and the relayed segments every live peer holds.
    public static func purge(replica: Replica, dryRun: Bool) throws -> PurgeResult {
        try replica.database.inTransaction(commit: !dryRun) {
            let result = try replica.purge(dryRun: false)
            try SegmentStore(replica).dropAcknowledged()
            return result
        }
    }

    static func copiedIdentity(_ path: String, replica: Replica, _ detail: String) -> ChangeLogError {
        ChangeLogError(
            .identityClash,
            "\(path): written by another copy of this database, knowledge ID \(replica.knowledgeID) (\(detail)); keep one copy and make the others with `sqsync clone`"
        )
    }

    static func clockAhead(_ path: String, who: String, by milliseconds: Int64) -> BundleError {
        BundleError(
            .untrusted,
            "\(path): the changes of \(who) are stamped \(ClockBound.describe(milliseconds)) ahead of this machine's clock, more than the \(ClockBound.describe(ClockBound.milliseconds)) allowed (\(ClockBound.environmentVariable)); refusing the bundle"
        )
    }
}
