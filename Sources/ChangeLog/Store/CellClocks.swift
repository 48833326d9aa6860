import SQLiteDatabase

/// The clock of one column value written after its row's insert.
struct CellClock: Equatable {
    var cid: Int
    var hlc: Int64
    var site: Int
    var seq: Int64
}

/// The clock of the row entry that holds the column clocks: they are stored relative to it.
struct RowClock: Equatable {
    var hlc: Int64
    var site: Int
}

/// A row's column clocks, packed into the "cells" BLOB of its `_sqsync_rows` entry (NULL when
/// every column carries the row's own clock). One entry per column in a table of its own
/// repeated the row's key in each: packed, the key is stored once per row.
///
/// Format 2, written whenever every column id is below 2^62: a version byte, then per column
/// in column-id order
/// - the zigzag column id shifted left by one, with bit 0 set when the column's site is not
///   the row's, then that site (zigzag) only if so;
/// - the clock minus the row's clock (zigzag; columns are written after their row's insert,
///   so this is small);
/// - the sequence number (unsigned).
///
/// Each is a LEB128 varint. A row's clock changes only with its life, which drops the column
/// clocks, and its site only in `clone`'s adoption, which rewrites them (`sqsync_cells_adopt`).
/// Format 1 (written by metadata version 9, and for column ids out of range): the column id,
/// clock, site and sequence number of each column, zigzag and absolute.
///
/// sqsync's own connections get SQL functions over it (never used in triggers, which must
/// run for every writer): `sqsync_cells_set`, `sqsync_cells_without`, `sqsync_cells_count`,
/// `sqsync_cells_at`, `sqsync_cells_adopt`, `sqsync_cells_newer`, `sqsync_cells_repack` and
/// the aggregate `sqsync_pack_cells` (see ``functions``). Each takes the row's clock and
/// site right after the packed value.
enum CellClocks {
    static let absoluteFormat: UInt8 = 1
    static let relativeFormat: UInt8 = 2

    /// The packed form, or nil (SQL NULL) for no clocks.
    static func encode(_ clocks: [CellClock], relativeTo row: RowClock) -> [UInt8]? {
        guard !clocks.isEmpty else { return nil }
        let inOrder = zip(clocks, clocks.dropFirst()).allSatisfy { $0.cid < $1.cid }
        let sorted = inOrder ? clocks : clocks.sorted(by: { $0.cid < $1.cid })
        let relative = sorted.allSatisfy { $0.cid.magnitude < 1 << 62 }
        var bytes: [UInt8] = [relative ? relativeFormat : absoluteFormat]
        bytes.reserveCapacity(1 + clocks.count * 12)
        for clock in sorted {
            if relative {
                let otherSite = clock.site != row.site
                appendVarint(zigzag(Int64(clock.cid)) << 1 | (otherSite ? 1 : 0), to: &bytes)
                if otherSite { appendVarint(zigzag(Int64(clock.site)), to: &bytes) }
                appendVarint(zigzag(clock.hlc &- row.hlc), to: &bytes)
                appendVarint(UInt64(bitPattern: clock.seq), to: &bytes)
            } else {
                for field in [Int64(clock.cid), clock.hlc, Int64(clock.site), clock.seq] {
                    appendVarint(zigzag(field), to: &bytes)
                }
            }
        }
        return bytes
    }

    /// The clocks, in column-id order; nil when the bytes are not in either format.
    static func decode<Bytes: Collection<UInt8>>(_ bytes: Bytes, relativeTo row: RowClock) -> [CellClock]?
    where Bytes.Index == Int {
        guard let format = bytes.first else { return [] }
        guard format == absoluteFormat || format == relativeFormat else { return nil }
        var clocks: [CellClock] = []
        var position = bytes.startIndex + 1
        while position < bytes.endIndex {
            if format == relativeFormat {
                guard let head = readVarint(bytes, &position) else { return nil }
                var site = row.site
                if head & 1 == 1 {
                    guard let other = readVarint(bytes, &position) else { return nil }
                    site = Int(unzigzag(other))
                }
                guard let hlc = readVarint(bytes, &position), let seq = readVarint(bytes, &position) else { return nil }
                clocks.append(
                    CellClock(
                        cid: Int(unzigzag(head >> 1)), hlc: row.hlc &+ unzigzag(hlc), site: site,
                        seq: Int64(bitPattern: seq)))
            } else {
                guard let cid = readVarint(bytes, &position), let hlc = readVarint(bytes, &position),
                    let site = readVarint(bytes, &position), let seq = readVarint(bytes, &position)
                else { return nil }
                clocks.append(
                    CellClock(cid: Int(unzigzag(cid)), hlc: unzigzag(hlc), site: Int(unzigzag(site)), seq: unzigzag(seq)))
            }
        }
        return clocks
    }

