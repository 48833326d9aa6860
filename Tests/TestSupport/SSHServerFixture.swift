import Foundation
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

/// A throwaway OpenSSH server on 127.0.0.1, with its own host key, client key, authorized_keys
/// and known_hosts in a temporary folder; no system configuration is read or changed.
///
/// Shared by the transport and end-to-end tests through the TestSupport target.
/// Create it in a test (it throws `XCTSkip` when sshd is missing, or fails the test when the
/// `CI` environment variable is set), use ``url(path:)``, ``clientKeyPath`` and
/// ``knownHostsPath``, and let it go: `deinit` stops the server and removes the folder.
///
/// Not Sendable on purpose: one test owns one server.
public final class SSHServerFixture {
    public static let sshdPath = "/usr/sbin/sshd"
    public static let keygenPath = "/usr/bin/ssh-keygen"

    /// Everything the server and the client use lives here.
    public let directory: URL
    public let port: Int
    public let userName: String
    public let clientKeyPath: String
    /// Holds the server's real key for `[127.0.0.1]:port`.
    public let knownHostsPath: String
    /// `ssh-ed25519 AAAA…` of the server's host key.
    public let hostPublicKey: String
    /// A folder the tests can point the client at and inspect directly (the "remote" side).
    public let remoteDirectory: String
    /// The sshd listener, started with posix_spawn: Foundation's `Process` cannot be used for
    /// sshd, because sshd closes every inherited descriptor, including the one `Process`
    /// watches, after which `Process` blocks in `waitpid` on it and never notices any other
    /// child exiting (later `ssh-keygen` runs then hang).
    private var serverPID: pid_t?

    public init(file: StaticString = #filePath, line: UInt = #line) throws {
        for tool in [Self.sshdPath, Self.keygenPath] where !FileManager.default.isExecutableFile(atPath: tool) {
            let message = "\(tool) is missing (apt-get install openssh-server openssh-client)"
            if ProcessInfo.processInfo.environment["CI"] != nil {
                XCTFail(message, file: file, line: line)
                throw FixtureError(message)
            }
            throw XCTSkip(message)
        }
        let folder = URL(fileURLWithPath: NSTemporaryDirectory())
            .appendingPathComponent("sshd-fixture-\(UUID().uuidString.prefix(8))")
        directory = folder
        remoteDirectory = directory.appendingPathComponent("remote").path
        try FileManager.default.createDirectory(atPath: remoteDirectory, withIntermediateDirectories: true)
        userName = String(cString: getpwuid(geteuid()).pointee.pw_name)

        let hostKey = directory.appendingPathComponent("host_ed25519").path
        try Self.run(Self.keygenPath, ["-q", "-t", "ed25519", "-N", "", "-C", "fixture-host", "-f", hostKey])
        hostPublicKey = try Self.publicKey(hostKey)
        let client = try Self.makeKeyPair(in: directory, named: "client_ed25519")
        clientKeyPath = client.privateKey
        try (client.publicKey + "\n").write(
            to: directory.appendingPathComponent("authorized_keys"), atomically: true, encoding: .utf8)
        try? FileManager.default.createDirectory(atPath: "/run/sshd", withIntermediateDirectories: true)

        var lastLog = ""
        for _ in 0..<5 {
            let candidate = try Self.freePort()
            let started = try Self.start(in: folder, port: candidate, hostKey: hostKey)
            if Self.waitUntilAccepting(port: candidate, while: started) {
                port = candidate
                serverPID = started
                knownHostsPath = directory.appendingPathComponent("known_hosts").path
                try (knownHostsLine + "\n").write(toFile: knownHostsPath, atomically: true, encoding: .utf8)
                return
            }
            lastLog = (try? String(contentsOf: folder.appendingPathComponent("sshd.log"), encoding: .utf8)) ?? ""
        }
        try? FileManager.default.removeItem(at: folder)
        throw FixtureError("sshd did not start: \(lastLog)")
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(at: directory)
    }

    /// `ssh://user@127.0.0.1:port/path`.
    public func url(path: String) -> String {
        "ssh://\(userName)@127.0.0.1:\(port)\(path.hasPrefix("/") ? "" : "/")\(path)"
    }

    /// The known_hosts line for this server's real key.
    public var knownHostsLine: String { "[127.0.0.1]:\(port) \(hostPublicKey)" }

    /// Stops the server and any session processes it forked (SIGTERM, then waits).
    public func stop() {
        guard let pid = serverPID else { return }
        serverPID = nil
        for session in descendants(of: pid) {
            kill(session, SIGCONT)
            kill(session, SIGTERM)
        }
        kill(pid, SIGTERM)
        Self.wait(for: pid)
    }

