import Foundation
import TestSupport
import XCTest

/// The convergence property, through the CLI: three replicas take random writes from the `sqlite3`
/// shell and swap bundle files in random order (some lost, some duplicated, some late); after a
/// final full exchange every replica holds the same rows. Replica C's writer runs with its wall
/// clock a day behind (faketime), as on a machine with a wrong clock.
///
/// Two seeds by default; `SQSYNC_PROPERTY_SEEDS=N` runs seeds 1...N. `SQSYNC_PROPERTY_STEPS`
/// changes the number of random steps per seed (default 70).
final class ConvergenceCLITests: XCTestCase {
    static let schema = """
        CREATE TABLE items(id TEXT PRIMARY KEY, a TEXT, b INTEGER, c REAL, d BLOB);
        INSERT INTO items VALUES ('k0', 'seed', 0, 0.5, x'00'), ('k1', 'seed', 1, 1.5, NULL), ('k2', NULL, 2, NULL, x'ff');
        """
    static let keys = (0..<10).map { "k\($0)" }

    private struct Bundle {
        var path: String
        var sender: Int
        /// The peer an `export --for` made it for: encrypted to that peer's key alone.
        var reader: Int? = nil
    }

    func testReplicasConvergeUnderRandomExchange() throws {
        let env = ProcessInfo.processInfo.environment
        let seedCount = env["SQSYNC_PROPERTY_SEEDS"].flatMap(Int.init) ?? 2
        let steps = env["SQSYNC_PROPERTY_STEPS"].flatMap(Int.init) ?? 70
        for seed in 1...max(1, seedCount) {
            try runSeed(UInt64(seed), steps: steps)
        }
    }

    // MARK: one seed

    private func runSeed(_ seed: UInt64, steps: Int) throws {
        let h = try Harness()
        var rng = SplitMix64(seed: seed &* 0x1000_0001)
        let names = ["A", "B", "C"]
        var dbs = [try h.makeReplica("A", schema: Self.schema)]
        dbs.append(try h.cloneReplica(dbs[0], as: "B"))
        dbs.append(try h.cloneReplica(dbs[0], as: "C"))
        // heard[x][y]: x has imported a bundle from y, so `export --for y` works on x.
        var heard = [[false, false, false], [true, false, false], [true, false, false]]
        var pool: [Bundle] = []
        var problems: [String] = []
        var log: [String] = []
        let slowClock =
            FileManager.default.isExecutableFile(atPath: "/usr/bin/faketime") ? ["/usr/bin/faketime", "-f", "-1d"] : []
        var counts = (writes: 0, exports: 0, lost: 0, imports: 0, duplicates: 0, late: 0)

        func importBundle(_ bundle: Bundle, into target: Int, step: String) throws {
            let result = try h.sqsync(["import", dbs[target], bundle.path], key: names[target])
            log.append(
                "\(step): import \(names[target]) <- \(URL(fileURLWithPath: bundle.path).lastPathComponent) exit \(result.status)"
            )
            if result.status == 0 {
                heard[target][bundle.sender] = true
            } else {
                problems.append(
                    "seed \(seed) \(step): import into \(names[target]) of \(names[bundle.sender])'s bundle exited \(result.status): \(result.stderr.trimmingCharacters(in: .whitespacesAndNewlines))"
                )
            }
        }

        func export(_ from: Int, extra: [String], step: String) throws -> Bundle? {
            let file = h.path("\(names[from])-\(step).sqsb")
            let result = try h.sqsync(["export", dbs[from], "-o", file] + extra, key: names[from])
            log.append("\(step): export \(names[from]) \(extra.joined(separator: " ")) exit \(result.status)")
            guard result.status == 0 else {
                problems.append(
                    "seed \(seed) \(step): export from \(names[from]) \(extra) exited \(result.status): \(result.stderr)")
                return nil
            }
            let reader = extra.count == 2 ? names.firstIndex(of: extra[1]) : nil
            return Bundle(path: file, sender: from, reader: reader)
        }

        for step in 0..<steps {
            let label = "s\(step)"
            let roll = rng.int(100)
            if roll < 45 {
                let target = rng.int(3)
                let sql = (0..<(1 + rng.int(4))).map { _ in randomStatement(&rng) }.joined(separator: "\n")
                log.append("\(label): write \(names[target]): \(sql.replacingOccurrences(of: "\n", with: " "))")
                // C's writer runs a day behind (when faketime is there): convergence must not care.
                try h.sqlite(dbs[target], sql, prefix: target == 2 ? slowClock : [])
                counts.writes += 1
            } else if roll < 72 {
                let from = rng.int(3)
                var extra: [String] = []
                let known = (0..<3).filter { $0 != from && heard[from][$0] }
                if !known.isEmpty, rng.chance(35) { extra = ["--for", names[rng.pick(known)]] }
                guard let bundle = try export(from, extra: extra, step: label) else { continue }
                counts.exports += 1
                if rng.chance(20) { counts.lost += 1; log.append("\(label): lost"); continue }
                pool.append(bundle)
            } else {
                let target = rng.int(3)
                let candidates = pool.filter { $0.sender != target && ($0.reader ?? target) == target }
                guard !candidates.isEmpty else { continue }
                // Late: one of the oldest bundles; otherwise any.
                let late = candidates.count > 3 && rng.chance(30)
                let bundle = late ? candidates[rng.int(min(3, candidates.count))] : rng.pick(candidates)
                if late { counts.late += 1 }
                try importBundle(bundle, into: target, step: label)
                counts.imports += 1
                if rng.chance(15) {
                    try importBundle(bundle, into: target, step: label + "-again")
                    counts.duplicates += 1
                }
            }
        }

        // Final exchange, twice around: every replica exports everything, every other imports it.
        for round in 0..<2 {
            let bundles = try (0..<3).compactMap { try export($0, extra: [], step: "final\(round)") }
            for target in 0..<3 {
                for bundle in bundles where bundle.sender != target {
                    try importBundle(bundle, into: target, step: "final\(round)")
                }
            }
        }

        let dumps = try dbs.map { try h.dump($0, table: "items", orderBy: "id") }
        let context =
            "seed \(seed): \(counts.writes) write batches, \(counts.exports) exports (\(counts.lost) lost), \(counts.imports) imports (\(counts.duplicates) duplicated, \(counts.late) late)"
        XCTAssertTrue(
            problems.isEmpty,
            "\(context)\n\(problems.count) failed commands, first: \(problems.prefix(3).joined(separator: "\n"))")
        XCTAssertEqual(
            dumps[1], dumps[0],
            "\(context): B differs from A\nA:\n\(dumps[0])B:\n\(dumps[1])\nlog:\n\(log.suffix(25).joined(separator: "\n"))")
        XCTAssertEqual(dumps[2], dumps[0], "\(context): C differs from A\nA:\n\(dumps[0])C:\n\(dumps[2])")
        XCTAssertGreaterThan(counts.writes, 5, context)
        XCTAssertGreaterThan(counts.imports, 3, context)
        for (i, db) in dbs.enumerated() {
            let doctor = try h.sqsync(["doctor", db])
            XCTAssertEqual(doctor.status, 0, "seed \(seed): doctor on \(names[i]): \(doctor.stderr)")
        }
        if ProcessInfo.processInfo.environment["SQSYNC_PROPERTY_VERBOSE"] != nil {
            print("\(context)\nfinal rows:\n\(dumps[0])")
        }
    }