    /// The clocks of a "cells" value as SQLite holds it: NULL is none.
    static func decode(_ value: SQLValue, relativeTo row: RowClock) -> [CellClock]? {
        switch value {
        case .null: return []
        case .blob(let bytes): return decode(bytes, relativeTo: row)
        default: return nil
        }
    }

    /// The "cells" value to store.
    static func stored(_ clocks: [CellClock], relativeTo row: RowClock) -> SQLValue {
        encode(clocks, relativeTo: row).map(SQLValue.blob) ?? .null
    }

    private static func zigzag(_ value: Int64) -> UInt64 { UInt64(bitPattern: (value << 1) ^ (value >> 63)) }
    private static func unzigzag(_ value: UInt64) -> Int64 { Int64(bitPattern: value >> 1) ^ -Int64(bitPattern: value & 1) }

    private static func appendVarint(_ value: UInt64, to bytes: inout [UInt8]) {
        var rest = value
        while rest >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: rest) | 0x80)
            rest >>= 7
        }
        bytes.append(UInt8(rest))
    }

    private static func readVarint<Bytes: Collection<UInt8>>(_ bytes: Bytes, _ position: inout Int) -> UInt64?
    where Bytes.Index == Int {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while position < bytes.endIndex {
            let byte = bytes[position]
            position += 1
            guard shift < 64 else { return nil }
            value |= UInt64(byte & 0x7f) << shift
            if byte & 0x80 == 0 { return value }
            shift += 7
        }
        return nil
    }
}

extension Replica {
    /// The column clocks of a row entry's "cells" value, the entry's clock and site `row`.
    func cellClocks(_ value: SQLValue, of row: RowClock) throws -> [CellClock] {
        guard let clocks = CellClocks.decode(value, relativeTo: row) else {
            throw ChangeLogError(
                .notAReplica, "\(path): a row's column clocks are not in a format this sqsync reads (metadata damaged?)")
        }
        return clocks
    }
}

// MARK: SQL functions

extension CellClocks {
    /// The functions over packed column clocks, registered where a replica opens its database.
    static var functions: [SQLFunction] {
        [
            SQLFunction("sqsync_cells_set", argumentCount: 7, set),
            SQLFunction("sqsync_cells_without", argumentCount: 4, without),
            SQLFunction("sqsync_cells_count", argumentCount: 5, count),
            SQLFunction("sqsync_cells_at", argumentCount: 5, at),
            SQLFunction("sqsync_cells_adopt", argumentCount: 5, adopt),
            SQLFunction("sqsync_cells_newer", argumentCount: 4, newer),
            SQLFunction("sqsync_cells_repack", argumentCount: 3, repack),
            .aggregate(
                "sqsync_pack_cells", argumentCount: 6, makeState: Gathered.init,
                step: { gathered, arguments in
                    gathered.clocks.append(
                        CellClock(
                            cid: Int(arguments.int64(0)), hlc: arguments.int64(1), site: Int(arguments.int64(2)),
                            seq: arguments.int64(3)))
                    gathered.row = RowClock(hlc: arguments.int64(4), site: Int(arguments.int64(5)))
                },
                final: { gathered, result in
                    guard let gathered else { return result.setNull() }
                    set(result, gathered.clocks, relativeTo: gathered.row)
                }),
        ]
    }

    /// The row's clock and site, arguments 1 and 2.
    private static func row(_ arguments: SQLFunctionArguments) -> RowClock {
        RowClock(hlc: arguments.int64(1), site: Int(arguments.int64(2)))
    }

    /// The clocks of argument 0 (relative to the row of arguments 1 and 2), or nil after
    /// reporting a value that is not packed clocks.
    private static func clocks(_ arguments: SQLFunctionArguments, _ result: SQLFunctionResult) -> [CellClock]? {
        switch arguments.storageClass(0) {
        case .null:
            return []
        case .blob:
            guard let bytes = arguments.bytes(0) else { return nil }
            if bytes.isEmpty { return [] }
            if let clocks = decode(bytes, relativeTo: row(arguments)) { return clocks }
        default:
            break
        }
        result.setError("sqsync: a row's column clocks are not in a format this sqsync reads")
        return nil
    }

    private static func set(_ result: SQLFunctionResult, _ clocks: [CellClock], relativeTo row: RowClock) {
        guard let bytes = encode(clocks, relativeTo: row) else { return result.setNull() }
        result.setBlob(bytes)
    }