    /// Freezes every session process (not the listener): the server then accepts TCP and
    /// stays silent, like a host that hangs in the middle of a transfer.
    public func pauseSessions() {
        guard let serverPID else { return }
        for pid in descendants(of: serverPID) { kill(pid, SIGSTOP) }
    }

    public func resumeSessions() {
        guard let serverPID else { return }
        for pid in descendants(of: serverPID) { kill(pid, SIGCONT) }
    }

    /// A new key pair in `folder`; returns the private key path and the public key
    /// (`ssh-ed25519 AAAA…`).
    public static func makeKeyPair(
        in folder: URL, named name: String, type: String = "ed25519"
    ) throws -> (privateKey: String, publicKey: String) {
        let path = folder.appendingPathComponent(name).path
        try run(keygenPath, ["-q", "-t", type, "-N", "", "-C", name, "-f", path])
        return (path, try publicKey(path))
    }

    /// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then closed).
    public static func freePort() throws -> Int {
        let (fd, port) = try listeningSocket()
        close(fd)
        return port
    }

    /// A socket listening on 127.0.0.1 that never accepts or writes: the kernel completes the
    /// TCP handshake, so a client sees a host that answers and then says nothing.
    public static func listeningSocket() throws -> (fd: Int32, port: Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw FixtureError("socket failed: errno \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && listen(fd, 16) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard ok else {
            close(fd)
            throw FixtureError("bind/listen on 127.0.0.1 failed: errno \(errno)")
        }
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }

    // MARK: Private

    private static func start(in directory: URL, port: Int, hostKey: String) throws -> pid_t {
        let dir = directory.path
        let config = """
            Port \(port)
            ListenAddress 127.0.0.1
            HostKey \(hostKey)
            PidFile \(dir)/sshd.pid
            AuthorizedKeysFile \(dir)/authorized_keys
            StrictModes no
            UsePAM no
            PermitRootLogin prohibit-password
            PubkeyAuthentication yes
            PasswordAuthentication no
            KbdInteractiveAuthentication no
            Subsystem sftp internal-sftp

            """
        let configPath = "\(dir)/sshd_config"
        try config.write(toFile: configPath, atomically: true, encoding: .utf8)
        return try spawn(sshdPath, ["-D", "-e", "-f", configPath], stderr: "\(dir)/sshd.log")
    }

    /// Polls with TCP connects for up to `seconds`; false if the server exited first (say, port taken).
    static func waitUntilAccepting(port: Int, while pid: pid_t, seconds: Double = 10) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid { return false }
            if canConnect(port: port) { return true }
            usleep(20_000)
        }
        kill(pid, SIGTERM)
        wait(for: pid)
        return false
    }

    private static func canConnect(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }

    private static func publicKey(_ privateKey: String) throws -> String {
        let line = try String(contentsOfFile: privateKey + ".pub", encoding: .utf8)
        return line.split(separator: " ").prefix(2).joined(separator: " ")
    }

    private static func run(_ executable: String, _ arguments: [String]) throws {
        let status = wait(for: try spawn(executable, arguments, stderr: "/dev/null"))
        guard status == 0 else {
            throw FixtureError("\(executable) \(arguments.joined(separator: " ")) exited with status \(status)")
        }
    }

    /// Starts `executable` with stdin and stdout on /dev/null and stderr appended to `stderr`.
    static func spawn(_ executable: String, _ arguments: [String], stderr: String) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, stderr, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, executable, &actions, nil, argv, environ)
        guard result == 0 else { throw FixtureError("cannot start \(executable): error \(result)") }
        return pid
    }

    /// Waits for a child to exit and returns its exit status (or 128 + signal).
    @discardableResult
    static func wait(for pid: pid_t) -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            if errno != EINTR { return -1 }
        }
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }

    /// Processes below `root`, read from /proc (Linux), deepest first.
    private func descendants(of root: Int32) -> [Int32] {
        var children: [Int32: [Int32]] = [:]
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        for entry in entries {
            guard let pid = Int32(entry),
                let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { continue }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 1, let parent = Int32(fields[1]) { children[parent, default: []].append(pid) }
        }
        var result: [Int32] = []
        var queue = children[root] ?? []
        while let pid = queue.popLast() {
            result.append(pid)
            queue += children[pid] ?? []
        }
        return result.reversed()
    }
}

public struct FixtureError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
