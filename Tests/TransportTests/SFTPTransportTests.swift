import Foundation
import TestSupport
import XCTest

@testable import Transport

final class SFTPTransportTests: XCTestCase {
    private var server: SSHServerFixture!

    override func setUpWithError() throws {
        server = try SSHServerFixture()
    }

    override func tearDown() {
        server = nil
    }

    private func target(_ path: String = "/mailbox") throws -> SSHTarget {
        try SSHTarget(url: server.url(path: server.remoteDirectory + path))
    }

    private func options(
        knownHosts: String? = nil, acceptNew: Bool = false, key: String? = nil, timeout: Int = 5
    ) -> SSHOptions {
        SSHOptions(
            knownHostsFile: knownHosts ?? server.knownHostsPath, acceptNewHostKey: acceptNew,
            identityFile: key ?? server.clientKeyPath, timeoutSeconds: timeout)
    }

    private func connect(_ options: SSHOptions? = nil) throws -> SFTPTransport {
        try SFTPTransport(target: target(), options: options ?? self.options())
    }

    /// Runs `body`, which must throw a ``TransportError``, and returns it.
    private func transportError(
        file: StaticString = #filePath, line: UInt = #line, _ body: () throws -> Void
    ) -> TransportError? {
        do {
            try body()
            XCTFail("expected a TransportError", file: file, line: line)
        } catch let error as TransportError {
            return error
        } catch {
            XCTFail("expected a TransportError, got \(error)", file: file, line: line)
        }
        return nil
    }

    private func contract() throws -> TransportContract {
        let root = server.remoteDirectory + "/mailbox"
        return folderContract(try connect(), root: root, scratch: try makeScratchFolder(self))
    }

    // MARK: The Transport contract over SFTP

    func testRoundTripOfThreeMebibytes() throws { try contract().roundTripOfThreeMebibytes() }
    func testListingIgnoresTemporaryFilesAndFolders() throws { try contract().listingIgnoresTemporaryFilesAndFolders() }
    func testWritingAnExistingNameFails() throws { try contract().writingAnExistingNameFailsAndKeepsTheOldFile() }
    func testRemovingIsIdempotent() throws { try contract().removingIsIdempotent() }
    func testMakeDirectoriesIsNested() throws { try contract().makeDirectoriesIsNestedAndIdempotent() }
    func testReadingAMissingFileFails() throws { try contract().readingAMissingFileFails() }

    func testDisplayNameIsTheURL() throws {
        let transport = try connect()
        XCTAssertEqual(
            transport.displayName, "ssh://\(server.userName)@127.0.0.1:\(server.port)\(server.remoteDirectory)/mailbox")
    }

    // MARK: Host keys

