import Bundle
import ChangeLog
import Foundation
import SQLiteDatabase

/// What relays cost (docs/BUNDLE_FORMAT.md, "What a relay keeps"): a replica that joins late
/// catching up every row from one peer that relays them, against the origin's own bundle
/// imported the same way; and what a relay keeps of an origin after many rounds of updates,
/// against the table's own bytes.
enum RelayBench {
    static func run(folder: String, keys: [String]) throws {
        print("Relays (every change reaches every replica, docs/BUNDLE_FORMAT.md)")
        try lateJoiner(folder: folder, keys: keys)
        try storage(folder: folder, keys: keys, label: "10 rounds, every row updated", rounds: 10) { keys, _ in keys }
        try storage(folder: folder, keys: keys, label: "50 rounds, a random 10% updated", rounds: 50) { keys, generator in
            (0..<(keys.count / 10)).map { _ in keys[Int(generator.next() % UInt64(keys.count))] }
        }
        print("")
    }

    struct Member {
        let replica: Replica
        let key: SigningKey
    }

    /// A replica made with `init` and the bench's table, its knowledge ID made from its key.
    static func member(_ folder: String, _ name: String) throws -> Member {
        let key = SigningKey.generate(comment: name)
        _ = try Bench.openDatabase(folder + "/\(name).db")
        let replica = try Replica.initialize(
            path: folder + "/\(name).db", name: name, knowledgeID: ReplicaIdentity.knowledgeID(for: key.publicKey)
        ).replica
        _ = try replica.track(["items"], allowIntegerPrimaryKey: false)
        return Member(replica: replica, key: key)
    }

    static func trust(_ members: [Member]) throws -> AllowedSigners {
        try AllowedSigners(
            text: members.enumerated().map { AllowedSigners.line(principal: "m\($0.offset)", key: $0.element.key.publicKey) }
                .joined(separator: "\n") + "\n")
    }

    /// `from` exports what `to` lacks, `to` imports it; the seconds the import took.
    @discardableResult
    static func send(_ from: Member, _ to: Member, trust: AllowedSigners, folder: String) throws -> Double {
        let path = folder + "/relay-\(UUID().uuidString.prefix(8)).sqsb"
        defer { try? FileManager.default.removeItem(atPath: path) }
        _ = try BundleExchange.export(
            replica: from.replica, since: try to.replica.knowledge(), key: from.key, to: path, intoDirectory: false,
            receiver: to.replica.knowledgeID)
        return try Bench.time { _ = try BundleExchange.importBundle(path: path, into: to.replica, trust: trust) }
    }

    static func lateJoiner(folder: String, keys: [String]) throws {
        let origin = try member(folder, "relay-origin"), relay = try member(folder, "relay-relay")
        let direct = try member(folder, "relay-direct"), joiner = try member(folder, "relay-joiner")
        let trust = try trust([origin, relay, direct, joiner])
        try Bench.insertAll(origin.replica.database, keys: keys)
        let fromOrigin = try send(origin, direct, trust: trust, folder: folder)
        try send(origin, relay, trust: trust, folder: folder)
        let fromRelay = try send(relay, joiner, trust: trust, folder: folder)
        let rows = try joiner.replica.database.int64("SELECT count(*) FROM items")
        Bench.line(
            "  late joiner via a relay", Bench.rate(keys.count, fromOrigin),
            Bench.rate(Int(rows), fromRelay), fromOrigin / fromRelay, "the origin's own bundle's import rate")
    }

    static func storage(
        folder: String, keys: [String], label: String, rounds: Int, pick: ([String], inout SystemRandomNumberGenerator) -> [String]
    ) throws {
        let name = "relay-\(rounds)"
        let origin = try member(folder, name + "-origin"), relay = try member(folder, name + "-relay")
        let trust = try trust([origin, relay])
        try Bench.insertAll(origin.replica.database, keys: keys)
        try send(origin, relay, trust: trust, folder: folder)
        var generator = SystemRandomNumberGenerator()
        for round in 1...rounds {
            let chosen = pick(keys, &generator)
            try origin.replica.database.inTransaction {
                let update = try origin.replica.database.statement("UPDATE items SET qty = ?, note = ? WHERE id = ?")
                for key in chosen {
                    try update.bind([.integer(Int64(round)), .text("round \(round)"), .text(key)])
                    try update.run()
                }
            }
            try send(origin, relay, trust: trust, folder: folder)
        }
        let kept = try relay.replica.database.int64(#"SELECT coalesce(sum(length("bytes")), 0) FROM "_sqsync_segments""#)
        let table = try Bench.sizes(relay.replica.database).data
        print(
            "  relay storage, " + label.padding(toLength: 33, withPad: " ", startingAt: 0)
                + String(
                    format: "kept %6.1f MB, table %6.1f MB   %5.2fx the table (target <= 1.0x)", Double(kept) / 1e6,
                    Double(table) / 1e6, Double(kept) / Double(table)))
    }
}
