/// Why a verified bundle waits beside the database instead of being merged now: what this
/// replica lacks to merge it the same way every other replica does. A later `import` or `sync`
/// tries it again (docs/ARCHITECTURE.md, "Admit").
public struct HoldReason: Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// The bundle carries a table this replica does not track (yet).
        case tableNotTracked(String)
        /// A table tracked here no longer exists in the database (a migration under way).
        case trackedTableMissing
        /// The bundle carries a column of a tracked table this replica lacks.
        case columnMissing(table: String, column: String)
        /// The bundle's table has another primary key.
        case differentKey(String)
        /// The origin merges a column by another policy.
        case policyMismatch(table: String, column: String)
        /// The origin made its changes under admin statements not held here yet.
        case adminStatementsMissing(origin: String)
        /// A label of the admin statements names a column this replica does not have.
        case labelNotApplicable(table: String)
        /// UNIQUE clashes that could not be settled before a migration.
        case uniqueClashUnsettled(table: String)
    }

    public var kind: Kind
    /// One line for the user: the bundle, what is missing, and what to do.
    public var message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }
}

extension HoldReason: Error {}

/// A merge that met, part-way, something this replica lacks (``HoldReason``): thrown so that
/// the import's transaction rolls back whole, and the bundle is held. Admission finds most
/// such reasons before anything is written; this is for those only the rows themselves show.
public struct MergeHeld: Error, Sendable, CustomStringConvertible {
    public var reason: HoldReason

    public init(_ reason: HoldReason) { self.reason = reason }

    public var description: String { reason.message }
}
