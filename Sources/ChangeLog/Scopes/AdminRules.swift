import FoundationEssentials
import Glibc

/// What a replica may change: insert, update, delete.
public struct GrantOperations: OptionSet, Sendable, Hashable, Codable, CustomStringConvertible {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let insert = GrantOperations(rawValue: 1)
    public static let update = GrantOperations(rawValue: 2)
    public static let delete = GrantOperations(rawValue: 4)
    public static let all: GrantOperations = [.insert, .update, .delete]

    private static let names: [(String, GrantOperations)] = [("insert", .insert), ("update", .update), ("delete", .delete)]

    /// A comma list as the command line takes it: `insert,update`.
    public init?(list: String) {
        var operations: GrantOperations = []
        for part in list.split(separator: ",", omittingEmptySubsequences: false) {
            guard let named = Self.names.first(where: { $0.0 == part.trimmed.lowercased() })
            else { return nil }
            operations.insert(named.1)
        }
        guard !operations.isEmpty else { return nil }
        self = operations
    }

    public var description: String { Self.names.filter { contains($0.1) }.map(\.0).joined(separator: ",") }
}

/// One admin decision: what `sqsync label`, `scope`, `grant` and `revoke` sign, and every
/// replica replays in the same order (docs/SCOPES.md). Replicas are named by knowledge ID.
public enum AdminAct: Sendable, Equatable, Codable {
    /// A table's label expression; an empty one removes the label.
    case label(table: String, expression: String)
    /// The labels a replica receives; nil: every row.
    case scope(replica: String, labels: [String]?)
    /// Operations a replica may make on a table, on rows with one of `labels` (empty: any row).
    case grant(replica: String, table: String, operations: GrantOperations, labels: [String])
    /// Operations taken back from every grant of a replica on a table.
    case revoke(replica: String, table: String, operations: GrantOperations)

    /// The replica the act is about, if any.
    public var replica: String? {
        switch self {
        case .label: return nil
        case .scope(let replica, _), .grant(let replica, _, _, _), .revoke(let replica, _, _): return replica
        }
    }
}

extension AdminAct {
    /// A label is one SQL expression over the row's own columns. It goes into triggers and
    /// an index on every replica, so what could do anything else is refused wherever the
    /// statement is read: statement separators, comments, subqueries, RAISE, ATTACH, PRAGMA.
    public static func isAcceptableLabel(_ expression: String) -> Bool {
        guard !expression.contains(";"), !expression.contains("--"), !expression.contains("/*"),
            !expression.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
        else { return false }
        // No subquery: no SELECT or VALUES, no `IN table` (IN takes a parenthesised list), no
        // table-valued pragma functions.
        guard
            !expression.contains(Self.subqueryWord), !expression.contains(Self.inWithoutList)
        else { return false }
        // Parentheses balance outside quotes, and every quote closes: the expression cannot
        // end the CAST((…) AS TEXT) it is put in and start another column or clause.
        var depth = 0
        var quote: Character?
        for character in expression {
            if let open = quote {
                if character == open { quote = nil }
                continue
            }
            switch character {
            case "'", "\"", "`", "[": quote = character == "[" ? "]" : character
            case "(": depth += 1
            case ")":
                depth -= 1
                if depth < 0 { return false }
            default: break
            }
        }
        return depth == 0 && quote == nil
    }

