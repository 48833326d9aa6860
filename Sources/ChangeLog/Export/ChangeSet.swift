import SQLiteDatabase

/// When and where a change was made: its hybrid-logical-clock value, the replica that made
/// it (0, the change set's origin: the only replica whose versions a set may carry) and that
/// replica's sequence number for it.
public struct Stamp: Sendable, Equatable {
    public var hlc: Int64
    public var site: Int
    public var seq: Int64

    public init(hlc: Int64, site: Int, seq: Int64) {
        self.hlc = hlc
        self.site = site
        self.seq = seq
    }
}

/// One column's value and the change that wrote it.
public struct ColumnChange: Sendable, Equatable {
    /// Index into the table's ``TableSchema/columns``.
    public var column: Int
    public var value: SQLValue
    public var stamp: Stamp

    public init(column: Int, value: SQLValue, stamp: Stamp) {
        self.column = column
        self.value = value
        self.stamp = stamp
    }
}

/// One replica's contribution to a counter cell in the row's current life: the sum of its
/// deltas after `folded` (up to where that replica had folded its entries into the value
/// when it wrote them), stamped with its latest delta. A receiver adds what it lacks of it.
public struct CounterChange: Sendable, Equatable {
    /// Index into the table's ``TableSchema/columns``.
    public var column: Int
    public var total: SQLValue
    public var folded: Int64
    /// The contributing replica's latest delta to the cell.
    public var stamp: Stamp

    public init(column: Int, total: SQLValue, folded: Int64, stamp: Stamp) {
        self.column = column
        self.total = total
        self.folded = folded
        self.stamp = stamp
    }
}

/// Everything a change set says about one row.
///
/// `causalLength` counts the row's lives: odd while it exists, even once deleted; an insert
/// after a delete starts the next odd number. `rowStamp` is present when the change set
/// carries the event that started the current life (an insert, with every column) or ended
/// it (a delete, with no columns); without it, `columns` are updates within the life.
public struct RowChange: Sendable, Equatable {
    /// Index into the change set's ``ChangeSetHeader/tables``.
    public var table: Int
    /// Primary-key values in key order.
    public var key: [SQLValue]
    /// The largest causal length a change carries. A replica's own writes stop there (a row
    /// at the top keeps its last two lives), so a peer that signed a length near it, which no
    /// honest history reaches, cannot make this replica write one its peers refuse.
    public static let maxCausalLength: Int64 = 1 << 62
    public var causalLength: Int64
    public var rowStamp: Stamp?
    public var columns: [ColumnChange]
    /// Counter contributions the receiver lacks. A counter column's value in `columns` is
    /// its base: the value without any entry.
    public var counters: [CounterChange]
    /// The row's reach as its origin knew it (``Reach``), on a life, a departure or a
    /// deletion of a labelled table's row; nil: not carried (unknown, where a life or a
    /// deletion lacks it).
    public var reach: Reach?

    public init(
        table: Int, key: [SQLValue], causalLength: Int64, rowStamp: Stamp?, columns: [ColumnChange],
        counters: [CounterChange] = []
    ) {
        self.table = table
        self.key = key
        self.causalLength = causalLength
        self.rowStamp = rowStamp
        self.columns = columns
        self.counters = counters
    }

    public var isDelete: Bool { causalLength % 2 == 0 }
}

/// A tracked table as a change set describes it, so the receiver can check it has the same
/// columns before touching anything.
public struct TableSchema: Sendable, Equatable {
    public var name: String
    public var columns: [String]
    /// Indexes into `columns`, in primary-key order.
    public var primaryKey: [Int]
    /// Each column's merge policy, parallel to `columns`: the receiver must merge alike.
    public var policies: [MergePolicy]

    public init(name: String, columns: [String], primaryKey: [Int], policies: [MergePolicy]? = nil) {
        self.name = name
        self.columns = columns
        self.primaryKey = primaryKey
        self.policies = policies ?? Array(repeating: .lww, count: columns.count)
    }

    /// True when some column does not merge as last writer wins.
    public var hasPolicies: Bool { policies.contains { $0 != .lww } }
}

/// What one origin's change set says before its rows: whose changes they are, which of its
/// sequence numbers they cover, and what the origin knew when it wrote them. Every stamp in
/// the set's records is the origin's (site 0): only the origin's own signature makes a
/// change count as its own (docs/BUNDLE_FORMAT.md, "Segments").
public struct ChangeSetHeader: Sendable, Equatable {
    /// The knowledge ID of the replica whose changes these are.
    public var origin: String
    /// Its name, as the writer of the set knows it.
    public var originName: String
    /// The origin's changes the set covers: numbered after `base`, through `last`. A
    /// receiver that held the origin's changes through `base` holds them through `last` once
    /// it has merged the set.
    public var base: Int64
    public var last: Int64
    /// The origin's clock when it wrote the set: past every stamp in it.
    public var createdHLC: Int64
    /// What the origin held when it wrote the set, by knowledge ID, itself included: a value
    /// it overwrote without having seen it is a conflict (docs/MERGE_RULES.md).
    public var originKnowledge: Knowledge
    /// When the origin last learned of each replica's changes, by knowledge ID.
    public var learned: [String: LearningEvent]
    /// The origin's `PRAGMA user_version`, named when a set must be held for a migration.
    public var schemaVersion: Int64?
    public var tables: [TableSchema]
    /// The admin statements (their ids) the origin made these changes under: grants are
    /// judged by them (docs/SCOPES.md).
    public var adminStatements: [[UInt8]] = []
    /// The labels the set was cut for, or nil when it holds every change of the range.
    public var scope: [String]?
    /// Whether its records may carry reaches (``RowChange/reach``): a capability, so that a
    /// reader without it refuses the set by name instead of misreading it.
    public var carriesReach = false

    public init(
        origin: String, originName: String, base: Int64, last: Int64, createdHLC: Int64, originKnowledge: Knowledge,
        learned: [String: LearningEvent] = [:], schemaVersion: Int64? = nil, tables: [TableSchema]
    ) {
        self.origin = origin
        self.originName = originName
        self.base = base
        self.last = last
        self.createdHLC = createdHLC
        self.originKnowledge = originKnowledge
        self.learned = learned
        self.schemaVersion = schemaVersion
        self.tables = tables
    }

    /// The origin's name when known, else its knowledge ID: for messages.
    public var originLabel: String { originName.isEmpty ? origin : "\(originName) (\(origin))" }
}
