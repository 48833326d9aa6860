import SQLiteDatabase

/// When and where a change was made: its hybrid-logical-clock value, the replica that made
/// it (an index into the change set's site list) and that replica's sequence number for it.
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
    public var causalLength: Int64
    public var rowStamp: Stamp?
    public var columns: [ColumnChange]
    /// Counter contributions the receiver lacks. A counter column's value in `columns` is
    /// its base: the value without any entry.
    public var counters: [CounterChange]

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

/// What a peer said it holds: for each site (index into the header's site list), the
/// highest sequence number.
public struct Acknowledgement: Sendable, Equatable {
    public var peer: Int
    public var seqs: [Int64]

    public init(peer: Int, seqs: [Int64]) {
        self.peer = peer
        self.seqs = seqs
    }
}

/// The part of a change set that comes before its rows.
public struct ChangeSetHeader: Sendable, Equatable {
    /// Knowledge IDs; every site index in the change set points here. Index 0 is the sender.
    public var sites: [String]
    public var siteNames: [String]
    /// The sender's knowledge when it wrote the change set, per site.
    public var knowledge: [Int64]
    /// What the receiver was assumed to hold already, per site; all zero for a full export.
    public var base: [Int64]
    /// Deletions the sender purged, per site: a receiver that knows less than this of a
    /// site may still hold rows deleted there, and must re-clone instead.
    public var forgotten: [Int64]
    /// The sender's own clock when it wrote the change set.
    public var senderSeq: Int64
    public var senderHLC: Int64
    public var acknowledgements: [Acknowledgement]
    /// When the sender last learned of each replica's changes, by site index (format 2).
    public var senderLearned: [Int: LearningEvent]
    /// The sender's `PRAGMA user_version` (format 2); nil when the bundle does not say.
    public var schemaVersion: Int64?
    public var tables: [TableSchema]
    /// Signed statements (acknowledgements and key moves), each exactly as its replica signed
    /// it: relays carry them unchanged, receivers believe only those that verify (Bundle's
    /// `KeyBinding`).
    public var statements: [[UInt8]] = []

    public init(
        sites: [String], siteNames: [String], knowledge: [Int64], base: [Int64], forgotten: [Int64], senderSeq: Int64,
        senderHLC: Int64, acknowledgements: [Acknowledgement], tables: [TableSchema],
        senderLearned: [Int: LearningEvent] = [:], schemaVersion: Int64? = nil
    ) {
        self.senderLearned = senderLearned
        self.schemaVersion = schemaVersion
        self.sites = sites
        self.siteNames = siteNames
        self.knowledge = knowledge
        self.base = base
        self.forgotten = forgotten
        self.senderSeq = senderSeq
        self.senderHLC = senderHLC
        self.acknowledgements = acknowledgements
        self.tables = tables
    }

    public var sender: String { sites[0] }
    public var senderName: String { siteNames[0] }
    /// The range of the sender's own changes this change set can carry.
    public var senderRange: ClosedRange<Int64> { (base[0] + 1)...max(base[0] + 1, senderSeq) }
}
