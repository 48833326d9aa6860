import FoundationEssentials
import Glibc
import SQLiteDatabase

/// A version vector: knowledge ID → highest sequence number held from that replica.
/// Because every replica numbers its own changes 1, 2, 3…, one number per replica says
/// exactly which of its changes are held.
public struct Knowledge: Sendable, Equatable, CustomStringConvertible {
    public var seqs: [String: Int64]

    public init(_ seqs: [String: Int64] = [:]) {
        self.seqs = seqs.filter { $0.value > 0 }
    }

    public subscript(id: String) -> Int64 { seqs[id] ?? 0 }

    /// How many changes it holds in all: of two knowledges of the same replicas, the smaller
    /// total is the one further behind.
    public var total: Int64 { seqs.values.reduce(0, +) }

    public func covers(_ other: Knowledge) -> Bool {
        other.seqs.allSatisfy { self[$0.key] >= $0.value }
    }

    public mutating func formUnion(_ other: Knowledge) {
        for (id, seq) in other.seqs where seq > self[id] { seqs[id] = seq }
    }

    /// The meet: what every one of the given knowledges holds.
    public static func common(_ all: [Knowledge]) -> Knowledge {
        guard let first = all.first else { return Knowledge() }
        // In place: a mailbox's readers each list every replica.
        let ids = Array(first.seqs.keys)
        var least = ids.map { first.seqs[$0]! }
        for knowledge in all.dropFirst() {
            for index in ids.indices where least[index] > 0 { least[index] = min(least[index], knowledge[ids[index]]) }
        }
        return Knowledge(Dictionary(uniqueKeysWithValues: zip(ids, least)))
    }

    /// `id:seq,id:seq`, sorted; the form `--since` takes and `status` prints.
    public var description: String {
        seqs.sorted { $0.key < $1.key }.map { "\($0.key):\($0.value)" }.joined(separator: ",")
    }

    /// `ID:SEQ,ID:SEQ…`, spaces around parts allowed. Read byte by byte: a sync reads one of
    /// these per mailbox reader and bundle, each listing every replica.
    public init(parsing text: String) throws {
        var seqs: [String: Int64] = [:]
        var text = text
        try text.withUTF8 { bytes in
            var start = 0
            while start <= bytes.count {
                var end = start
                while end < bytes.count && bytes[end] != UInt8(ascii: ",") { end += 1 }
                var first = start, last = end
                while first < last && (bytes[first] == 0x20 || bytes[first] == 0x09) { first += 1 }
                while last > first && (bytes[last - 1] == 0x20 || bytes[last - 1] == 0x09) { last -= 1 }
                if first < last {
                    guard let colon = (first..<last).first(where: { bytes[$0] == UInt8(ascii: ":") }), colon > first,
                        let seq = Self.decimal(bytes[(colon + 1)..<last])
                    else {
                        throw ChangeLogError(.usage, "invalid knowledge \(String(decoding: bytes, as: UTF8.self).debugDescription): expected ID:SEQ[,ID:SEQ…]")
                    }
                    seqs[String(decoding: bytes[first..<colon], as: UTF8.self).lowercased()] = seq
                }
                start = end + 1
            }
        }
        self.init(seqs)
    }

    /// A non-negative decimal that fits an Int64, or nil.
    private static func decimal(_ digits: Slice<UnsafeBufferPointer<UInt8>>) -> Int64? {
        guard !digits.isEmpty else { return nil }
        var value: Int64 = 0
        for byte in digits {
            guard byte >= 0x30 && byte <= 0x39 else { return nil }
            let (times, overflow) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = times.addingReportingOverflow(Int64(byte - 0x30))
            guard !overflow && !overflow2 else { return nil }
            value = sum
        }
        return value
    }
}