    func testUnknownHostKeyIsRefusedAndTheFileIsLeftAlone() throws {
        let knownHosts = server.directory.appendingPathComponent("empty_known_hosts").path
        try Data().write(to: URL(fileURLWithPath: knownHosts))
        let error = transportError { _ = try connect(options(knownHosts: knownHosts)) }
        XCTAssertEqual(error?.kind, .hostKeyUnknown, "\(String(describing: error))")
        let message = error?.description ?? ""
        for part in ["127.0.0.1:\(server.port)", knownHosts, "--accept-new-host-key", "SHA256:"] {
            XCTAssertTrue(message.contains(part), "'\(part)' missing from: \(message)")
        }
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: knownHosts)), Data())

        let missing = server.directory.appendingPathComponent("missing_known_hosts").path
        XCTAssertEqual(transportError { _ = try connect(options(knownHosts: missing)) }?.kind, .hostKeyUnknown)
        XCTAssertFalse(FileManager.default.fileExists(atPath: missing))
    }

    func testAcceptNewRecordsTheKeyThenConnectsWithoutTheFlag() throws {
        let knownHosts = server.directory.appendingPathComponent("new/folder/known_hosts").path
        let first = try connect(options(knownHosts: knownHosts, acceptNew: true))
        XCTAssertEqual(try first.listFiles(in: ""), [])

        let lines = try String(contentsOfFile: knownHosts, encoding: .utf8).split(separator: "\n")
        XCTAssertEqual(lines.count, 1)
        XCTAssertTrue(lines.first?.hasPrefix("[127.0.0.1]:\(server.port) ") == true, "\(lines)")
        XCTAssertTrue(lines.first?.hasSuffix(server.hostPublicKey) == true, "\(lines) vs \(server.hostPublicKey)")

        let second = try connect(options(knownHosts: knownHosts, acceptNew: false))
        XCTAssertEqual(try second.listFiles(in: ""), [])
        XCTAssertEqual(try String(contentsOfFile: knownHosts, encoding: .utf8).split(separator: "\n").count, 1)
    }

    func testAcceptNewKeepsAHandEditedFileIntact() throws {
        let other = try SSHServerFixture.makeKeyPair(in: server.directory, named: "unrelated_host")
        let knownHosts = server.directory.appendingPathComponent("edited_known_hosts").path
        try "example.org \(other.publicKey)".write(toFile: knownHosts, atomically: true, encoding: .utf8)
        _ = try connect(options(knownHosts: knownHosts, acceptNew: true))
        let lines = try String(contentsOfFile: knownHosts, encoding: .utf8).split(separator: "\n")
        XCTAssertEqual(lines.first.map(String.init), "example.org \(other.publicKey)")
        XCTAssertEqual(lines.count, 2, "\(lines)")
        XCTAssertNoThrow(try connect(options(knownHosts: knownHosts)))
    }

    func testChangedHostKeyIsRefusedEvenWithAcceptNew() throws {
        let other = try SSHServerFixture.makeKeyPair(in: server.directory, named: "impostor_host")
        let knownHosts = server.directory.appendingPathComponent("changed_known_hosts").path
        let contents = "example.org \(other.publicKey)\n[127.0.0.1]:\(server.port) \(other.publicKey)\n"
        try contents.write(toFile: knownHosts, atomically: true, encoding: .utf8)

        let error = transportError { _ = try connect(options(knownHosts: knownHosts, acceptNew: true)) }
        XCTAssertEqual(error?.kind, .hostKeyChanged, "\(String(describing: error))")
        let message = error?.description ?? ""
        for part in ["127.0.0.1:\(server.port)", "attack", "\(knownHosts) line 2", "ssh-keygen -R"] {
            XCTAssertTrue(message.contains(part), "'\(part)' missing from: \(message)")
        }
        XCTAssertEqual(try String(contentsOfFile: knownHosts, encoding: .utf8), contents)
    }

    func testHostKnownOnlyWithAnotherKeyTypeIsRefused() throws {
        let other = try SSHServerFixture.makeKeyPair(in: server.directory, named: "ecdsa_host", type: "ecdsa")
        let knownHosts = server.directory.appendingPathComponent("other_known_hosts").path
        try "[127.0.0.1]:\(server.port) \(other.publicKey)\n".write(
            toFile: knownHosts, atomically: true, encoding: .utf8)
        let error = transportError { _ = try connect(options(knownHosts: knownHosts, acceptNew: true)) }
        XCTAssertEqual(error?.kind, .hostKeyChanged, "\(String(describing: error))")
    }

    // MARK: Authentication

    func testWrongClientKeyIsRefused() throws {
        let stranger = try SSHServerFixture.makeKeyPair(in: server.directory, named: "stranger")
        let error = transportError { _ = try connect(options(key: stranger.privateKey)) }
        XCTAssertEqual(error?.kind, .authentication, "\(String(describing: error))")
        XCTAssertTrue(error?.description.contains(stranger.privateKey) == true, "\(String(describing: error))")
        XCTAssertTrue(error?.description.contains("127.0.0.1") == true, "\(String(describing: error))")
    }

    func testUnreadableKeyFileIsAnAuthenticationError() throws {
        let missing = server.directory.appendingPathComponent("no_such_key").path
        let error = transportError { _ = try connect(options(key: missing)) }
        XCTAssertEqual(error?.kind, .authentication, "\(String(describing: error))")
        XCTAssertTrue(error?.description.contains(missing) == true, "\(String(describing: error))")
    }

    // MARK: Dead and silent hosts

    func testSilentHostTimesOutNamingTheHost() throws {
        let (socket, port) = try SSHServerFixture.listeningSocket()
        defer { close(socket) }
        let target = SSHTarget(host: "127.0.0.1", port: port, path: "/x")
        let start = Date()
        let error = transportError { _ = try SFTPTransport(target: target, options: options(timeout: 2)) }
        let elapsed = Date().timeIntervalSince(start)
        XCTAssertEqual(error?.kind, .timeout, "\(String(describing: error))")
        XCTAssertLessThan(elapsed, 2 + 3)
        XCTAssertGreaterThan(elapsed, 1.5)
        XCTAssertTrue(error?.description.contains("127.0.0.1:\(port)") == true, "\(String(describing: error))")
        XCTAssertFalse(error?.description.contains("\n") == true, "one line")
    }

    func testClosedPortFailsNamingTheHost() throws {
        let port = try SSHServerFixture.freePort()
        let target = SSHTarget(host: "127.0.0.1", port: port, path: "/x")
        let error = transportError { _ = try SFTPTransport(target: target, options: options()) }
        XCTAssertEqual(error?.kind, .connection, "\(String(describing: error))")
        XCTAssertTrue(error?.description.contains("127.0.0.1:\(port)") == true, "\(String(describing: error))")
    }

    func testServerThatStopsAnsweringTimesOutAndLaterCallsFailFast() throws {
        let transport = try connect(options(timeout: 2))
        try transport.makeDirectories("box")
        let source = try makeScratchFolder(self).appendingPathComponent("source").path
        try randomBytes(1024 * 1024).write(to: URL(fileURLWithPath: source))

        server.pauseSessions()
        defer { server.resumeSessions() }
        let start = Date()
        let error = transportError { try transport.writeFile(from: source, to: "box/file") }
        XCTAssertEqual(error?.kind, .timeout, "\(String(describing: error))")
        XCTAssertLessThan(Date().timeIntervalSince(start), 2 + 3)
        XCTAssertTrue(error?.description.contains("127.0.0.1:\(server.port)") == true, "\(String(describing: error))")

        let again = Date()
        XCTAssertNotNil(transportError { _ = try transport.listFiles(in: "box") })
        XCTAssertLessThan(Date().timeIntervalSince(again), 1)
    }

}

