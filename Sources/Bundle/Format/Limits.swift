import FoundationEssentials
import Glibc

/// The bounds a reader keeps, whatever a file declares, so that a hostile file costs little:
/// each is checked before the memory or time it would take is spent (docs/BUNDLE_FORMAT.md,
/// "Limits").
public enum BundleLimits {
    /// The signed envelope at the end of a bundle: a few dozen bytes per replica.
    static let maxEnvelopeBytes = 4 << 20
    /// An envelope read only to find a key move that makes its signer trusted.
    static let maxUntrustedEnvelopeBytes = 1 << 20
    /// An SSHSIG blob of an Ed25519 signature is about 300 bytes.
    static let maxSignatureBytes = 4096
    /// A segment header: the origin's knowledge, its tables and one line per chunk.
    static let maxSegmentHeaderBytes = 4 << 20
    /// Replicas one bundle may name.
    static let maxSites = 1 << 16
    /// Acknowledgement statements times replicas listed: each statement is read as a whole
    /// knowledge vector, so their product is what an envelope costs in memory.
    static let maxStatementEntries = 1 << 18
    /// A chunk's records, raw, when no record is larger.
    static let chunkBytes = 1 << 20

    /// The largest value a bundle may carry: `SQSYNC_MAX_VALUE_BYTES`, else 16 MiB, well
    /// below SQLite's own limit of a billion bytes. A row is sent in one chunk, so an import
    /// holds at most about this much of a bundle in memory at once.
    public static var maxValueBytes: Int { environmentBytes("SQSYNC_MAX_VALUE_BYTES") ?? 16 << 20 }

    /// The largest mailbox file a sync downloads: `SQSYNC_MAX_BUNDLE_BYTES`, else 1 GiB. A
    /// larger one is skipped with a warning before any of it is read.
    public static var maxBundleBytes: Int { environmentBytes("SQSYNC_MAX_BUNDLE_BYTES") ?? 1 << 30 }

    /// The most SSH keys a mailbox bundle is encrypted to one by one:
    /// `SQSYNC_MAX_DIRECT_RECIPIENTS`, else 32 (about 3.5 KB of header). With more readers it
    /// is encrypted once, to the mailbox's readers' key (docs/BUNDLE_FORMAT.md, "Readers' keys"),
    /// so its size stops growing with the number of readers.
    public static var maxDirectRecipients: Int { environmentBytes("SQSYNC_MAX_DIRECT_RECIPIENTS") ?? 32 }

    /// A chunk's raw bytes: its records, or one row with a value up to the cap.
    static var maxChunkBytes: Int { chunkBytes + maxValueBytes }

    private static func environmentBytes(_ name: String) -> Int? {
        // getenv, not ProcessInfo's dictionary of the whole environment: asked per segment.
        guard let text = getenv(name).map({ String(cString: $0) }), let value = Int(text), value > 0 else { return nil }
        return value
    }
}
