import SQLiteDatabase

/// Why a change-log operation was refused. The message is one line, meant for the user,
/// and names the file or table concerned and what to do.
public struct ChangeLogError: Error, CustomStringConvertible, Equatable {
    public enum Kind: Sendable, Equatable {
        case notAReplica
        case noSuchFile
        case noSuchTable
        case noSuchPeer
        case unsupportedTable
        case identityClash
        case retiredPeer
        case staleReplica
        case schemaMismatch
        case usage
        /// Between `refresh --before-migration` and `refresh`: nothing is captured meanwhile.
        case migrationPending
        /// What this replica's admin statements forbid here: untracking a table its grants
        /// restrict, an export that would widen a scope, a sync while grant checks are missing.
        case forbidden
    }

    public var kind: Kind
    public var description: String
    /// For an identity clash found in a file's changes: the first of this replica's own change
    /// numbers the file shows made otherwise. Its own changes from there on are what a
    /// `reidentify` must keep as the new identity's.
    public var ownChangeClash: Int64?

    public init(_ kind: Kind, _ description: String) {
        self.kind = kind
        self.description = description
    }
}
