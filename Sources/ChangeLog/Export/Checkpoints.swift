import SQLiteDatabase

/// Checkpoints: segments of this replica's own changes from its first, which every relay may
/// keep in place of all its older ones (docs/BUNDLE_FORMAT.md, "What a relay keeps"). A
/// relay keeps another replica's segments as they came, signed by that replica, so that it can
/// serve whoever comes later; what it keeps stays bounded by the data, not the history,
/// because each origin sends a checkpoint once it has written as many changes as its last
/// checkpoint carried rows, and no segment of its own ever spans a checkpoint.
public enum Checkpoints {
    /// Changes an origin writes before its first checkpoint is due, whatever its size.
    public static let minimumChanges: Int64 = 256

    /// Where an export's own segment starts for a receiver that holds this replica's changes
    /// through `base`, when this replica's last change is `last`: `base` itself, or 0 for a
    /// checkpoint (the receiver is behind the latest one, or a new one is due); `declares`
    /// when this export makes a new checkpoint (or is this replica's first from its first change), which ``Replica/recordCheckpoint(through:records:)``
    /// records once it is written.
    public static func ownBase(forReceiverHolding base: Int64, last: Int64, of replica: Replica) throws -> (
        base: Int64, declares: Bool
    ) {
        guard base < last else { return (base, false) }
        let (seq, records) = try replica.latestCheckpoint()
        // Every change from the first is a checkpoint already; it counts as one when it is this
        // replica's first (later ones for a new receiver leave the others their deltas).
        if base == 0 { return (0, seq == 0) }
        if base < seq { return (0, false) }
        if last - seq >= max(records, minimumChanges) { return (0, true) }
        return (base, false)
    }
}

extension Replica {
    /// The last own change the latest checkpoint covered, and how many rows it carried.
    public func latestCheckpoint() throws -> (seq: Int64, records: Int64) {
        guard let row = try database.row(CheckpointSQL.latest) else { return (0, 0) }
        return (try row.int64("checkpoint_seq"), try row.int64("checkpoint_records"))
    }

    /// Records a checkpoint written through own change `seq`, carrying `records` rows.
    public func recordCheckpoint(through seq: Int64, records: Int) throws {
        try database.run(CheckpointSQL.record, .integer(seq), .integer(Int64(records)))
    }
}

enum CheckpointSQL {
    static let latest = #"SELECT "checkpoint_seq", "checkpoint_records" FROM "_sqsync_replica""#
    /// ?1 the last own change covered, ?2 the rows carried; a checkpoint only moves forward.
    static let record = """
        UPDATE "_sqsync_replica" SET "checkpoint_seq" = ?1, "checkpoint_records" = ?2 WHERE "checkpoint_seq" < ?1
        """
}
