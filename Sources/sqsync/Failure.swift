import Bundle
import ChangeLog
import SQLiteDatabase
import FoundationEssentials
import Glibc
import Transport

/// The one place where a library error becomes a message and an exit code (SPEC §3).
struct Failure {
    static let failed: Int32 = 1
    static let usage: Int32 = 2
    static let rejectedBundle: Int32 = 3
    static let locked: Int32 = 4
    static let busy: Int32 = 5

    var message: String
    var exitCode: Int32

    init(message: String, exitCode: Int32) {
        self.message = message
        self.exitCode = exitCode
    }

    /// Nil for errors ArgumentParser reports itself (usage, help).
    init?(_ error: Error) {
        switch error {
        case let error as Failure.Raised:
            self = error.failure
        case let error as BundleError:
            self.init(message: error.description, exitCode: error.kind == .io ? Self.failed : Self.rejectedBundle)
        case let error as ChangeLogError:
            self.init(message: error.description, exitCode: error.kind == .usage ? Self.usage : Self.failed)
        case let error as MergeHeld:
            self.init(message: error.description, exitCode: Self.failed)
        case let error as SQLiteError where error.isBusy:
            let file = error.path.map { "\($0): " } ?? ""
            self.init(
                message:
                    "\(file)busy: an app held a write transaction longer than SQSYNC_BUSY_TIMEOUT (\(Self.seconds(Database.busyTimeoutMilliseconds)) s) allows; the step that waited changed nothing; safe to retry (SQLite: \(error.message))",
                exitCode: Self.busy)
        case let error as SQLiteError:
            // One line: SQLite's own words and code; the SQL stays out of the message.
            let file = error.path.map { "\($0): " } ?? ""
            self.init(message: "\(file)\(error.message) (SQLite error \(error.code))", exitCode: Self.failed)
        case let error as TransportError:
            self.init(message: error.description, exitCode: Self.failed)
        case let error as KeyFormatError:
            self.init(message: error.description, exitCode: Self.failed)
        case let error as SyncLockError:
            self.init(message: error.description, exitCode: Self.locked)
        default:
            return nil
        }
    }

    private static func seconds(_ milliseconds: Int32) -> String {
        milliseconds % 1000 == 0 ? "\(milliseconds / 1000)" : "\(Double(milliseconds) / 1000)"
    }

    /// A failure thrown by a command itself.
    struct Raised: Error {
        var failure: Failure
    }

    static func raise(_ message: String, exitCode: Int32 = failed) -> Raised {
        Raised(failure: Failure(message: message, exitCode: exitCode))
    }
}
