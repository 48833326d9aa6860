import FoundationEssentials
import Glibc

/// Another sqsync process is syncing this database (SPEC exit code 4).
public struct SyncLockError: Error, CustomStringConvertible {
    public var description: String
}

/// A per-database lock, so overlapping cron runs do not collide. It is an `flock` on a
/// file beside the database: the kernel drops it when the holder exits or is killed.
/// Not Sendable on purpose: it belongs to the process section that holds it.
public final class SyncLock {
    private let descriptor: Int32

    public init(database path: String) throws {
        let lockPath = path + ".sqsync-lock"
        let candidate = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard candidate >= 0 else {
            throw TransportError(.io, "\(lockPath): cannot open the sync lock: \(String(cString: strerror(errno)))")
        }
        var result: Int32
        repeat { result = flock(candidate, LOCK_EX | LOCK_NB) } while result != 0 && errno == EINTR
        if result != 0 {
            let busy = errno == EWOULDBLOCK
            let reason = String(cString: strerror(errno))
            close(candidate)
            if busy { throw SyncLockError(description: "\(path): another sqsync process is syncing this database; try again later") }
            throw TransportError(.io, "\(lockPath): cannot take the sync lock: \(reason)")
        }
        descriptor = candidate
    }

    deinit {
        flock(descriptor, LOCK_UN)
        close(descriptor)
    }
}