final class SSHTargetTests: XCTestCase {
    func testParsingAddresses() throws {
        let full = try SSHTarget(url: "ssh://ann@hq.example:2222/srv/sqsync/")
        XCTAssertEqual(full, SSHTarget(user: "ann", host: "hq.example", port: 2222, path: "/srv/sqsync"))
        XCTAssertEqual(full.displayName, "ssh://ann@hq.example:2222/srv/sqsync")
        XCTAssertEqual(full.sftpRoot, "/srv/sqsync")

        let short = try SSHTarget(url: "ssh://hq/data%20box")
        XCTAssertEqual(short, SSHTarget(host: "hq", path: "/data box"))
        XCTAssertEqual(short.displayName, "ssh://hq:22/data box")
        XCTAssertEqual(try SSHTarget(url: "ssh://b%C3%A9a%40x@hq/%41b").user, "béa@x")
        XCTAssertEqual(try SSHTarget(url: "ssh://hq/%41b").path, "/Ab")
        for bad in ["ssh://hq/a%+fb", "ssh://hq/a%4", "ssh://hq/a%zz", "ssh://hq/%C3"] {
            XCTAssertThrowsError(try SSHTarget(url: bad), bad)
        }

        let home = try SSHTarget(url: "ssh://hq/~/sqsync")
        XCTAssertEqual(home.path, "~/sqsync")
        XCTAssertEqual(home.sftpRoot, "sqsync")
        XCTAssertEqual(home.displayName, "ssh://hq:22/~/sqsync")
        XCTAssertEqual(try SSHTarget(url: "ssh://hq/~").sftpRoot, ".")

        let ipv6 = try SSHTarget(url: "ssh://[::1]:22022/x")
        XCTAssertEqual(ipv6.host, "::1")
        XCTAssertEqual(ipv6.port, 22022)
        XCTAssertEqual(ipv6.displayName, "ssh://[::1]:22022/x")

        XCTAssertTrue(SSHTarget.isSSHURL("SSH://hq/x"))
        XCTAssertFalse(SSHTarget.isSSHURL("/media/usb"))
        for bad in [
            "/media/usb", "ssh://hq", "ssh://:22/x", "ssh://hq:0/x", "ssh://hq:port/x", "ssh://@hq/x",
            "ssh://hq/a/../b", "ssh://hq/~bob/x", "ssh://[::1/x",
        ] {
            XCTAssertThrowsError(try SSHTarget(url: bad), bad) { error in
                XCTAssertTrue("\(error)".contains(bad), "\(error)")
            }
        }
    }
}
