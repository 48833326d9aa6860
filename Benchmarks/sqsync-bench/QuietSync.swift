import Bundle
import ChangeLog
import Foundation
import Transport

/// A sync with nothing new, through a folder mailbox that many replicas share: what a cron
/// job at a quiet site pays every ten minutes.
enum QuietSync {
    static func run(folder: String) throws {
        print("Quiet sync (nothing new) through a folder shared by N replicas")
        var times: [Int: Double] = [:]
        for count in [10, 100] {
            times[count] = try measure(folder: folder + "/quiet-\(count)", replicas: count)
            print(String(format: "  %3d replicas: %.3f s (median of 5)", count, times[count]!))
        }
        if let small = times[10], let large = times[100] {
            print(String(format: "  100 / 10 replicas: %.2fx the time\n", large / small))
        }
    }

    static func measure(folder: String, replicas count: Int) throws -> Double {
        try FileManager.default.createDirectory(atPath: folder + "/mailbox", withIntermediateDirectories: true)
        // Every replica signs with its own key (docs/KEYS.md).
        let keys = (0..<count).map { SigningKey.generate(comment: "r\($0)") }
        let trust = try AllowedSigners(
            text: keys.enumerated().map { AllowedSigners.line(principal: "r\($0.offset)", key: $0.element.publicKey) }
                .joined(separator: "\n"))
        let origin = try Bench.tracked(folder + "/r0.db", name: "r0")
        try Bench.insertAll(origin.database, keys: (0..<100).map { _ in UUID().uuidString.lowercased() })
        var replicas = [origin]
        for index in 1..<count { replicas.append(try origin.clone(to: folder + "/r\(index).db", name: "r\(index)")) }
        let mailbox = Mailbox(transport: DirectoryTransport(root: folder + "/mailbox"))
        // Two rounds: every replica has read every other's acknowledgement and bundle.
        for _ in 0..<2 {
            for (index, replica) in replicas.enumerated() {
                _ = try mailbox.sync(replica: replica, key: keys[index], trust: trust)
            }
        }
        var samples: [Double] = []
        for _ in 0..<5 {
            samples.append(
                try Bench.time { _ = try mailbox.sync(replica: replicas[count / 2], key: keys[count / 2], trust: trust) })
        }
        return samples.sorted()[samples.count / 2]
    }
}
