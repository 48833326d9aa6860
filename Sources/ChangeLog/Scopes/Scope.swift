import FoundationEssentials

/// Which labelled rows a replica receives (docs/SCOPES.md): some labels, or every row.
/// Statements and segment headers carry a scope as its sorted labels (`[String]?`, nil for
/// every row); stores and names keep its one text form (``text``); wherever two scopes are
/// compared, or a row's label is tried against one, it is this value that answers.
public struct Scope: Sendable, Hashable {
    /// Nil: every row.
    public let labels: Set<String>?

    public static let everyRow = Scope(nil)

    public init(_ labels: [String]?) { self.labels = labels.map(Set.init) }

    /// The labels sorted, as statements and segment headers carry them; nil for every row.
    public var sorted: [String]? { labels.map { $0.sorted() } }

    public var isEveryRow: Bool { labels == nil }

    /// Whether a row of a labelled table whose label is `label` (nil: none) is in this scope.
    public func contains(label: String?) -> Bool {
        guard let labels else { return true }
        guard let label else { return false }
        return labels.contains(label)
    }

    /// Whether every row this scope holds, `other` holds too.
    public func isWithin(_ other: Scope) -> Bool {
        guard let theirs = other.labels else { return true }
        guard let labels else { return false }
        return labels.isSubset(of: theirs)
    }

    /// Within `other` and not the same.
    public func isStrictlyWithin(_ other: Scope) -> Bool { isWithin(other) && self != other }

    /// The one text form of a scope, as stores keep it and bundle names digest it: `*` for
    /// every row, else its labels sorted, as a JSON array of strings.
    public var text: String {
        guard let sorted else { return "*" }
        return String(decoding: (try? JSONEncoder().encode(sorted)) ?? Data("[]".utf8), as: UTF8.self)
    }

    /// A scope from its text form (``text``).
    public init(text: String) throws {
        self.init(text == "*" ? nil : try JSONDecoder().decode([String].self, from: Data(text.utf8)))
    }
}
