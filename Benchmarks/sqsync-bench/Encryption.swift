import Bundle
import ChangeLog
import Foundation

/// What encryption adds to a bundle's trip: export then import of the same 100k inserts, in
/// the clear and encrypted to a reader's key (age, docs/BUNDLE_FORMAT.md), alternating, each
/// into a fresh clone; the medians are compared.
enum Encryption {
    static func run(folder: String, keys: [String]) throws {
        let writerKey = SigningKey.generate(comment: "writer"), readerKey = SigningKey.generate(comment: "reader")
        let trust = try AllowedSigners(
            text: [AllowedSigners.line(principal: "writer", key: writerKey.publicKey), AllowedSigners.line(principal: "reader", key: readerKey.publicKey)]
                .joined(separator: "\n"))
        let source = try Bench.tracked(folder + "/crypt-source.db", name: "source")
        let trials = max(3, Bench.repeats)
        let targets = try (0..<(2 * trials)).map { try source.clone(to: folder + "/crypt-target-\($0).db", name: "t\($0)") }
        try Bench.insertAll(source.database, keys: keys)
        var clear: [Double] = [], sealed: [Double] = []
        var bytes = (clear: 0, sealed: 0)
        for trial in 0..<trials {
            for encrypted in [trial % 2 == 1, trial % 2 == 0] {
                let target = targets[2 * trial + (encrypted ? 1 : 0)]
                let path = folder + "/crypt-\(trial)-\(encrypted).sqsb"
                var size = 0
                let seconds = try Bench.time {
                    size = try BundleExchange.export(
                        replica: source, since: try target.knowledge(), key: writerKey, to: path, intoDirectory: false,
                        encryptTo: encrypted ? [readerKey.publicKey] : []
                    ).bytes
                    _ = try BundleExchange.importBundle(path: path, into: target, trust: trust, decryptingWith: readerKey)
                }
                guard try target.database.int64(#"SELECT count(*) FROM "items""#) == Int64(keys.count) else {
                    throw BenchError("the \(encrypted ? "encrypted" : "clear") bundle did not carry every row")
                }
                if encrypted {
                    sealed.append(seconds)
                    bytes.sealed = size
                } else {
                    clear.append(seconds)
                    bytes.clear = size
                }
                try? FileManager.default.removeItem(atPath: path)
            }
        }
        let median = { (values: [Double]) in values.sorted()[values.count / 2] }
        Bench.line(
            "  export+import \(keys.count) inserts, s", String(format: "%11.3f", median(clear)), String(format: "%9.3f", median(sealed)),
            median(sealed) / median(clear), "encrypted (age) against in the clear, median of \(trials)")
        Bench.line(
            "  encrypted bundle, bytes", String(format: "%11d", bytes.clear), String(format: "%9d", bytes.sealed),
            Double(bytes.sealed) / Double(bytes.clear), "of the bundle in the clear")
    }
}
