import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// What a child process printed and how it ended.
public struct SpawnedOutput: Sendable {
    /// The exit code, or the signal's number when a signal ended it (as `Process` reports it).
    public var status: Int32
    public var stdout: Data
    public var stderr: Data
}

/// Runs a program to its end with `posix_spawn` and `waitpid`.
///
/// Foundation's `Process.waitUntilExit` on Linux polls its run loop every 50 ms, so each child
/// costs up to 50 ms of idle waiting after it exits: the end-to-end suites start thousands of
/// short `sqsync` and `sqlite3` processes, and spent about a third of their time there. Its
/// reaper waits only for the processes it started, so these children are this function's own.
public func spawnAndWait(
    _ executable: String, _ arguments: [String], environment: [String: String],
    input: Data? = nil, currentDirectory: String? = nil
) throws -> SpawnedOutput {
    // A child that exits before reading its input must not end the test process.
    signal(SIGPIPE, SIG_IGN)
    var stdinPipe: [Int32] = [-1, -1], stdoutPipe: [Int32] = [-1, -1], stderrPipe: [Int32] = [-1, -1]
    guard pipe(&stdinPipe) == 0, pipe(&stdoutPipe) == 0, pipe(&stderrPipe) == 0 else {
        throw SpawnError("pipe: \(String(cString: strerror(errno)))")
    }
    // No child but this one may hold these: another's open write end would keep a reader waiting.
    for fd in stdinPipe + stdoutPipe + stderrPipe { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_adddup2(&actions, stdinPipe[0], 0)
    posix_spawn_file_actions_adddup2(&actions, stdoutPipe[1], 1)
    posix_spawn_file_actions_adddup2(&actions, stderrPipe[1], 2)
    // Glibc's module lacks posix_spawn_file_actions_addchdir_np: env changes the folder instead.
    let program = currentDirectory == nil ? executable : "/usr/bin/env"
    let words = currentDirectory.map { ["/usr/bin/env", "--chdir=\($0)", executable] } ?? [executable]
    let argv = (words + arguments).map { strdup($0) } + [nil]
    let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer {
        for pointer in argv { free(pointer) }
        for pointer in envp { free(pointer) }
    }
    var pid: pid_t = 0
    let spawned = posix_spawn(&pid, program, &actions, nil, argv, envp)
    for fd in [stdinPipe[0], stdoutPipe[1], stderrPipe[1]] { close(fd) }
    guard spawned == 0 else {
        for fd in [stdinPipe[1], stdoutPipe[0], stderrPipe[0]] { close(fd) }
        throw SpawnError("\(executable): \(String(cString: strerror(spawned)))")
    }

    // Both outputs drain while stdin is fed, so a chatty child never blocks on a full pipe.
    let outBox = DataReader(stdoutPipe[0]), errBox = DataReader(stderrPipe[0])
    let group = DispatchGroup()
    for reader in [outBox, errBox] { DispatchQueue.global().async(group: group) { reader.readToEnd() } }
    if let input {
        input.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let written = write(stdinPipe[1], raw.baseAddress! + offset, raw.count - offset)
                if written < 0 { if errno == EINTR { continue } else { break } }
                offset += written
            }
        }
    }
    close(stdinPipe[1])
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    group.wait()
    let exitCode = (status & 0x7f) == 0 ? (status >> 8) & 0xff : status & 0x7f
    return SpawnedOutput(status: exitCode, stdout: outBox.data, stderr: errBox.data)
}

public struct SpawnError: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}

/// Reads one pipe to its end, then closes it.
private final class DataReader: @unchecked Sendable {
    let descriptor: Int32
    var data = Data()

    init(_ descriptor: Int32) { self.descriptor = descriptor }

    func readToEnd() {
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = read(descriptor, &buffer, buffer.count)
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            data.append(contentsOf: buffer[..<count])
        }
        close(descriptor)
    }
}
