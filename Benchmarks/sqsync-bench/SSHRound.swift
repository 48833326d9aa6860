import Bundle
import ChangeLog
import SQLiteDatabase
import Foundation
import Transport

/// A sync round over loopback SSH against a throwaway sshd (PLATFORM.md recipe), started
/// with posix_spawn: sshd closes inherited descriptors, which upsets Foundation's Process.
enum SSHRound {
    static func run(folder: String, changes: Int) throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/sbin/sshd"), getuid() == 0 else {
            print("SSH round: skipped (needs /usr/sbin/sshd and root)\n")
            return
        }
        let dir = folder + "/sshd"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        for name in ["host", "client"] {
            _ = try Bench.spawnMeasured("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", "\(dir)/\(name)"])
        }
        try FileManager.default.copyItem(atPath: "\(dir)/client.pub", toPath: "\(dir)/authorized_keys")
        let port = 20_000 + Int(getpid() % 20_000)
        let hostKey = try String(contentsOfFile: "\(dir)/host.pub", encoding: .utf8).split(separator: " ").prefix(2).joined(
            separator: " ")
        try "[127.0.0.1]:\(port) \(hostKey)\n".write(toFile: "\(dir)/known_hosts", atomically: true, encoding: .utf8)
        try """
        Port \(port)
        ListenAddress 127.0.0.1
        HostKey \(dir)/host
        PidFile \(dir)/sshd.pid
        AuthorizedKeysFile \(dir)/authorized_keys
        StrictModes no
        UsePAM no
        PermitRootLogin prohibit-password
        PubkeyAuthentication yes
        PasswordAuthentication no
        KbdInteractiveAuthentication no
        Subsystem sftp internal-sftp

        """.write(toFile: "\(dir)/sshd_config", atomically: true, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: "/run/sshd", withIntermediateDirectories: true)
        let pid = try Bench.spawn("/usr/sbin/sshd", ["-D", "-e", "-f", "\(dir)/sshd_config"])
        defer {
            kill(pid, SIGTERM)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
        }
        usleep(300_000)

        // Every replica signs with its own key (docs/KEYS.md).
        let key = SigningKey.generate(comment: "bench")
        let targetKey = SigningKey.generate(comment: "bench-target")
        let trust = try AllowedSigners(
            text: AllowedSigners.line(principal: "bench", key: key.publicKey) + "\n"
                + AllowedSigners.line(principal: "bench-target", key: targetKey.publicKey))
        let source = try Bench.tracked(folder + "/ssh-a.db", name: "ssh-a")
        let target = try source.clone(to: folder + "/ssh-b.db", name: "ssh-b")
        try Bench.insertAll(source.database, keys: (0..<changes).map { _ in UUID().uuidString.lowercased() })
        let options = SSHOptions(knownHostsFile: "\(dir)/known_hosts", identityFile: "\(dir)/client", timeoutSeconds: 10)
        let url = "ssh://root@127.0.0.1:\(port)\(dir)/mailbox"
        var connect = 0.0, sendRound = 0.0, receiveRound = 0.0
        try FileManager.default.createDirectory(atPath: "\(dir)/mailbox", withIntermediateDirectories: true)
        var sender: SFTPTransport!
        connect = try Bench.time { sender = try SFTPTransport(target: try SSHTarget(url: url), options: options) }
        sendRound = try Bench.time { _ = try Mailbox(transport: sender).sync(replica: source, key: key, trust: trust) }
        let receiver = try SFTPTransport(target: try SSHTarget(url: url), options: options)
        receiveRound = try Bench.time { _ = try Mailbox(transport: receiver).sync(replica: target, key: targetKey, trust: trust) }
        let applied = try target.database.scalar("SELECT count(*) FROM items")?.int64Value ?? 0

        let bundle = try BundleExchange.export(
            replica: source, since: Knowledge(), key: key, to: folder + "/ssh.sqsb", intoDirectory: false)
        let upload = try Bench.time { try sender.writeFile(from: bundle.path, to: "transfer-probe.sqsb") }
        let download = try Bench.time { try receiver.readFile("transfer-probe.sqsb", to: folder + "/ssh-probe.sqsb") }
        print("SSH sync round over loopback (\(changes) inserted rows, \(bundle.bytes / 1000) kB bundle, libssh SFTP)")
        print(
            String(
                format:
                    "  connect + auth %.2f s; sender sync %.2f s (upload %.2f s); receiver sync %.2f s (download %.2f s); %d rows arrived",
                connect, sendRound, upload, receiveRound, download, applied))
        print(String(format: "  transfer is %.0f%% of the two syncs\n", 100 * (upload + download) / (sendRound + receiveRound)))
    }
}
