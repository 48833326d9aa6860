import Foundation
import TestSupport
import SQLiteDatabase
import XCTest

@testable import ChangeLog

/// Property test: random writes on random replicas, random exchanges that are sometimes
/// dropped, duplicated or delivered late, then a final exchange until quiet. Every replica
/// must end with the same rows, whatever happened on the way.
///
/// Runs 3 seeds; `SQSYNC_PROPERTY_SEEDS=N` runs N. `SQSYNC_PROPERTY_SEED=S` replays one seed.
final class ConvergenceTests: XCTestCase {
    private static let schema = "CREATE TABLE notes (id TEXT PRIMARY KEY, title TEXT, n INTEGER, body);"
    private static let keys = (0..<10).map { "k\($0)" }

    func testRandomHistoriesConverge() throws {
        let seeds = PropertyHistory.seeds(from: 0x5EED_0000)
        for seed in seeds {
            var history = PropertyHistory(seed: seed)
            do {
                try run(&history)
            } catch {
                XCTFail("seed \(seed) threw \(error)\nlast steps:\n\(history.tail)")
            }
        }
    }

    private struct Delivery {
        var set: ChangeSet
        var to: Int
        var label: String
    }

    private func run(_ history: inout PropertyHistory) throws {
        let sandbox = try Sandbox()
        let count = 3 + history.below(2)
        let replicas = try sandbox.replicas((0..<count).map { "r\($0)" }, schema: Self.schema, track: ["notes"])
        var late: [Delivery] = []
        let seed = history.seed

        for step in 0..<300 {
            let roll = history.below(100)
            if roll < 50 {
                let index = history.below(count)
                try write(on: replicas[index], index: index, &history)
            } else if roll < 85 {
                let source = history.below(count)
                var destination = history.below(count - 1)
                if destination >= source { destination += 1 }
                let full = history.chance(10)
                let set =
                    full
                    ? try changeSet(from: replicas[source], since: Knowledge())
                    : try changeSet(from: replicas[source], for: replicas[destination])
                let label = "step \(step): r\(source) → r\(destination)\(full ? " (full)" : "") \(set.changes.count) rows"
                switch history.below(10) {
                case 0:
                    history.note(label + " dropped")
                case 1, 2:
                    history.note(label + " held back")
                    late.append(Delivery(set: set, to: destination, label: label))
                case 3:
                    history.note(label + " applied twice")
                    try apply(set, to: replicas[destination])
                    try apply(set, to: replicas[destination])
                default:
                    history.note(label)
                    try apply(set, to: replicas[destination])
                }
            } else if !late.isEmpty {
                let delivery = late.remove(at: history.below(late.count))
                history.note("step \(step): late delivery of [\(delivery.label)]")
                try apply(delivery.set, to: replicas[delivery.to])
                if history.chance(30) { late.append(delivery) }  // and maybe again later
            }
        }
        while !late.isEmpty {
            let delivery = late.remove(at: history.below(late.count))
            history.note("end: late delivery of [\(delivery.label)]")
            try apply(delivery.set, to: replicas[delivery.to])
        }
        history.note("end: exchanging until quiet")
        try syncUntilQuiet(replicas)

        let expected = try rows(of: replicas[0], table: "notes")
        let expectedEntries = try liveEntries(replicas[0])
        for replica in replicas.dropFirst() {
            let actual = try rows(of: replica, table: "notes")
            if actual != expected {
                XCTFail("seed \(seed): \(replica.name) holds \(actual)\nbut r0 holds \(expected)\nlast steps:\n\(history.tail)")
                return
            }
            XCTAssertEqual(try liveEntries(replica), expectedEntries, "seed \(seed): causal lengths differ on \(replica.name)")
        }
        for replica in replicas {
            XCTAssertEqual(try replica.doctor(), [], "seed \(seed): \(replica.name)")
        }
    }

    /// (key, causal length) of every row entry: replicas must agree on each row's lives too.
    private func liveEntries(_ replica: Replica) throws -> [[SQLValue]] {
        try replica.database.valueRows(#"SELECT "pk", "cl" FROM "_sqsync_rows" ORDER BY "pk""#)
    }

    /// One random local write: insert or re-insert, update, delete, or key change.
    private func write(on replica: Replica, index: Int, _ history: inout PropertyHistory) throws {
        let database = replica.database
        let present = Set(try database.valueRows("SELECT id FROM notes").compactMap { $0[0].stringValue })
        let absent = Self.keys.filter { !present.contains($0) }
        if history.chance(5) {
            // A clock running up to 5 s fast: merge must still converge. (A hybrid clock never
            // goes back, so only ever move it forward.)
            let ahead = nowMilliseconds + Int64(history.below(5000))
            try setClock(of: replica, to: max(try clock(of: replica).hlc, ahead))
            history.note("r\(index): clock jumps ahead")
        }
        let roll = history.below(100)
        if present.isEmpty || (roll < 30 && !absent.isEmpty) {
            guard !absent.isEmpty else { return }
            let key = history.pick(absent)
            try database.run(
                "INSERT INTO notes VALUES (?, ?, ?, ?)", .text(key), .text("title \(history.below(50))"),
                .integer(Int64(history.below(1000))), history.value())
            history.note("r\(index): insert \(key)")
        } else if roll < 75 {
            let key = history.pick(present.sorted())
            let columns = ["title", "n", "body"].filter { _ in history.chance(50) }
            guard !columns.isEmpty else { return }
            let values: [SQLValue] = columns.map { column in
                switch column {
                case "title": return .text("title \(history.below(50))")
                case "n": return .integer(Int64(history.below(1000)))
                default: return history.value()
                }
            }
            try database.run(
                "UPDATE notes SET \(columns.map { "\($0) = ?" }.joined(separator: ", ")) WHERE id = ?",
                values + [.text(key)])
            history.note("r\(index): update \(key) \(columns)")
        } else if roll < 92 || absent.isEmpty {
            let key = history.pick(present.sorted())
            try database.run("DELETE FROM notes WHERE id = ?", .text(key))
            history.note("r\(index): delete \(key)")
        } else {
            let old = history.pick(present.sorted()), new = history.pick(absent)
            try database.run("UPDATE notes SET id = ? WHERE id = ?", .text(new), .text(old))
            history.note("r\(index): rename \(old) → \(new)")
        }
    }
}

extension PropertyHistory {
    /// A value of any storage class, for a column without a declared type.
    mutating func value() -> SQLValue {
        switch below(6) {
        case 0: return .null
        case 1: return .integer(Int64(bitPattern: random.next()))
        case 2: return .real(Double(below(1_000_000)) / 7.0)
        case 3: return .text("t\(below(100))-é")
        case 4: return .blob((0..<below(5)).map { _ in UInt8(truncatingIfNeeded: random.next()) })
        default: return .integer(Int64(below(10)))
        }
    }
}
