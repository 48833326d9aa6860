/// Why a bundle was refused. Every case means "nothing was applied".
public struct BundleError: Error, CustomStringConvertible, Equatable {
    public enum Kind: Sendable, Equatable {
        /// Damaged, truncated, not a bundle, or an unknown version or capability.
        case corrupt
        /// The signature does not verify, or the signer is not trusted.
        case untrusted
        /// Reading or writing the file failed.
        case io
        /// Encrypted to other keys only: nothing in it can be read here.
        case notAddressed
        /// Carries a value larger than this replica's `SQSYNC_MAX_VALUE_BYTES`: refused here
        /// until the cap is raised (a setting of the reader's, so the file is read again).
        case overCap
    }

    public var kind: Kind
    public var description: String
    /// Refused for what the file is, whatever the state of the replica reading it: not a
    /// bundle, damaged, a bad signature, a signer the trust given does not know, a format
    /// this version does not read (not a clock ahead, a claim or a key binding, which can
    /// change). A mailbox reads such a file once (Mailbox.sync).
    public var concernsTheFileAlone = false

    /// Signed by a key `allowed_signers` does not know (not a bad signature): the forgotten
    /// exchange of lines, which `status` lists until the line is added.
    public var signerNotTrusted = false

    /// Its bytes are not the ones signed or sealed (cut short by a stick pulled mid-write, or
    /// altered): damaged, as a ``Kind/corrupt`` file is. A mailbox reader says so to its
    /// writer, which leaves the bundle again.
    public var bytesDamaged: Bool { kind == .corrupt || altered }
    var altered = false

    /// A bundle whose bytes are not the ones its writer signed.
    init(altered description: String) {
        self.init(.untrusted, description)
        altered = true
    }

    public init(_ kind: Kind, _ description: String) {
        self.kind = kind
        self.description = description
    }
}
