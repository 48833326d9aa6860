import ChangeLog
import SQLiteDatabase

/// Row records as docs/BUNDLE_FORMAT.md ("Records") lays them out: what one origin's change
/// set says about one row. Stamps are delta-coded against the previous stamp of the segment,
/// so a run of one origin's changes costs a few bytes each.
struct RecordEncoder {
    private let nonKeyColumns: [[Int]]
    private var previousHLC: Int64 = 0
    private var previousSeq: Int64 = 0
    private var previousTable = -1

    init(tables: [TableSchema]) {
        nonKeyColumns = tables.map(BundleCodec.nonKeyColumns)
    }

    /// Appends one record to `record` (emptied first).
    mutating func encode(_ change: RowChange, into record: inout [UInt8]) {
        record.removeAll(keepingCapacity: true)
        var flags: BundleCodec.RowFlags = .row
        if change.rowStamp != nil { flags.insert(.hasRowStamp) }
        if change.table == previousTable { flags.insert(.sameTable) }
        let allInOrder =
            change.columns.count == nonKeyColumns[change.table].count
            && change.columns.map(\.column) == nonKeyColumns[change.table]
        if allInOrder { flags.insert(.allColumnsInOrder) }
        let shareRowStamp = change.rowStamp != nil && change.columns.allSatisfy { $0.stamp == change.rowStamp }
        if shareRowStamp { flags.insert(.columnsShareRowStamp) }
        if !change.counters.isEmpty { flags.insert(.hasCounters) }
        let reach = change.reach.flatMap { $0.fits ? $0 : nil }
        if reach != nil { flags.insert(.hasReach) }
        record.append(flags.rawValue)
        if !flags.contains(.sameTable) { BundleCodec.appendVarint(change.table, to: &record) }
        previousTable = change.table
        BundleCodec.appendVarint(change.causalLength, to: &record)
        if let rowStamp = change.rowStamp { appendStamp(rowStamp, to: &record) }
        for value in change.key { BundleCodec.appendValue(value, to: &record) }
        if !allInOrder { BundleCodec.appendVarint(change.columns.count, to: &record) }
        for column in change.columns {
            if !allInOrder { BundleCodec.appendVarint(column.column, to: &record) }
            BundleCodec.appendValue(column.value, to: &record)
            if shareRowStamp { continue }
            if column.stamp == change.rowStamp {
                record.append(0)
            } else {
                record.append(1)
                appendStamp(column.stamp, to: &record)
            }
        }
        if !change.counters.isEmpty {
            BundleCodec.appendVarint(change.counters.count, to: &record)
            for counter in change.counters {
                BundleCodec.appendVarint(counter.column, to: &record)
                appendStamp(counter.stamp, to: &record)
                BundleCodec.appendVarint(counter.folded, to: &record)
                BundleCodec.appendValue(counter.total, to: &record)
            }
        }
        if let reach {
            BundleCodec.appendVarint(reach.labels.count, to: &record)
            for label in reach.sorted { BundleCodec.appendString(label, to: &record) }
        }
    }

    private mutating func appendStamp(_ stamp: Stamp, to record: inout [UInt8]) {
        BundleCodec.appendZigzag(stamp.hlc &- previousHLC, to: &record)
        BundleCodec.appendVarint(stamp.site, to: &record)
        BundleCodec.appendZigzag(stamp.seq &- previousSeq, to: &record)
        previousHLC = stamp.hlc
        previousSeq = stamp.seq
    }
}

/// Reads records back, refusing any that a signed origin could not have written: a stamp of
/// another replica, a sequence number outside the segment's range, a clock past the one the
/// segment was made at, a causal length or clock arithmetic out of range, a value over the cap.
struct RecordDecoder {
    let header: ChangeSetHeader
    let path: String
    private let nonKeyColumns: [[Int]]
    private let hasPolicies: Bool
    private let maxValueBytes = BundleLimits.maxValueBytes
    private var previousHLC: Int64 = 0
    private var previousSeq: Int64 = 0
    private var tableIndex = -1

    init(header: ChangeSetHeader, path: String) {
        self.header = header
        self.path = path
        nonKeyColumns = header.tables.map(BundleCodec.nonKeyColumns)
        hasPolicies = header.tables.contains(where: \.hasPolicies)
    }

