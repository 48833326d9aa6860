import FoundationEssentials
import Glibc

/// A program run with its standard output and error on pipes and its standard input on
/// /dev/null: posix_spawn, so sqsync needs no more than FoundationEssentials (whose size
/// matters on a USB stick). Owns the pipes' descriptors; ``wait()`` or ``stop()`` reaps it.
final class ChildProcess {
    enum Stream { case output, error }

    private let pid: pid_t
    private var output: Int32
    private var errors: Int32
    private var reaped = false

    init(_ executable: String, _ arguments: [String]) throws {
        var outputPipe: [Int32] = [-1, -1], errorPipe: [Int32] = [-1, -1]
        guard pipe(&outputPipe) == 0 else { throw Self.failure(executable, "pipe") }
        guard pipe(&errorPipe) == 0 else {
            close(outputPipe[0])
            close(outputPipe[1])
            throw Self.failure(executable, "pipe")
        }
        // Not inherited by other children (the copies on 1 and 2 are made in the child).
        for descriptor in outputPipe + errorPipe { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, outputPipe[1], 1)
        posix_spawn_file_actions_adddup2(&actions, errorPipe[1], 2)
        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var child: pid_t = 0
        let spawned = posix_spawn(&child, executable, &actions, nil, argv, environ)
        close(outputPipe[1])
        close(errorPipe[1])
        guard spawned == 0 else {
            close(outputPipe[0])
            close(errorPipe[0])
            throw TransportError(.connection, "\(executable): cannot run it: \(String(cString: strerror(spawned)))")
        }
        pid = child
        output = outputPipe[0]
        errors = errorPipe[0]
    }

    deinit {
        closePipes()
        if !reaped { _ = stop() }
    }

    private static func failure(_ executable: String, _ call: String) -> TransportError {
        TransportError(.connection, "\(executable): cannot run it: \(call): \(String(cString: strerror(errno)))")
    }

    /// Reads both pipes as the child writes them until both end, handing each chunk to
    /// `consume`; stops reading (and returns) as soon as `consume` returns false.
    func readUntilEnd(_ consume: (Stream, [UInt8]) throws -> Bool) throws {
        var buffer = [UInt8](repeating: 0, count: 65536)
        while output >= 0 || errors >= 0 {
            var watched = [pollfd(fd: output, events: Int16(POLLIN), revents: 0), pollfd(fd: errors, events: Int16(POLLIN), revents: 0)]
            let ready = poll(&watched, 2, -1)
            if ready < 0 {
                if errno == EINTR { continue }
                throw TransportError(.io, "reading from a child program: poll: \(String(cString: strerror(errno)))")
            }
            for (index, stream) in [(0, Stream.output), (1, Stream.error)] where watched[index].fd >= 0 && watched[index].revents != 0 {
                let count = buffer.withUnsafeMutableBytes { read(watched[index].fd, $0.baseAddress, $0.count) }
                if count < 0 && errno == EINTR { continue }
                if count <= 0 {
                    close(watched[index].fd)
                    if stream == .output { output = -1 } else { errors = -1 }
                    continue
                }
                if try !consume(stream, Array(buffer[0..<count])) { return }
            }
        }
    }

    /// Waits for the child to end; its exit status (128 + the signal's number when a signal
    /// ended it).
    func wait() -> Int32 {
        closePipes()
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        reaped = true
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }

    /// Ends the child (SIGTERM) and reaps it.
    @discardableResult
    func stop() -> Int32 {
        if !reaped { kill(pid, SIGTERM) }
        return reaped ? -1 : wait()
    }

    private func closePipes() {
        for descriptor in [output, errors] where descriptor >= 0 { close(descriptor) }
        output = -1
        errors = -1
    }
}
