import Foundation
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

/// A throwaway S3-compatible server on 127.0.0.1 (`moto_server`, PyPI's `moto[server]`), and
/// the environment that makes `rclone` reach it as the remote ``remoteName`` without any
/// rclone.conf. Create it in a test (it throws `XCTSkip` when moto_server is missing, or fails
/// the test when the `CI` environment variable is set); `deinit` stops the server.
///
/// Not Sendable on purpose: one test owns one server.
public final class S3ServerFixture {
    public let port: Int
    public let remoteName = "s3test"
    private var serverPID: pid_t?
    private let log: String

    public init(file: StaticString = #filePath, line: UInt = #line) throws {
        let environment = ProcessInfo.processInfo.environment
        let folders = (environment["PATH"] ?? "").split(separator: ":").map(String.init)
            + ["/usr/local/bin", "/usr/bin", NSHomeDirectory() + "/.local/bin", "/root/.pyenv/shims"]
        guard let server = folders.map({ "\($0)/moto_server" }).first(where: FileManager.default.isExecutableFile),
            folders.contains(where: { FileManager.default.isExecutableFile(atPath: "\($0)/rclone") })
        else {
            let message = "moto_server or rclone is missing (apt-get install rclone; pip install 'moto[server]')"
            if environment["CI"] != nil {
                XCTFail(message, file: file, line: line)
                throw FixtureError(message)
            }
            throw XCTSkip(message)
        }
        log = NSTemporaryDirectory() + "/moto-\(UUID().uuidString.prefix(8)).log"
        for _ in 0..<5 {
            let candidate = try SSHServerFixture.freePort()
            let started = try SSHServerFixture.spawn(server, ["-H", "127.0.0.1", "-p", "\(candidate)"], stderr: log)
            // Python takes a moment to import moto: up to 30 s on a loaded machine.
            if SSHServerFixture.waitUntilAccepting(port: candidate, while: started, seconds: 30) {
                port = candidate
                serverPID = started
                return
            }
        }
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        throw FixtureError("moto_server did not start: \(text.suffix(2000))")
    }

    deinit {
        if let serverPID {
            kill(serverPID, SIGTERM)
            SSHServerFixture.wait(for: serverPID)
        }
        try? FileManager.default.removeItem(atPath: log)
    }

    /// `RCLONE_CONFIG_*` variables for an S3 remote named ``remoteName`` at this server. A
    /// plain-HTTP endpoint cannot have a CA bundle: `AWS_CA_BUNDLE` is emptied, not inherited.
    public var rcloneEnvironment: [String: String] {
        let prefix = "RCLONE_CONFIG_\(remoteName.uppercased())_"
        return [
            prefix + "TYPE": "s3", prefix + "PROVIDER": "Other", prefix + "ACCESS_KEY_ID": "test",
            prefix + "SECRET_ACCESS_KEY": "test", prefix + "ENDPOINT": "http://127.0.0.1:\(port)",
            prefix + "REGION": "us-east-1", "AWS_CA_BUNDLE": "",
        ]
    }
}