    /// Labels and names a statement carries go into SQL text and messages: no control
    /// characters (a NUL would cut a trigger's SQL short).
    /// SELECT, RAISE, ATTACH, DETACH, PRAGMA… or VALUES, as a word.
    private static var subqueryWord: Regex<(Substring, Substring)> { #/(?i)\b(select|raise|attach|detach|pragma\w*|values)\b/# }

    /// IN followed by anything but a parenthesised list.
    private static var inWithoutList: Regex<Substring> { #/(?i)\bin\s+(?!\()/# }

    static func isPlainText(_ text: String) -> Bool {
        !text.unicodeScalars.contains { $0.properties.generalCategory == .control }
    }

    /// Whether every field is one sqsync can apply: a label it accepts.
    public var isWellFormed: Bool {
        switch self {
        case .label(let table, let expression): return Self.isPlainText(table) && Self.isAcceptableLabel(expression)
        case .scope(let replica, let labels): return Self.isPlainText(replica) && (labels ?? []).allSatisfy(Self.isPlainText)
        case .grant(let replica, let table, _, let labels):
            return Self.isPlainText(replica) && Self.isPlainText(table) && labels.allSatisfy(Self.isPlainText)
        case .revoke(let replica, let table, _): return Self.isPlainText(replica) && Self.isPlainText(table)
        }
    }
}

/// One grant a replica holds on one table.
public struct TableGrant: Sendable, Equatable, Codable {
    public var operations: GrantOperations
    /// Empty: rows of any label (and of a table without one).
    public var labels: [String]

    public init(operations: GrantOperations, labels: [String]) {
        self.operations = operations
        self.labels = labels
    }

    func allows(_ operation: GrantOperations, label: String?) -> Bool {
        guard operations.contains(operation) else { return false }
        if labels.isEmpty { return true }
        guard let label else { return false }
        return labels.contains(label)
    }
}

/// Labels, scopes and grants as a list of admin acts leaves them, replayed in order: the
/// later act on the same table (label), replica (scope) or replica and table (grants) wins.
public struct AdminRules: Sendable, Equatable {
    /// Label expression by table name.
    public private(set) var labels: [String: String] = [:]
    /// Labels by replica, as named by a `scope` statement; a replica not listed receives the
    /// default scope.
    public private(set) var scopes: [String: [String]] = [:]
    /// Replicas a statement gave every row (`scope REPLICA --all`), whatever the default.
    public private(set) var everyRow: Set<String> = []
    /// What a replica no statement scopes receives: nil, every row (the default); with
    /// `scope --default none`, no labelled row.
    public private(set) var defaultScope: [String]?

    /// The replica name a `scope` statement about every replica no other names carries.
    public static let everyOtherReplica = "*"
    /// Grants by replica, then table. A replica listed here may change only what they allow;
    /// one named by a grant or revoke stays listed even with nothing left.
    public private(set) var grants: [String: [String: [TableGrant]]] = [:]

    public init() {}

    public init(acts: [AdminAct]) {
        for act in acts { apply(act) }
    }

    mutating func apply(_ act: AdminAct) {
        switch act {
        case .label(let table, let expression):
            labels[table] = expression.isEmpty ? nil : expression
        case .scope(let replica, let chosen):
            let labels = chosen.map { Array(Set($0)).sorted() }
            if replica == Self.everyOtherReplica {
                defaultScope = labels
            } else {
                scopes[replica] = labels
                if labels == nil { everyRow.insert(replica) } else { everyRow.remove(replica) }
            }
        case .grant(let replica, let table, let operations, let chosen):
            let wanted = Array(Set(chosen)).sorted()
            var held = grants[replica, default: [:]][table, default: []]
            if let index = held.firstIndex(where: { $0.labels == wanted }) {
                held[index].operations.formUnion(operations)
            } else {
                held.append(TableGrant(operations: operations, labels: wanted))
            }
            grants[replica, default: [:]][table] = held
        case .revoke(let replica, let table, let operations):
            var held = grants[replica, default: [:]][table, default: []]
            for index in held.indices { held[index].operations.subtract(operations) }
            held.removeAll { $0.operations.isEmpty }
            grants[replica, default: [:]][table] = held
        }
    }

    /// Every scope some replica has, once each (the default's, when it is not every row).
    public var distinctScopes: [[String]] {
        Array(Set(scopes.values).union(defaultScope.map { [$0] } ?? [])).sorted { $0.lexicographicallyPrecedes($1) }
    }

    /// Whether any replica receives only some rows.
    public var hasScopes: Bool { !scopes.isEmpty || defaultScope != nil }

    /// Whether any statement restricts any replica (a scope, a default scope or a grant):
    /// without one, binding restrictions to keys has nothing to bind.
    public var restrictsAnyone: Bool { hasScopes || !grants.isEmpty }

    /// The labels a replica receives, or nil when it receives every row.
    public func scope(of replica: String) -> [String]? {
        if let labels = scopes[replica] { return labels }
        return everyRow.contains(replica) ? nil : defaultScope
    }

    /// Whether a replica's changes are checked against grants at all.
    public func isRestricted(_ replica: String) -> Bool { grants[replica] != nil }

    /// The rules with restrictions bound to keys, not only to knowledge IDs: a replica that
    /// signs with a key another replica signed with (`init --key`, `clone --key`, `reidentify`
    /// and a re-made replica all give birth to one) receives that replica's scope and grants
    /// where no statement names it. A restricted key thus cannot make itself a new,
    /// unrestricted replica; an admin lifts the binding only by a statement naming the new
    /// one. `sharers` gives, by replica, the others that share one of its keys; when several
    /// are restricted, the first by knowledge ID binds. `held`: the rules that say what binds
    /// (every statement the receiver holds, by default these): a new replica's first changes
    /// name no statement, and must not escape by that.
    public func binding(keySharers sharers: [String: Set<String>], held: AdminRules? = nil) -> AdminRules {
        let source = held ?? self
        var bound = self
        for (replica, others) in sharers {
            let restricting = others.sorted()
            if grants[replica] == nil, source.grants[replica] == nil, let parent = restricting.first(where: { source.grants[$0] != nil }) {
                bound.grants[replica] = source.grants[parent]
            }
            if scopes[replica] == nil, !everyRow.contains(replica), source.scopes[replica] == nil, !source.everyRow.contains(replica),
                let parent = restricting.first(where: { source.scopes[$0] != nil })
            {
                bound.scopes[replica] = source.scopes[parent]
            }
        }
        return bound
    }

    /// The grants a restricted replica holds on a table (nil: it is not restricted).
    public func grants(of replica: String, on table: String) -> [TableGrant]? {
        guard let byTable = grants[replica] else { return nil }
        return byTable[table] ?? []
    }

    /// Whether `replica` may make `operation` on a row of `table` whose label is `label`
    /// (nil: no label, or not known here, which only a grant for any label covers).
    public func allows(_ replica: String, _ operation: GrantOperations, on table: String, label: String?) -> Bool {
        guard let held = grants(of: replica, on: table) else { return true }
        return held.contains { $0.allows(operation, label: label) }
    }
}
