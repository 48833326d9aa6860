/// What an import did (or, in a dry run, would do), per table.
public struct ApplySummary: Sendable, Equatable {
    public struct TableCounts: Sendable, Equatable {
        public var inserted = 0
        public var updated = 0
        public var deleted = 0
        public var unchanged = 0
        public var conflicts = 0
        /// Rows merged into a label outside this replica's scope: they leave it (once its
        /// peers hold them), so they are not counted as changed here.
        public var leftScope = 0

        public init() {}
    }

    public var tables: [String: TableCounts] = [:]
    /// False when the bundle assumed knowledge this replica lacks: its rows were merged, but
    /// this replica does not claim the sender's knowledge and will ask for it again.
    public var knowledgeAdvanced = false
    public var changes: Int { tables.values.reduce(0) { $0 + $1.inserted + $1.updated + $1.deleted } }
    /// Change sets signed as this replica that it never made, refused alone (the rest of the
    /// bundle was taken): one message each, naming both fixes.
    public var signedAsThisReplica: [String] = []

    /// Adds another change set's counts (one bundle carries one per origin).
    public mutating func add(_ other: ApplySummary) {
        signedAsThisReplica += other.signedAsThisReplica
        for (table, counts) in other.tables {
            var sum = tables[table] ?? TableCounts()
            sum.inserted += counts.inserted
            sum.updated += counts.updated
            sum.deleted += counts.deleted
            sum.unchanged += counts.unchanged
            sum.conflicts += counts.conflicts
            sum.leftScope += counts.leftScope
            tables[table] = sum
        }
    }
    public var conflicts: Int { tables.values.reduce(0) { $0 + $1.conflicts } }
    public var leftScope: Int { tables.values.reduce(0) { $0 + $1.leftScope } }

    public init() {}
}
