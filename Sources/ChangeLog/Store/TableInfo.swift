import FoundationEssentials
import Glibc
import SQLiteDatabase

/// One column of a tracked table, with the stable id sqsync gave it.
public struct ColumnInfo: Sendable, Equatable {
    public var cid: Int
    public var name: String
    /// 1-based position in the primary key, 0 when not part of it.
    public var primaryKeyPosition: Int
    /// How concurrent changes to it merge; key columns are always `lww`.
    public var policy: MergePolicy = .lww
    /// The type the schema declares ("" for none), which gives the column its affinity.
    public var declaredType: String {
        didSet { affinity = Self.affinity(of: declaredType) }
    }
    /// SQLite's column affinity, from the declared type: kept, since every merge asks for it.
    public private(set) var affinity: Affinity
    public var isPrimaryKey: Bool { primaryKeyPosition > 0 }

    public init(cid: Int, name: String, primaryKeyPosition: Int, policy: MergePolicy = .lww, declaredType: String = "") {
        self.cid = cid
        self.name = name
        self.primaryKeyPosition = primaryKeyPosition
        self.policy = policy
        self.declaredType = declaredType
        affinity = Self.affinity(of: declaredType)
    }

    /// SQLite's column affinity, from the declared type ("Determination Of Column Affinity").
    /// A STRICT table's ANY counts as NUMERIC: it converts nothing, so whatever NUMERIC
    /// stores as given, ANY does too.
    public enum Affinity: Sendable { case integer, text, blob, real, numeric }

    static func affinity(of declaredType: String) -> Affinity {
        let type = declaredType.uppercased()
        if type.contains("INT") { return .integer }
        if type.contains("CHAR") || type.contains("CLOB") || type.contains("TEXT") { return .text }
        if type.contains("BLOB") || type.trimmed.isEmpty { return .blob }
        if type.contains("REAL") || type.contains("FLOA") || type.contains("DOUB") { return .real }
        return .numeric
    }

    /// True when the column can hold both 1 and 1.0, which `IS` calls equal: a column of BLOB
    /// affinity (no declared type, or one naming BLOB) or a STRICT table's ANY. Every other
    /// affinity stores an integral number one way only, so a write cannot change a value's
    /// storage class without changing the value (SQLite's rules, "Determination Of Column
    /// Affinity"; a non-STRICT ANY is NUMERIC, counted here all the same).
    var holdsAnyStorageClass: Bool {
        switch affinity {
        case .blob: return true
        case .numeric: return declaredType.uppercased().trimmed == "ANY"
        case .integer, .text, .real: return false
        }
    }
}

/// A tracked table as the triggers see it.
public struct TableInfo: Sendable {
    public var tid: Int
    public var name: String
    /// In the table's own column order.
    public var columns: [ColumnInfo]
    /// The admin's label expression (docs/SCOPES.md), if the table has one.
    public var label: String?
    /// What this replica's grants allow on the table; nil when it may change everything.
    public var grants: [TableGrant]?

    public var primaryKey: [ColumnInfo] {
        columns.filter(\.isPrimaryKey).sorted { $0.primaryKeyPosition < $1.primaryKeyPosition }
    }

    public func column(named name: String) -> ColumnInfo? { columns.first { $0.name == name } }
}

/// What SQLite says about a user table, before sqsync assigns ids.
struct DeclaredTable {
    struct Column {
        var name: String
        var declaredType: String
        var primaryKeyPosition: Int
        /// The DEFAULT expression as written in the schema, if any.
        var defaultSQL: String?
    }

    var name: String
    var columns: [Column]
    var isWithoutRowID: Bool

    var primaryKey: [Column] {
        columns.filter { $0.primaryKeyPosition > 0 }.sorted { $0.primaryKeyPosition < $1.primaryKeyPosition }
    }

    /// An `INTEGER PRIMARY KEY` is an alias of the rowid, filled by SQLite with the next
    /// local integer: two replicas will hand out the same numbers.
    var hasIntegerPrimaryKey: Bool {
        primaryKey.count == 1 && !isWithoutRowID && primaryKey[0].declaredType.uppercased() == "INTEGER"
    }

    static func read(_ name: String, in database: Database) throws -> DeclaredTable? {
        guard
            let withoutRowID = try database.optionalInt64(
                "SELECT wr FROM pragma_table_list WHERE schema = 'main' AND type = 'table' AND name = ?", .text(name))
        else { return nil }
        let columns = try database.rows("SELECT name, type, pk, dflt_value FROM pragma_table_info(?)", .text(name)).map {
            Column(
                name: try $0.string("name"), declaredType: try $0.string("type"), primaryKeyPosition: try $0.int("pk"),
                defaultSQL: try $0.optionalString("dflt_value"))
        }
        return DeclaredTable(name: name, columns: columns, isWithoutRowID: withoutRowID != 0)
    }

    /// Names of the tables this one references by foreign key.
    static func parents(of name: String, in database: Database) throws -> Set<String> {
        Set(try database.rows(#"SELECT DISTINCT "table" FROM pragma_foreign_key_list(?)"#, .text(name)).map { try $0.string("table") })
    }
}
