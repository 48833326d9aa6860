import Bundle
import ChangeLog
import Foundation
import Transport

/// A sync with nothing new, through a folder mailbox that many replicas share: what a cron
/// job at a quiet site pays every ten minutes. Measured twice: the library call, and the
/// `sqsync sync` command the cron job runs (process start, key and trust file included).
enum QuietSync {
    struct Measured {
        var library: Double
        var command: Double
        /// Library calls that stopped at comparing the mailbox's folder stamps (Mailbox.sync).
        var unchanged: Int
    }

    static func run(folder: String) throws {
        print("Quiet sync (nothing new) through a folder shared by N replicas; library call: median of 5, command: of 11")
        var times: [Int: Measured] = [:]
        for count in [10, 100] {
            let measured = try measure(folder: folder + "/quiet-\(count)", replicas: count)
            times[count] = measured
            print(
                String(
                    format: "  %3d replicas: library call %.5f s (%d of 5 stopped at the stamps), `sqsync sync` %.4f s",
                    count, measured.library, measured.unchanged, measured.command))
        }
        if let small = times[10], let large = times[100] {
            print(
                String(
                    format: "  100 / 10 replicas: library call %.2fx, `sqsync sync` %.2fx the time\n",
                    large.library / small.library, large.command / small.command))
        }
    }

    static func measure(folder: String, replicas count: Int) throws -> Measured {
        try FileManager.default.createDirectory(atPath: folder + "/mailbox", withIntermediateDirectories: true)
        // Every replica signs with its own key (docs/KEYS.md).
        let keys = (0..<count).map { SigningKey.generate(comment: "r\($0)") }
        let trustText = keys.enumerated().map { AllowedSigners.line(principal: "r\($0.offset)", key: $0.element.publicKey) }
            .joined(separator: "\n")
        let trust = try AllowedSigners(text: trustText)
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
        // A cron job's quiet sync comes minutes after the last write, when the folders' times
        // have settled (DirectoryTransport.settledFolderStamps); a sync right after a write lists.
        usleep(200_000)
        let measured = count / 2
        var library: [Double] = []
        var unchanged = 0
        for _ in 0..<5 {
            library.append(
                try Bench.time {
                    if try mailbox.sync(replica: replicas[measured], key: keys[measured], trust: trust).unchanged {
                        unchanged += 1
                    }
                })
        }
        let keyPath = folder + "/r\(measured).key", trustPath = folder + "/allowed_signers"
        try keys[measured].write(privateKeyPath: keyPath)
        try (trustText + "\n").write(toFile: trustPath, atomically: true, encoding: .utf8)
        // Process start-up varies more than the sync: the median of 11 runs after a first one.
        var command: [Double] = []
        for _ in 0..<12 {
            let start = DispatchTime.now().uptimeNanoseconds
            let status = try Bench.spawnAndWait(
                Bench.sqsyncBinary,
                ["sync", folder + "/r\(measured).db", folder + "/mailbox", "--key", keyPath, "--trust", trustPath, "-q"])
            command.append(Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9)
            guard status == 0 else { throw BenchError("sqsync sync exited \(status)") }
        }
        return Measured(library: library.sorted()[2], command: command.dropFirst().sorted()[5], unchanged: unchanged)
    }
}