    /// (cells, row hlc, row site, cid, hlc, site, seq): the clocks with that column's set.
    private static func set(_ arguments: SQLFunctionArguments, _ result: SQLFunctionResult) {
        guard var clocks = clocks(arguments, result) else { return }
        let clock = CellClock(
            cid: Int(arguments.int64(3)), hlc: arguments.int64(4), site: Int(arguments.int64(5)), seq: arguments.int64(6))
        if let index = clocks.firstIndex(where: { $0.cid == clock.cid }) {
            clocks[index] = clock
        } else {
            clocks.append(clock)
        }
        set(result, clocks, relativeTo: row(arguments))
    }

    /// (cells, row hlc, row site, cid): the clocks without that column's; NULL when none is left.
    private static func without(_ arguments: SQLFunctionArguments, _ result: SQLFunctionResult) {
        guard let clocks = clocks(arguments, result) else { return }
        let cid = Int(arguments.int64(3))
        set(result, clocks.filter { $0.cid != cid }, relativeTo: row(arguments))
    }

    /// (cells, row hlc, row site): the same clocks in the current format. A value in no
    /// known format is kept as it is (metadata migration 10 runs this over every entry, and
    /// one damaged entry must not lock the replica out; the reads that meet it report it).
    private static func repack(_ arguments: SQLFunctionArguments, _ result: SQLFunctionResult) {
        guard arguments.storageClass(0) == .blob, let bytes = arguments.bytes(0), !bytes.isEmpty,
            let clocks = decode(bytes, relativeTo: row(arguments))
        else { return result.setArgument(arguments, 0) }
        set(result, clocks, relativeTo: row(arguments))
    }

    /// (cells, row hlc, row site, site, seq): how many clocks are that site's after that
    /// sequence number.
    private static func count(_ arguments: SQLFunctionArguments, _ result: SQLFunctionResult) {
        guard let clocks = clocks(arguments, result) else { return }
        let site = Int(arguments.int64(3)), after = arguments.int64(4)
        result.setInt64(Int64(clocks.filter { $0.site == site && $0.seq > after }.count))
    }

    /// (cells, row hlc, row site, site, seq): how many clocks are that very change's.
    private static func at(_ arguments: SQLFunctionArguments, _ result: SQLFunctionResult) {
        guard let clocks = clocks(arguments, result) else { return }
        let site = Int(arguments.int64(3)), seq = arguments.int64(4)
        result.setInt64(Int64(clocks.filter { $0.site == site && $0.seq == seq }.count))
    }

    /// (cells, row hlc, row site, row seq, site): unnumbered clocks (sequence number 0) become
    /// that site's (`clone`), packed relative to the row as it is after the same adoption.
    private static func adopt(_ arguments: SQLFunctionArguments, _ result: SQLFunctionResult) {
        guard var clocks = clocks(arguments, result) else { return }
        let site = Int(arguments.int64(4))
        for index in clocks.indices where clocks[index].seq == 0 { clocks[index].site = site }
        var adopted = row(arguments)
        if arguments.int64(3) == 0 { adopted.site = site }
        set(result, clocks, relativeTo: adopted)
    }

    /// (cells, row hlc, row site, knowledge): 1 when a clock is newer than the knowledge, given as
    /// `site:seq,site:seq…` (a site not named: 0). The knowledge is bound once per query: it
    /// is parsed once, and kept with the statement.
    private static func newer(_ arguments: SQLFunctionArguments, _ result: SQLFunctionResult) {
        guard let clocks = clocks(arguments, result) else { return }
        let known: [Int: Int64]
        if let saved = arguments.auxiliary(3, as: BoundKnowledge.self) {
            known = saved.seqBySite
        } else {
            var parsed: [Int: Int64] = [:]
            for pair in (arguments.string(3) ?? "").split(separator: ",") {
                let parts = pair.split(separator: ":")
                if parts.count == 2, let site = Int(parts[0]), let seq = Int64(parts[1]) { parsed[site] = seq }
            }
            known = parsed
            arguments.setAuxiliary(BoundKnowledge(parsed), for: 3)
        }
        result.setBool(clocks.contains { $0.seq > (known[$0.site] ?? 0) })
    }

    private final class BoundKnowledge {
        let seqBySite: [Int: Int64]
        init(_ seqBySite: [Int: Int64]) { self.seqBySite = seqBySite }
    }

    /// The clocks gathered by the aggregate `sqsync_pack_cells(cid, hlc, site, seq, row hlc,
    /// row site)`, all of one row.
    private final class Gathered {
        var clocks: [CellClock] = []
        var row = RowClock(hlc: 0, site: 0)
    }
}
