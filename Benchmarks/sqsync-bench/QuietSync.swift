import Bundle
import ChangeLog
import SQLiteDatabase
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
        print(
            "Quiet sync (nothing new) through a folder shared by N replicas; library call: median of 5, command: of 21; 10 and 100 taken in turn")
        // Both mailboxes are made first and then timed in turn, run for run: the machine's
        // speed drifts from one minute to the next by more than the difference measured.
        let small = try prepare(folder: folder + "/quiet-10", replicas: 10)
        let large = try prepare(folder: folder + "/quiet-100", replicas: 100)
        // A cron job's quiet sync comes minutes after the last write, when the folders' times
        // have settled (DirectoryTransport.settledFolderStamps); a sync right after a write lists.
        usleep(200_000)
        var library: [[Double]] = [[], []]
        var unchanged = [0, 0]
        for _ in 0..<5 {
            for (index, setup) in [small, large].enumerated() {
                library[index].append(try Bench.time { if try setup.syncInProcess() { unchanged[index] += 1 } })
            }
        }
        // Process start-up varies more than the sync: the median of 21 runs after a first one.
        var command: [[Double]] = [[], []]
        for _ in 0..<22 {
            for (index, setup) in [small, large].enumerated() { command[index].append(try setup.syncCommand()) }
        }
        let medians = (0..<2).map { index in
            Measured(
                library: library[index].sorted()[2], command: command[index].dropFirst().sorted()[10],
                unchanged: unchanged[index])
        }
        for (count, measured) in zip([10, 100], medians) {
            print(
                String(
                    format: "  %3d replicas: library call %.5f s (%d of 5 stopped at the stamps), `sqsync sync` %.4f s",
                    count, measured.library, measured.unchanged, measured.command))
        }
        print(
            String(
                format: "  100 / 10 replicas: library call %.2fx, `sqsync sync` %.2fx the time\n",
                medians[1].library / medians[0].library, medians[1].command / medians[0].command))
    }

    /// One replica of a mailbox that `count` replicas share, every one of which has read
    /// every other's acknowledgement and bundle.
    struct Setup {
        let replica: Replica
        let key: SigningKey
        let trust: AllowedSigners
        let mailbox: Mailbox
        let arguments: [String]

        /// True when the sync stopped at comparing the mailbox's folder stamps (Mailbox.sync).
        func syncInProcess() throws -> Bool {
            try mailbox.sync(replica: replica, key: key, trust: trust).unchanged
        }

        func syncCommand() throws -> Double {
            let start = DispatchTime.now().uptimeNanoseconds
            let status = try Bench.spawnAndWait(Bench.sqsyncBinary, arguments)
            guard status == 0 else { throw BenchError("sqsync sync exited \(status)") }
            return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        }
    }

    static func prepare(folder: String, replicas count: Int) throws -> Setup {
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
        for _ in 0..<2 {
            for (index, replica) in replicas.enumerated() {
                _ = try mailbox.sync(replica: replica, key: keys[index], trust: trust)
            }
        }
        let measured = count / 2
        let keyPath = folder + "/r\(measured).key", trustPath = folder + "/allowed_signers"
        try keys[measured].write(privateKeyPath: keyPath)
        try (trustText + "\n").write(toFile: trustPath, atomically: true, encoding: .utf8)
        return Setup(
            replica: replicas[measured], key: keys[measured], trust: trust, mailbox: mailbox,
            arguments: ["sync", folder + "/r\(measured).db", folder + "/mailbox", "--key", keyPath, "--trust", trustPath, "-q"])
    }
}
