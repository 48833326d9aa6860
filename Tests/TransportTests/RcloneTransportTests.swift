import Foundation
import TestSupport
import XCTest

@testable import Transport

/// The ``Transport`` contract through the `rclone` program, on rclone's local backend
/// (`rclone::local:/folder`), so it needs no server; the S3 round trip is in the end-to-end
/// `SyncRcloneTests`.
final class RcloneTransportTests: XCTestCase {
    private var root = ""
    private var scratch: URL!

    override func setUpWithError() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/rclone") else {
            if ProcessInfo.processInfo.environment["CI"] != nil { return XCTFail("rclone is missing (apt-get install rclone)") }
            throw XCTSkip("rclone not installed")
        }
        scratch = try makeScratchFolder(self)
        root = scratch.appendingPathComponent("mailbox").path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
    }

    private func transport() throws -> RcloneTransport {
        try RcloneTransport(target: RcloneTarget(url: "rclone::local:\(root)"), timeoutSeconds: 5, listing: Mailbox.folder)
    }

    private func contract() throws -> TransportContract {
        folderContract(try transport(), root: root, scratch: scratch)
    }

    func testRoundTripOfThreeMebibytes() throws { try contract().roundTripOfThreeMebibytes() }
    func testListingIgnoresTemporaryFilesAndFolders() throws { try contract().listingIgnoresTemporaryFilesAndFolders() }
    func testWritingAnExistingNameFails() throws { try contract().writingAnExistingNameFailsAndKeepsTheOldFile() }
    func testRemovingIsIdempotent() throws { try contract().removingIsIdempotent() }
    func testMakeDirectoriesIsNested() throws { try contract().makeDirectoriesIsNestedAndIdempotent(filesBlockFolders: false) }
    func testReadingAMissingFileFails() throws { try contract().readingAMissingFileFails() }

    /// What other writers left is seen by a new transport (one per sync): planted objects and
    /// unfinished uploads are listed apart, sizes come from the listing.
    func testAFreshListingSeesOtherWritersFiles() throws {
        let box = root + "/sqsync/outbox/peer"
        try FileManager.default.createDirectory(atPath: box, withIntermediateDirectories: true)
        try Data(repeating: 1, count: 300).write(to: URL(fileURLWithPath: box + "/b.sqsb"))
        try Data(repeating: 2, count: 7).write(to: URL(fileURLWithPath: box + "/.tmp-peer-123"))
        let transport = try transport()
        XCTAssertEqual(try transport.listDirectories(in: "sqsync/outbox"), ["peer"])
        XCTAssertEqual(try transport.listFiles(in: "sqsync/outbox/peer"), ["b.sqsb"])
        XCTAssertEqual(try transport.temporaryFiles(in: "sqsync/outbox/peer"), [".tmp-peer-123"])
        XCTAssertEqual(try transport.fileSize("sqsync/outbox/peer/b.sqsb"), 300)
        XCTAssertNil(try transport.fileSize("sqsync/outbox/peer/none.sqsb"))
    }

    /// A file over the cap is refused from the listing's size, and one that grew past it after
    /// the listing is refused after reading no more than the cap and one byte.
    func testFilesOverTheCapAreRefused() throws {
        let box = root + "/box"
        try FileManager.default.createDirectory(atPath: box, withIntermediateDirectories: true)
        try Data(repeating: 1, count: 100).write(to: URL(fileURLWithPath: box + "/big"))
        let transport = try transport()
        let local = scratch.appendingPathComponent("copy").path
        XCTAssertThrowsError(try transport.readFile("box/big", to: local, maxBytes: 99)) { error in
            XCTAssertEqual((error as? TransportError)?.kind, .tooLarge, "\(error)")
        }
        XCTAssertEqual(try transport.fileSize("box/big"), 100)
        try Data(repeating: 2, count: 5000).write(to: URL(fileURLWithPath: box + "/big"))
        XCTAssertThrowsError(try transport.readFile("box/big", to: local, maxBytes: 1000)) { error in
            XCTAssertEqual((error as? TransportError)?.kind, .tooLarge, "\(error)")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: local), "nothing is left of a refused read")
    }

    /// A file removed by another writer after the listing reads as gone (the mailbox then
    /// skips it), and drops out of the listing.
    /// Files announced together are fetched by one rclone process and then read from it: here
    /// they are removed from the remote after the prefetch and still read whole; one removed
    /// before it is gone, as ever.
    func testPrefetchedFilesAreReadFromOneDownload() throws {
        let box = root + "/box"
        try FileManager.default.createDirectory(atPath: box, withIntermediateDirectories: true)
        for name in ["a", "b", "c"] { try Data(name.utf8).write(to: URL(fileURLWithPath: "\(box)/\(name).sqsb")) }
        let transport = try transport()
        XCTAssertEqual(try transport.listFiles(in: "box"), ["a.sqsb", "b.sqsb", "c.sqsb"])
        try FileManager.default.removeItem(atPath: box + "/c.sqsb")
        try transport.prefetch(["box/a.sqsb", "box/b.sqsb", "box/c.sqsb"], maxBytes: 1000, into: scratch.appendingPathComponent("prefetch").path)
        for name in ["a", "b"] { try FileManager.default.removeItem(atPath: "\(box)/\(name).sqsb") }
        for name in ["a", "b"] {
            let local = scratch.appendingPathComponent("\(name)-read").path
            try transport.readFile("box/\(name).sqsb", to: local, maxBytes: 1000)
            XCTAssertEqual(try String(contentsOfFile: local, encoding: .utf8), name)
        }
        XCTAssertThrowsError(try transport.readFile("box/c.sqsb", to: scratch.appendingPathComponent("c-read").path, maxBytes: 1000))
    }

    func testAFileRemovedSinceTheListingIsGone() throws {
        let box = root + "/box"
        try FileManager.default.createDirectory(atPath: box, withIntermediateDirectories: true)
        try Data(repeating: 1, count: 10).write(to: URL(fileURLWithPath: box + "/soon-gone"))
        let transport = try transport()
        XCTAssertEqual(try transport.listFiles(in: "box"), ["soon-gone"])
        try FileManager.default.removeItem(atPath: box + "/soon-gone")
        XCTAssertThrowsError(try transport.readFile("box/soon-gone", to: scratch.appendingPathComponent("c").path)) {
            XCTAssertEqual(($0 as? TransportError)?.kind, .io, "\($0)")
        }
        XCTAssertEqual(try transport.listFiles(in: "box"), [])
    }

    /// Names no local file system could hold (a scratch copy is made under the name) are not
    /// listed; a connection string's parameters, which may be credentials, are not shown.
    func testOverlongNamesAreNotListedAndCredentialsAreNotShown() throws {
        let box = root + "/box"
        try FileManager.default.createDirectory(atPath: box, withIntermediateDirectories: true)
        try Data("x".utf8).write(to: URL(fileURLWithPath: box + "/fine.sqsb"))
        let transport = try transport()
        XCTAssertEqual(try transport.listFiles(in: "box"), ["fine.sqsb"])
        XCTAssertEqual(
            try RcloneTarget(url: "rclone::s3,access_key_id=AK,secret_access_key=SECRET:bucket/box").displayName, "rclone::s3,…:bucket/box")
        XCTAssertEqual(try RcloneTarget(url: "rclone:s3:bucket").remoteFolder("sqsync"), "s3:bucket/sqsync/")
        XCTAssertEqual(try RcloneTarget(url: "rclone:s3:").remoteFolder(""), "s3:")
    }

    func testAddresses() throws {
        XCTAssertEqual(try RcloneTarget(url: "rclone:s3:bucket/sqsync").remotePath, "s3:bucket/sqsync")
        XCTAssertEqual(try RcloneTarget(url: "rclone:s3:").remote("sqsync/acks"), "s3:sqsync/acks")
        XCTAssertEqual(try RcloneTarget(url: "rclone:s3:bucket/").remote("sqsync"), "s3:bucket/sqsync")
        XCTAssertEqual(try RcloneTarget(url: "rclone:s3:bucket").remote("a/b"), "s3:bucket/a/b")
        XCTAssertEqual(try RcloneTarget(url: "rclone::local:/srv/box").remotePath, ":local:/srv/box")
        XCTAssertEqual(try RcloneTarget(url: "rclone:gcs:b/x").displayName, "rclone:gcs:b/x")
        for bad in ["rclone:", "rclone:bucket-without-remote", "rclone::nothing", "rclone:--config=/x:y", "rclone:s3:a\u{1b}[2J"] {
            XCTAssertThrowsError(try RcloneTarget(url: bad), bad) { error in
                XCTAssertTrue("\(error)".contains("not a valid rclone: address"), "\(error)")
            }
        }
        XCTAssertThrowsError(try RcloneTarget(url: "rclone:s3:b").remote("../up"))
    }

    func testAMissingProgramIsNamed() throws {
        XCTAssertThrowsError(try RcloneProgram(timeoutSeconds: 5, environment: ["PATH": "/nonexistent"])) { error in
            XCTAssertTrue("\(error)".contains("apt-get install rclone"), "\(error)")
        }
        XCTAssertThrowsError(try RcloneProgram(timeoutSeconds: 5, environment: ["SQSYNC_RCLONE": "/no/such/rclone"])) { error in
            XCTAssertTrue("\(error)".contains("/no/such/rclone"), "\(error)")
        }
    }

    func testComplaintsLoseTheirDateAndControlCharacters() {
        XCTAssertEqual(
            RcloneProgram.lastComplaint("2026/11/27 18:35:24 ERROR : Attempt 1/1 failed\n2026/11/27 18:35:24 Failed to x: \u{1b}[2Jy\n"),
            "Failed to x: [2Jy")
        XCTAssertEqual(RcloneProgram.lastComplaint(""), "")
    }
}
