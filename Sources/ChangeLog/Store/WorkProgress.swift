/// How far a long step of a command has got, for a caller that shows progress (the CLI draws
/// it on a terminal); the libraries only report it. `total` is what the step knows it will
/// reach: rows of a log to fold, pages to copy, changes to send, rows a bundle declares.
public struct WorkProgress: Sendable, Equatable {
    public var step: String
    public var done: Int
    public var total: Int
    public var unit: String

    public init(step: String, done: Int, total: Int, unit: String) {
        self.step = step
        self.done = done
        self.total = total
        self.unit = unit
    }
}

extension Replica {
    /// How often a step reports: often enough for a display to move, rarely enough to cost
    /// nothing next to the work.
    public static let progressInterval = 10_000
}
