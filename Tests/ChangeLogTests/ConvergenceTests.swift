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
        if history.chance(5) {
            // A clock running up to 5 s fast: merge must still converge. (A hybrid clock never
            // goes back, so only ever move it forward.)
            let ahead = nowMilliseconds + Int64(history.below(5000))
            try setClock(of: replica, to: max(try clock(of: replica).hlc, ahead))
            history.note("r\(index): clock jumps ahead")
        }
        try history.writeNote(in: database, keys: Self.keys, who: "r\(index)", valueKinds: 6) { "title \($0.below(50))" }
    }
}
