import CSSH
import Dispatch
import FoundationEssentials
import Glibc
import Synchronization

/// How to connect to an SSH mailbox. Host keys are always checked; nothing here turns that off.
public struct SSHOptions: Sendable {
    /// The known-hosts file to check the server's key against; `nil` means `~/.ssh/known_hosts`.
    /// Passed to libssh explicitly so the user's `~/.ssh/config` cannot redirect it.
    public var knownHostsFile: String?
    /// Trust on first use: record the key of a host that is not in the file yet. A key that
    /// differs from the recorded one is refused even so.
    public var acceptNewHostKey: Bool
    /// A private key file to log in with; `nil` tries ssh-agent, then `~/.ssh/id_*`.
    public var identityFile: String?
    /// How long connecting, and each wait for the server during a transfer, may take.
    public var timeoutSeconds: Int

    public init(
        knownHostsFile: String? = nil, acceptNewHostKey: Bool = false, identityFile: String? = nil,
        timeoutSeconds: Int = 30
    ) {
        self.knownHostsFile = knownHostsFile
        self.acceptNewHostKey = acceptNewHostKey
        self.identityFile = identityFile
        self.timeoutSeconds = timeoutSeconds
    }

    /// The known-hosts file actually used, with `~` expanded.
    public var resolvedKnownHostsFile: String {
        expandTilde(knownHostsFile ?? "~/.ssh/known_hosts")
    }
}

/// Owns one connected, host-key-checked and authenticated libssh session.
///
/// Not Sendable on purpose: a libssh session must only be used by one thread at a time, and
/// the transport that owns it is used from one task.
final class SSHSession {
    let handle: ssh_session
    /// `user@host:port`, the name every message uses.
    let endpoint: String
    let host: String
    let port: Int
    let timeoutSeconds: Int
    /// Bounds every call after `ssh_connect` (whose own timeout works).
    private var watchdog: Watchdog?

    init(target: SSHTarget, options: SSHOptions) throws {
        guard let handle = ssh_new() else {
            throw TransportError(.connection, "\(target.host): ssh_new failed (out of memory)")
        }
        self.handle = handle
        self.timeoutSeconds = max(1, options.timeoutSeconds)
        let hostPart = target.host.contains(":") ? "[\(target.host)]" : target.host
        self.endpoint = "\(target.user.map { "\($0)@" } ?? "")\(hostPart):\(target.port)"
        self.host = target.host
        self.port = target.port

        let knownHosts = options.resolvedKnownHostsFile
        try check("ssh_options_set(HOST)") { sqsync_ssh_set_string(handle, SSH_OPTIONS_HOST, target.host) }
        if let user = target.user {
            try check("ssh_options_set(USER)") { sqsync_ssh_set_string(handle, SSH_OPTIONS_USER, user) }
        }
        try check("ssh_options_set(PORT)") { sqsync_ssh_set_port(handle, UInt32(target.port)) }
        try check("ssh_options_set(PROCESS_CONFIG)") { sqsync_ssh_set_bool(handle, SSH_OPTIONS_PROCESS_CONFIG, 0) }
        try check("ssh_options_set(KNOWNHOSTS)") { sqsync_ssh_set_string(handle, SSH_OPTIONS_KNOWNHOSTS, knownHosts) }
        try check("ssh_options_set(TIMEOUT)") { sqsync_ssh_set_timeout(handle, timeoutSeconds) }
        // SFTP in libssh 0.10 waits for each request's answer; with Nagle's algorithm on, every
        // small request after a large write also waits for the peer's delayed ACK (~40 ms).
        try check("ssh_options_set(NODELAY)") { sqsync_ssh_set_int(handle, SSH_OPTIONS_NODELAY, 1) }

        try check("ssh_connect", failure: "cannot connect") { ssh_connect(handle) }
        watchdog = Watchdog(descriptor: ssh_get_fd(handle), seconds: timeoutSeconds)
        try verifyHostKey(knownHosts: knownHosts, acceptNew: options.acceptNewHostKey)
        try authenticate(identityFile: options.identityFile.map(expandTilde))
    }

    deinit {
        watchdog?.stop()
        ssh_disconnect(handle)
        ssh_free(handle)
    }

    // MARK: Checking

