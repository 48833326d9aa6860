import Bundle
import ChangeLog
import Foundation
import SQLiteDatabase

/// Exporting for a scoped reader (docs/SCOPES.md): a table of `Bench.largeRows` rows in 100
/// labels, a reader whose scope holds one label (1%) and has nothing yet, against exporting
/// the same number of changes without a scope (the same table, after updates to as many rows
/// of every label). Filtering must read the reader's rows through the label's index, not the
/// other 99%.
enum ScopeBench {
    static let labels = 100

    static func run(folder: String) throws {
        let rows = Bench.largeRows
        let key = SigningKey.generate(comment: "bench-admin")
        let path = folder + "/scoped.db"
        _ = try Bench.openDatabase(path)
        let replica = try Replica.initialize(path: path, name: "hq").replica
        try replica.database.execute("ALTER TABLE items ADD COLUMN region TEXT")
        try replica.track(["items"], allowIntegerPrimaryKey: false)
        try replica.issueAdminStatement(try SignedAdminStatement.sign(.label(table: "items", expression: "region"), key: key).stored)
        let keys = (0..<rows).map { _ in UUID().uuidString.lowercased() }
        try replica.database.inTransaction {
            let insert = try replica.database.statement("INSERT INTO items VALUES (?, ?, ?, ?, ?, ?, ?)")
            for (index, key) in keys.enumerated() {
                try insert.bind([
                    .text(key), .text("item \(index)"), .integer(Int64(index % 100)), .real(Double(index) * 0.25),
                    .text("note for \(index)"), .integer(1_700_000_000 + Int64(index)), .text("r\(index % labels)"),
                ])
                try insert.run()
            }
        }
        try replica.fold()
        let share = rows / labels
        var scoped: ExportResult!
        var unscoped: ExportResult!
        var scopedTimes: [Double] = [], unscopedTimes: [Double] = []
        for round in 0..<3 {
            scopedTimes.append(
                try Bench.time {
                    scoped = try BundleExchange.export(
                        replica: replica, since: Knowledge(), key: key, to: folder + "/scoped-\(round).sqsb", intoDirectory: false,
                        scope: ["r7"])
                })
            // As many changes, of every label, after what a full reader holds.
            let base = try replica.knowledge()
            try replica.database.inTransaction {
                let update = try replica.database.statement("UPDATE items SET qty = qty + 1 WHERE id = ?")
                for index in stride(from: round, to: rows, by: labels) {
                    try update.bind([.text(keys[index])])
                    try update.run()
                }
            }
            try replica.fold()
            unscopedTimes.append(
                try Bench.time {
                    unscoped = try BundleExchange.export(
                        replica: replica, since: base, key: key, to: folder + "/unscoped-\(round).sqsb", intoDirectory: false)
                })
        }
        let scopedSeconds = scopedTimes.sorted()[1], unscopedSeconds = unscopedTimes.sorted()[1]
        print("Export for a scoped reader (\(rows) rows in \(labels) labels, median of 3)")
        print(
            String(
                format: "  scope of 1 label (%d%%), nothing held yet: %d rows, %.1f ms", 100 / labels, scoped.rows,
                scopedSeconds * 1000))
        print(String(format: "  same number of changes, no scope:     %d rows, %.1f ms", unscoped.rows, unscopedSeconds * 1000))
        print(String(format: "  scoped / unscoped: %.2fx (target: at most 2x; %d rows per label)", scopedSeconds / unscopedSeconds, share))
        print("")
    }
}
