import SQLiteDatabase

/// When a replica learned of another replica's changes: its knowledge of that replica went
/// from `previous` to `reached` by an import made while its own sequence number was
/// `ownSeq`. So its own changes numbered up to `ownSeq` were made without knowing the other
/// replica's changes `previous + 1 ... reached`: they are concurrent with them, and one that
/// overwrites such a value elsewhere is a conflict there too (docs/MERGE_RULES.md).
///
/// Replicas report their latest event per replica in their signed mailbox acknowledgements;
/// nothing else carries them, so without one the applier falls back to what the bundle says.
public struct LearningEvent: Sendable, Equatable {
    public var previous: Int64
    public var reached: Int64
    public var ownSeq: Int64

    public init(previous: Int64, reached: Int64, ownSeq: Int64) {
        self.previous = previous
        self.reached = reached
        self.ownSeq = ownSeq
    }

    /// Writer knowledge ID → learned replica's knowledge ID → the writer's latest event.
    public typealias ByWriter = [String: [String: LearningEvent]]

    /// The events of an import that took `before` to `after`, at own sequence number `ownSeq`,
    /// over the earlier ones (kept for the replicas this import taught nothing new).
    public static func after(
        _ earlier: [String: LearningEvent], before: Knowledge, after: Knowledge, ownSeq: Int64, me: String
    ) -> [String: LearningEvent] {
        var events = earlier
        for (id, seq) in after.seqs where id != me && seq > before[id] {
            events[id] = LearningEvent(previous: before[id], reached: seq, ownSeq: ownSeq)
        }
        return events
    }
}