    /// The one place where libssh and SFTP results become ``TransportError``s: runs `call`, and
    /// if `failed` says it failed, throws an error naming the endpoint, the C call, the path,
    /// `ssh_get_error` and (for SFTP) the status code. A call cut off by the watchdog, or a
    /// connect that took the whole timeout, is `.timeout`.
    @discardableResult
    func run<T>(
        _ name: String, path: String? = nil, sftp: sftp_session? = nil, failure what: String? = nil,
        allowing allowed: Set<Int32> = [], _ call: () -> T, failed: (T) -> Bool
    ) throws -> (value: T, allowedStatus: Int32?) {
        sftp?.pointee.errnum = SSH_FX_OK  // libssh does not reset it on every call; stale codes would mislead.
        let start = ContinuousClock.now
        let cutEarlier = watchdog?.hasFired ?? false
        let value = bounded(call)
        guard failed(value) else { return (value, nil) }
        let elapsed = ContinuousClock.now - start
        let status = sftp.map { sftp_get_error($0) } ?? SSH_FX_OK
        let connected = ssh_is_connected(handle) != 0
        let timedOut = watchdog?.hasFired ?? (elapsed >= .seconds(timeoutSeconds) - .milliseconds(200))
        if connected, !timedOut, status != SSH_FX_OK, allowed.contains(status) { return (value, status) }

        var text = "\(endpoint): \(what ?? "\(name) failed")"
        if let path { text += " for \(path)" }
        if timedOut {
            let when = cutEarlier ? "connection already cut: an earlier call got" : "got"
            text = "\(endpoint): \(when) no answer within \(timeoutSeconds) s (\(name)\(path.map { " \($0)" } ?? ""))"
        }
        var details = [name]
        if let message = sshErrorMessage() { details.append(message) }
        if status != SSH_FX_OK { details.append("SFTP status \(status) \(sftpStatusName(status))") }
        text += " [\(details.joined(separator: ": "))]"

        let kind: TransportError.Kind
        if timedOut {
            kind = .timeout
        } else if !connected || status == SSH_FX_CONNECTION_LOST || status == SSH_FX_NO_CONNECTION {
            kind = .connection
        } else {
            kind = sftp == nil && name.hasPrefix("ssh_") ? .connection : .io
        }
        throw TransportError(kind, text)
    }

    /// `run` for libssh calls that return a negative code on failure.
    @discardableResult
    func check(
        _ name: String, path: String? = nil, sftp: sftp_session? = nil, failure what: String? = nil,
        _ call: () -> Int32
    ) throws -> Int32 {
        try run(name, path: path, sftp: sftp, failure: what, call, failed: { $0 < 0 }).value
    }

    /// `run` for libssh calls that return NULL on failure.
    func check<P>(_ name: String, path: String? = nil, sftp: sftp_session? = nil, _ call: () -> P?) throws -> P {
        guard let value = try run(name, path: path, sftp: sftp, call, failed: { $0 == nil }).value else {
            preconditionFailure("run returned a failed result without throwing")
        }
        return value
    }

    /// Runs a libssh call that waits for the server under the watchdog. Clean-up calls
    /// (closing remote handles) use it directly, since their failures are not reported.
    func bounded<T>(_ call: () -> T) -> T {
        guard let watchdog else { return call() }
        return watchdog.guarding(call)
    }

    private func sshErrorMessage() -> String? {
        guard let raw = ssh_get_error(UnsafeMutableRawPointer(handle)) else { return nil }
        let message = String(cString: raw)
        return message.isEmpty ? nil : message
    }

    // MARK: Host key

