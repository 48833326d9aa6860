import ChangeLog
import FoundationEssentials
import Glibc
import SQLiteDatabase

/// What an export wrote.
public struct ExportResult: Sendable {
    public var path: String
    public var envelope: BundleEnvelope
    /// Row records in the bundle, of every origin.
    public var rows: Int
    public var bytes: Int
    /// Values left out because they are larger than a bundle may carry, this time or before;
    /// the rest of the changes went (``ChangeLog/Replica/releaseWithheldValues(cap:)``).
    public var withheld: [WithheldValue] = []
}

/// What an import did with one bundle.
public struct ImportResult: Sendable {
    public enum Outcome: Sendable, Equatable {
        case applied
        /// Verified, but waiting for what this replica lacks to merge it as every other replica
        /// does (a table, a column, an admin statement, a label that applies here); kept beside
        /// the database and tried again by each later import or sync.
        case held(HoldReason)
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
        let suffix = suffix ?? hexString(UInt32.random(in: 0...UInt32.max), width: 8)
        return "\(sender)_\(base + 1)-\(last)_\(suffix).sqsb"
    }

    /// The sender's own sequence number a bundle file name announces (`last`), if it is one of ours.
    public static func senderSeq(ofFileName name: String) -> Int64? { ownChanges(ofFileName: name)?.last }

    /// The sender's own changes a bundle file name announces (`first` is `base + 1`), if it
    /// is one of ours.
    public static func ownChanges(ofFileName name: String) -> (first: Int64, last: Int64)? {
        let parts = name.split(separator: "_")
        guard parts.count == 3 else { return nil }
        let bounds = parts[1].split(separator: "-").compactMap { Int64($0) }
        guard bounds.count == 2, bounds[0] <= bounds[1] + 1 else { return nil }
        return (bounds[0], bounds[1])
    }

    public static func isBundleFileName(_ name: String) -> Bool {
        name.hasSuffix(".sqsb") && !name.hasPrefix(".")
    }

    /// Tables of Bundle's that hold what belongs to one database file alone (bundles held
    /// beside it): a copy made by `clone` starts them empty.
    public static let perFileTables = BundleTables.perFileState

    static func copiedIdentity(_ path: String, replica: Replica, _ detail: String) -> ChangeLogError {
        ChangeLogError(
            .identityClash,
            "\(path): written by another copy of this database, knowledge ID \(replica.knowledgeID) (\(detail)), a file copied with cp or this file before a backup was restored over it; run `sqsync reidentify` on the copy (or on this file, after a restore), then sync both"
        )
    }

    /// Changes under this replica's own knowledge ID that it did not make, met in a bundle
    /// another replica relayed: whoever made them holds its key, or is a copy of its file.
    static func signedAsThisReplica(replica: Replica, _ detail: String) -> String {
        "another key or copy signed changes as this replica, knowledge ID \(replica.knowledgeID) (\(detail)); those changes were refused and the rest of the bundle taken. If a copy of this database made them (a file copied with cp, or this file before a backup was restored over it), run `sqsync reidentify` on the copy (on this file, after a restore), then sync both: nothing either wrote is lost; if this replica's key was stolen, give this replica a new key (`sqsync keygen`, then `sqsync reidentify \(replica.path) --key NEW-KEY`), have the admin retire the old identity (`sqsync peers retire DB \(replica.knowledgeID)`) and remove the old key's line from allowed_signers everywhere. Then `sqsync conflicts \(replica.path) --clear` stops this message"
    }

    static func clockAhead(_ path: String, who: String, by milliseconds: Int64) -> BundleError {
        BundleError(
            .untrusted,
            "\(path): the changes of \(who) are stamped \(ClockBound.describe(milliseconds)) ahead of this machine's clock, more than the \(ClockBound.describe(ClockBound.milliseconds)) allowed (\(ClockBound.environmentVariable)); refusing the bundle"
        )
    }
}

/// A range of a replica's changes this replica lacks though it holds later ones: it heals at
/// the next meeting with anyone who holds it (the missing range is what this replica's
/// acknowledgement asks for).
public struct KnowledgeGap: Sendable, Equatable {
    /// The replica whose changes are missing, and its name as known here.
    public var origin: String
    public var name: String
    /// This replica holds the origin's changes through `holdsThrough`, lacks those after it
    /// through `missingThrough`, and holds (kept, not yet merged whole) some after that.
    public var holdsThrough: Int64
    public var missingThrough: Int64
}

extension BundleExchange {
    /// The ranges of other replicas' changes this replica lacks while it keeps later ones.
    public static func gaps(of replica: Replica) throws -> [KnowledgeGap] {
        try SegmentStore(replica).gaps().map {
            KnowledgeGap(origin: $0.origin, name: try replica.siteName(of: $0.origin), holdsThrough: $0.holds, missingThrough: $0.nextKept)
        }
    }

    /// What this replica can serve of each replica's changes: what it holds, but of another
    /// replica only as far as the segments it keeps reach without a gap from that replica's
    /// first change (a clone, or a replica made by an older sqsync, holds rows it cannot send).
    /// What a mailbox acknowledgement says, so that peers send the rest whole once: a replica
    /// that joins later through this one then gets everything (docs/BUNDLE_FORMAT.md, "What a
    /// relay keeps").
    public static func servableKnowledge(of replica: Replica) throws -> Knowledge {
        let knowledge = try replica.knowledge()
        let kept = try SegmentStore(replica).byOrigin()
        let ownScope = try replica.ownScope()
        let retired = try replica.retiredPeerIDs()
        var servable = knowledge.seqs
        for (origin, held) in knowledge.seqs where origin != replica.knowledgeID && !retired.contains(origin) && held > 0 {
            servable[origin] = min(held, try SegmentStore.reach(of: kept[origin] ?? [], scope: ownScope))
        }
        return Knowledge(servable)
    }
}