    /// Decodes one record (its first byte already read as `first`, not the end marker).
    mutating func decode<Source: ByteSource>(first: UInt8, from input: Source) throws -> RowChange {
        let flags = BundleCodec.RowFlags(rawValue: first)
        guard flags.contains(.row), BundleCodec.RowFlags.known.isSuperset(of: flags) else {
            throw input.corrupt("unknown record type \(first)")
        }
        guard header.carriesReach || !flags.contains(.hasReach) else {
            throw input.corrupt("a reach without the reach capability")
        }
        if flags.contains(.sameTable) {
            guard tableIndex >= 0 else { throw input.corrupt("no previous table") }
        } else {
            tableIndex = try input.readIndex(below: header.tables.count, "table")
        }
        let table = header.tables[tableIndex]
        let causalLength = try input.readInt64()
        guard causalLength > 0, causalLength <= RowChange.maxCausalLength else {
            throw input.corrupt("causal length \(causalLength) out of range")
        }
        let rowStamp = flags.contains(.hasRowStamp) ? try readStamp(input) : nil
        guard rowStamp != nil || !flags.contains(.columnsShareRowStamp) else {
            throw input.corrupt("shared stamp without a row stamp")
        }
        var key: [SQLValue] = []
        key.reserveCapacity(table.primaryKey.count)
        for index in table.primaryKey { key.append(try value(input, table: table, column: index)) }
        var columns: [ColumnChange] = []
        let inOrder = flags.contains(.allColumnsInOrder)
        let columnCount = inOrder ? nonKeyColumns[tableIndex].count : try input.readCount(limit: table.columns.count)
        columns.reserveCapacity(columnCount)
        for position in 0..<columnCount {
            let column =
                inOrder ? nonKeyColumns[tableIndex][position] : try input.readIndex(below: table.columns.count, "column")
            let value = try value(input, table: table, column: column)
            if flags.contains(.columnsShareRowStamp), let rowStamp {
                columns.append(ColumnChange(column: column, value: value, stamp: rowStamp))
                continue
            }
            let explicit = try input.readByte()
            guard explicit <= 1 else { throw input.corrupt("bad stamp flag") }
            let stamp: Stamp
            if explicit == 1 {
                stamp = try readStamp(input)
            } else {
                guard let rowStamp else { throw input.corrupt("column without a stamp") }
                stamp = rowStamp
            }
            columns.append(ColumnChange(column: column, value: value, stamp: stamp))
        }
        var counters: [CounterChange] = []
        if flags.contains(.hasCounters) {
            guard hasPolicies else { throw input.corrupt("counter contributions without merge policies") }
            for _ in 0..<(try input.readCount(limit: table.columns.count)) {
                let column = try input.readIndex(below: table.columns.count, "counter column")
                guard table.policies[column] == .counter else { throw input.corrupt("counter contributions to a non-counter column") }
                let stamp = try readStamp(input)
                let folded = try input.readInt64()
                let total = try value(input, table: table, column: column)
                counters.append(CounterChange(column: column, total: total, folded: folded, stamp: stamp))
            }
        }
        var change = RowChange(
            table: tableIndex, key: key, causalLength: causalLength, rowStamp: rowStamp, columns: columns, counters: counters)
        if flags.contains(.hasReach) {
            var labels: [String] = []
            for _ in 0..<(try input.readCount(limit: Reach.maxLabels)) {
                labels.append(try input.readString(limit: Reach.maxLabelBytes))
            }
            change.reach = Reach(labels)
        }
        return change
    }

    private func value<Source: ByteSource>(_ input: Source, table: TableSchema, column: Int) throws -> SQLValue {
        do {
            return try input.readValue(maxBytes: maxValueBytes)
        } catch let tooLarge as ValueTooLarge {
            throw BundleError(
                .overCap,
                "\(path): a value of \(tooLarge.bytes) bytes for \(displayText(table.name)).\(displayText(table.columns[column])) is larger than the \(maxValueBytes)-byte cap here (SQSYNC_MAX_VALUE_BYTES); refusing the bundle (the sender's cap is larger: use one cap on every replica)"
            )
        }
    }

    /// A stamp of the origin's, within the segment's range and clock.
    private mutating func readStamp<Source: ByteSource>(_ input: Source) throws -> Stamp {
        let (hlc, hlcOverflow) = previousHLC.addingReportingOverflow(try input.readZigzag())
        let site = try input.readVarint()
        let (seq, seqOverflow) = previousSeq.addingReportingOverflow(try input.readZigzag())
        guard !hlcOverflow, !seqOverflow else { throw input.corrupt("a stamp out of range") }
        guard site == 0 else {
            throw BundleError(
                .untrusted,
                "\(path): the changes signed by \(displayText(header.originLabel)) carry a stamp of another replica; refusing the bundle")
        }
        guard seq > header.base, seq <= header.last else {
            throw BundleError(
                .untrusted,
                "\(path): the changes signed by \(displayText(header.originLabel)) carry its change \(seq), outside the range \(header.base + 1)-\(header.last) it signed; refusing the bundle"
            )
        }
        guard hlc >= 0, hlc <= header.createdHLC else {
            throw BundleError(
                .untrusted,
                "\(path): the changes signed by \(displayText(header.originLabel)) carry a clock past the one they were made at; refusing the bundle"
            )
        }
        previousHLC = hlc
        previousSeq = seq
        return Stamp(hlc: hlc, site: 0, seq: seq)
    }
}