    /// Compares the server's key with the known-hosts file (see libssh's
    /// `ssh_session_is_known_server`): only a recorded, matching key lets the session go on.
    private func verifyHostKey(knownHosts: String, acceptNew: Bool) throws {
        let state = try run(
            "ssh_session_is_known_server", path: knownHosts, failure: "cannot check the host key",
            { ssh_session_is_known_server(handle) }, failed: { $0 == SSH_KNOWN_HOSTS_ERROR }
        ).value
        let fingerprint = serverKeyFingerprint()
        switch state {
        case SSH_KNOWN_HOSTS_OK:
            return
        case SSH_KNOWN_HOSTS_UNKNOWN, SSH_KNOWN_HOSTS_NOT_FOUND:
            guard acceptNew else {
                throw TransportError(
                    .hostKeyUnknown,
                    "\(endpoint): host key \(fingerprint) is not in \(knownHosts); if that is the server's key, "
                        + "connect once with --accept-new-host-key to record it")
            }
            let folder = knownHosts.contains("/") ? String(knownHosts[..<knownHosts.lastIndex(of: "/")!]) : ""
            if !folder.isEmpty {
                do {
                    try FileManager.default.createDirectory(
                        atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
                } catch {
                    throw TransportError(.io, "\(endpoint): cannot create \(folder) for the known-hosts file: \(error)")
                }
            }
            endWithNewline(knownHosts)
            try check("ssh_session_update_known_hosts", path: knownHosts, failure: "cannot record the host key") {
                ssh_session_update_known_hosts(handle)
            }
        case SSH_KNOWN_HOSTS_CHANGED, SSH_KNOWN_HOSTS_OTHER:
            let what = state == SSH_KNOWN_HOSTS_CHANGED ? "has CHANGED" : "is of another type than the recorded one"
            let lines = knownHostsLines(in: knownHosts)
            let location =
                lines.isEmpty ? knownHosts : "\(knownHosts) line \(lines.map(String.init).joined(separator: ", "))"
            throw TransportError(
                .hostKeyChanged,
                "\(endpoint): host key \(what) (server offers \(fingerprint)); this could be an attack. "
                    + "Refusing to connect. If the server's key really was replaced, delete the old key at \(location) "
                    + "(ssh-keygen -R '\(knownHostsName)' -f \(knownHosts)) and connect again")
        default:
            throw TransportError(.connection, "\(endpoint): unexpected host-key state \(state.rawValue) from libssh")
        }
    }

    /// libssh appends its line without looking at how the file ends; a hand-edited file
    /// missing its final newline would get the new entry glued onto its last line.
    /// Best effort: if this fails, libssh's own write reports the problem.
    private func endWithNewline(_ file: String) {
        let descriptor = open(file, O_RDWR | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        defer { close(descriptor) }
        var last: UInt8 = 0
        let end = lseek(descriptor, 0, SEEK_END)
        guard end > 0, pread(descriptor, &last, 1, end - 1) == 1, last != UInt8(ascii: "\n") else { return }
        var newline = UInt8(ascii: "\n")
        _ = write(descriptor, &newline, 1)
    }

    /// The name known_hosts files use for this server: `host`, or `[host]:port` off port 22.
    private var knownHostsName: String {
        port == 22 ? host : "[\(host)]:\(port)"
    }

    /// Line numbers of plain (unhashed) entries for this server, so the message can point at them.
    private func knownHostsLines(in file: String) -> [Int] {
        guard let text = try? String(contentsOfFile: file, encoding: .utf8) else { return [] }
        let name = knownHostsName
        return text.split(separator: "\n", omittingEmptySubsequences: false).enumerated().compactMap { index, line in
            var fields = line.split(separator: " ", omittingEmptySubsequences: true)
            if fields.first?.hasPrefix("@") == true { fields.removeFirst() }
            guard let hosts = fields.first else { return nil }
            return hosts.split(separator: ",").contains { $0 == name } ? index + 1 : nil
        }
    }

    /// `ED25519 SHA256:…`, as `ssh` prints it, so the user can compare it with the server's.
    private func serverKeyFingerprint() -> String {
        var key: ssh_key?
        guard ssh_get_server_publickey(handle, &key) == SSH_OK, let key else { return "(unavailable)" }
        defer { ssh_key_free(key) }
        var hash: UnsafeMutablePointer<UInt8>?
        var length = 0
        guard ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &length) == 0, hash != nil else {
            return "(unavailable)"
        }
        defer { ssh_clean_pubkey_hash(&hash) }
        guard let text = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, length) else {
            return "(unavailable)"
        }
        defer { ssh_string_free_char(text) }
        let type = ssh_key_type_to_char(ssh_key_type(key)).map { String(cString: $0) } ?? "key"
        return "\(type) \(String(cString: text))"
    }

    // MARK: Authentication

    /// Logs in with the given key file (imported here, which is predictable, rather than given
    /// to `_auto`, which only sees keys set before connecting), or with ssh-agent and `~/.ssh/id_*`.
    private func authenticate(identityFile: String?) throws {
        let user = userName()
        let result: Int32
        let tried: String
        if let identityFile {
            var key: ssh_key?
            guard ssh_pki_import_privkey_file(identityFile, nil, nil, nil, &key) == SSH_OK, let key else {
                throw TransportError(
                    .authentication,
                    "\(endpoint): cannot read the private key \(identityFile) (missing, not a key, or protected by a "
                        + "passphrase: load such a key into ssh-agent instead)")
            }
            defer { ssh_key_free(key) }
            result = try run(
                "ssh_userauth_publickey", failure: "authentication failed",
                { ssh_userauth_publickey(handle, nil, key) }, failed: { $0 == SSH_AUTH_ERROR.rawValue }
            ).value
            tried = "the key \(identityFile)"
        } else {
            result = try run(
                "ssh_userauth_publickey_auto", failure: "authentication failed",
                { ssh_userauth_publickey_auto(handle, nil, nil) }, failed: { $0 == SSH_AUTH_ERROR.rawValue }
            ).value
            tried = "the keys from ssh-agent and ~/.ssh/id_*"
        }
        switch result {
        case SSH_AUTH_SUCCESS.rawValue:
            return
        case SSH_AUTH_DENIED.rawValue, SSH_AUTH_PARTIAL.rawValue:
            throw TransportError(
                .authentication,
                "\(endpoint): the server refused \(tried) for user \(user); give a key with --ssh-key FILE")
        default:
            throw TransportError(.authentication, "\(endpoint): unexpected result \(result) from libssh authentication")
        }
    }

