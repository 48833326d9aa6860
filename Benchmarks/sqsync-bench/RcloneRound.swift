import Bundle
import ChangeLog
import Foundation
import Transport

/// A sync round through an S3 bucket: `moto_server` (PyPI's moto) on loopback, reached by the
/// real `rclone` program, against the same round through a local folder.
enum RcloneRound {
    static func run(folder: String, changes: Int) throws {
        let paths = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map(String.init) + ["/root/.pyenv/shims"]
        guard let moto = paths.map({ "\($0)/moto_server" }).first(where: FileManager.default.isExecutableFile),
            paths.contains(where: { FileManager.default.isExecutableFile(atPath: "\($0)/rclone") })
        else {
            print("rclone S3 round: skipped (needs rclone and moto_server: apt-get install rclone; pip install 'moto[server]')\n")
            return
        }
        let port = 30_000 + Int(getpid() % 20_000)
        // The server logs every request: kept out of the bench's output.
        let pid = try Bench.spawn("/bin/sh", ["-c", "exec \"$0\" -H 127.0.0.1 -p \(port) >/dev/null 2>&1", moto])
        defer {
            kill(pid, SIGTERM)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
        }
        for (name, value) in [
            ("TYPE", "s3"), ("PROVIDER", "Other"), ("ACCESS_KEY_ID", "bench"), ("SECRET_ACCESS_KEY", "bench"),
            ("ENDPOINT", "http://127.0.0.1:\(port)"), ("REGION", "us-east-1"),
        ] {
            setenv("RCLONE_CONFIG_BENCHS3_\(name)", value, 1)
        }
        setenv("AWS_CA_BUNDLE", "", 1)
        let target = try RcloneTarget(url: "rclone:benchs3:bench/mailbox")
        var ready = false
        for _ in 0..<150 where !ready {
            ready = (try? RcloneTransport(target: target, timeoutSeconds: 2, listing: Mailbox.folder)) != nil
            if !ready { usleep(200_000) }
        }
        guard ready else { throw BenchError("moto_server did not answer on port \(port)") }

        let key = SigningKey.generate(comment: "bench")
        let targetKey = SigningKey.generate(comment: "bench-target")
        let trust = try AllowedSigners(
            text: AllowedSigners.line(principal: "bench", key: key.publicKey) + "\n"
                + AllowedSigners.line(principal: "bench-target", key: targetKey.publicKey))
        var rows: [String: Int64] = [:]
        var times: [String: (send: Double, receive: Double, quiet: Double)] = [:]
        for medium in ["folder", "rclone"] {
            let source = try Bench.tracked(folder + "/\(medium)-a.db", name: "\(medium)-a")
            let receiver = try source.clone(to: folder + "/\(medium)-b.db", name: "\(medium)-b")
            try Bench.insertAll(source.database, keys: (0..<changes).map { _ in UUID().uuidString.lowercased() })
            try FileManager.default.createDirectory(atPath: folder + "/\(medium)-mailbox", withIntermediateDirectories: true)
            func transport() throws -> Transport {
                medium == "folder"
                    ? DirectoryTransport(root: folder + "/\(medium)-mailbox") : try RcloneTransport(target: target, listing: Mailbox.folder)
            }
            // Each sync makes its transport, as each `sqsync sync` does.
            let send = try Bench.time { _ = try Mailbox(transport: try transport()).sync(replica: source, key: key, trust: trust) }
            let receive = try Bench.time {
                _ = try Mailbox(transport: try transport()).sync(replica: receiver, key: targetKey, trust: trust)
            }
            for _ in 0..<2 {
                _ = try Mailbox(transport: try transport()).sync(replica: source, key: key, trust: trust)
                _ = try Mailbox(transport: try transport()).sync(replica: receiver, key: targetKey, trust: trust)
            }
            let quiet = try Bench.time { _ = try Mailbox(transport: try transport()).sync(replica: receiver, key: targetKey, trust: trust) }
            rows[medium] = try receiver.database.int64("SELECT count(*) FROM items")
            times[medium] = (send, receive, quiet)
        }
        print("rclone S3 round (\(changes) inserted rows; moto_server on loopback through rclone, against a local folder)")
        print("  medium    sender sync   receiver sync   quiet sync   rows arrived")
        for medium in ["folder", "rclone"] {
            let t = times[medium]!
            print(String(format: "  %-7@   %9.3f s   %11.3f s   %8.3f s   %12lld", medium, t.send, t.receive, t.quiet, rows[medium] ?? 0))
        }
        let folderTimes = times["folder"]!, rcloneTimes = times["rclone"]!
        print(
            String(
                format: "  rclone / folder: sender %.1fx, receiver %.1fx, quiet %.1fx\n", rcloneTimes.send / folderTimes.send,
                rcloneTimes.receive / folderTimes.receive, rcloneTimes.quiet / folderTimes.quiet))
    }
}