    // MARK: random SQL

    private func randomValue(_ rng: inout SplitMix64, column: Character) -> String {
        if rng.chance(10) { return "NULL" }
        switch column {
        case "a": return rng.pick(["'x'", "'y'", "'it''s'", "'héllo wörld'", "'\(rng.int(1000))'", "''"])
        case "b": return rng.pick(["\(rng.int(100))", "-\(rng.int(1_000_000))", "9223372036854775807", "0"])
        case "c": return rng.pick(["\(Double(rng.int(10_000)) / 7.0)", "-0.25", "1e300", "0.1"])
        default: return "x'" + (0..<rng.int(6)).map { _ in String(format: "%02x", rng.int(256)) }.joined() + "'"
        }
    }

    private func randomStatement(_ rng: inout SplitMix64) -> String {
        let key = "'\(rng.pick(Self.keys))'"
        let row =
            "(\(key), \(randomValue(&rng, column: "a")), \(randomValue(&rng, column: "b")), \(randomValue(&rng, column: "c")), \(randomValue(&rng, column: "d")))"
        switch rng.int(100) {
        case 0..<25:
            return "INSERT OR IGNORE INTO items VALUES \(row);"
        case 25..<35:
            return "INSERT INTO items VALUES \(row) ON CONFLICT(id) DO UPDATE SET b = excluded.b, c = excluded.c;"
        case 35..<40:
            return "INSERT OR REPLACE INTO items VALUES \(row);"
        case 40..<75:
            let column = rng.pick(["a", "b", "c", "d"] as [Character])
            return "UPDATE items SET \(column) = \(randomValue(&rng, column: column)) WHERE id = \(key);"
        case 75..<80:
            return "UPDATE items SET a = \(randomValue(&rng, column: "a")), b = b + 1 WHERE id = \(key);"
        default:
            return "DELETE FROM items WHERE id = \(key);"
        }
    }
}
