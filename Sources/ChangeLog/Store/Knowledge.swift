import Foundation
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

    public func covers(_ other: Knowledge) -> Bool {
        other.seqs.allSatisfy { self[$0.key] >= $0.value }
    }

    public mutating func formUnion(_ other: Knowledge) {
        for (id, seq) in other.seqs where seq > self[id] { seqs[id] = seq }
    }

    /// The meet: what every one of the given knowledges holds.
    public static func common(_ all: [Knowledge]) -> Knowledge {
        guard let first = all.first else { return Knowledge() }
        var meet = first.seqs
        for knowledge in all.dropFirst() {
            meet = Dictionary(uniqueKeysWithValues: meet.map { ($0.key, min($0.value, knowledge[$0.key])) })
        }
        return Knowledge(meet)
    }

    /// `id:seq,id:seq`, sorted; the form `--since` takes and `status` prints.
    public var description: String {
        seqs.sorted { $0.key < $1.key }.map { "\($0.key):\($0.value)" }.joined(separator: ",")
    }

    public init(parsing text: String) throws {
        var seqs: [String: Int64] = [:]
        for part in text.split(separator: ",") where !part.trimmingCharacters(in: .whitespaces).isEmpty {
            let fields = part.trimmingCharacters(in: .whitespaces).split(separator: ":")
            guard fields.count == 2, let seq = Int64(fields[1]), seq >= 0 else {
                throw ChangeLogError(.usage, "invalid knowledge \(text.debugDescription): expected ID:SEQ[,ID:SEQ…]")
            }
            seqs[String(fields[0]).lowercased()] = seq
        }
        self.init(seqs)
    }
}