    private func userName() -> String {
        var raw: UnsafeMutablePointer<CChar>?
        guard ssh_options_get(handle, SSH_OPTIONS_USER, &raw) == SSH_OK, let raw else { return "(unknown)" }
        defer { ssh_string_free_char(raw) }
        return String(cString: raw)
    }
}

/// Owns the SFTP channel of a session. Holds the ``SSHSession`` strongly, so the order libssh
/// needs is kept: `sftp_free` here first, then the session's `ssh_disconnect` and `ssh_free`.
///
/// Not Sendable on purpose, like ``SSHSession``.
final class SFTPSession {
    let ssh: SSHSession
    let handle: sftp_session

    init(_ ssh: SSHSession) throws {
        self.ssh = ssh
        handle = try ssh.check("sftp_new") { sftp_new(ssh.handle) }
        try ssh.check("sftp_init", sftp: handle, failure: "cannot start SFTP (is the sftp subsystem enabled?)") {
            sftp_init(handle)
        }
    }

    deinit {
        sftp_free(handle)
    }

    @discardableResult
    func check(_ name: String, path: String, _ call: () -> Int32) throws -> Int32 {
        try ssh.check(name, path: path, sftp: handle, call)
    }

    func check<P>(_ name: String, path: String, _ call: () -> P?) throws -> P {
        try ssh.check(name, path: path, sftp: handle, call)
    }

    /// Like `check`, but returns the SFTP status instead of throwing when it is one of `allowed`
    /// (for "already gone" or "already there", which callers accept).
    @discardableResult
    func run<T>(
        _ name: String, path: String, allowing allowed: Set<Int32> = [], _ call: () -> T, failed: (T) -> Bool
    ) throws -> (value: T, allowedStatus: Int32?) {
        try ssh.run(name, path: path, sftp: handle, allowing: allowed, call, failed: failed)
    }
}

/// Expands a leading `~/` with the home folder, as a shell would have.
func expandTilde(_ path: String) -> String {
    guard path == "~" || path.hasPrefix("~/") else { return path }
    let home = ProcessInfo.processInfo.environment["HOME"] ?? FileManager.default.homeDirectoryForCurrentUser.path
    return home + path.dropFirst()
}

/// Cuts the connection when one libssh call waits longer than the timeout.
///
/// libssh 0.10 honours `SSH_OPTIONS_TIMEOUT` while connecting, but its SFTP layer retries
/// forever when a connected server stops answering. The watchdog shuts the socket down (it
/// does not close it: libssh owns the descriptor), which makes the waiting call fail at once
/// and every later one too. It only acts while a call is running, so it never touches the
/// descriptor after libssh has closed it.
///
/// `@unchecked Sendable`: its timer runs on a dispatch queue, and all its state is guarded
/// by `lock`.
private final class Watchdog: @unchecked Sendable {
    private let descriptor: Int32
    private let limit: Duration
    private let timer: DispatchSourceTimer
    private let lock = Mutex(())
    private var deadline: ContinuousClock.Instant?
    private var fired = false

    init(descriptor: Int32, seconds: Int) {
        self.descriptor = descriptor
        limit = .seconds(seconds)
        timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "sqsync.ssh-watchdog"))
        let tick = DispatchTimeInterval.milliseconds(min(1000, seconds * 250))
        timer.schedule(deadline: .now() + tick, repeating: tick, leeway: .milliseconds(50))
        timer.setEventHandler { [weak self] in self?.check() }
        timer.resume()
    }

    var hasFired: Bool { lock.withLock { _ in fired } }

    func guarding<T>(_ call: () -> T) -> T {
        lock.withLock { _ in deadline = .now + limit }
        defer { lock.withLock { _ in deadline = nil } }
        return call()
    }

    func stop() {
        timer.cancel()
        lock.withLock { _ in deadline = nil }
    }

    private func check() {
        lock.withLock { _ in
            guard let deadline, !fired, ContinuousClock.now >= deadline, descriptor >= 0 else { return }
            fired = true
            _ = shutdown(descriptor, Int32(SHUT_RDWR))
        }
    }
}
