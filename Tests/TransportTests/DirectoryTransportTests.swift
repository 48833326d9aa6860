import Foundation
import TestSupport
import XCTest

@testable import Transport

/// The ``Transport`` contract, checked the same way for every medium.
///
/// `raw` gives the test a back door to the medium: it plants files the transport did not
/// write (a crashed writer's `.tmp-` file) and lists what is really stored.
struct TransportContract {
    var transport: Transport
    var scratch: URL
    var plant: (_ path: String, _ bytes: Data) throws -> Void
    var rawNames: (_ directory: String) throws -> [String]

    func local(_ name: String) -> String { scratch.appendingPathComponent(name).path }

    func write(_ bytes: Data, to path: String) throws {
        let source = local("upload-\(UUID().uuidString)")
        try bytes.write(to: URL(fileURLWithPath: source))
        try transport.writeFile(from: source, to: path)
    }

    func read(_ path: String) throws -> Data {
        let destination = local("download-\(UUID().uuidString)")
        try transport.readFile(path, to: destination)
        return try Data(contentsOf: URL(fileURLWithPath: destination))
    }

    func roundTripOfThreeMebibytes(file: StaticString = #filePath, line: UInt = #line) throws {
        let bytes = randomBytes(3 * 1024 * 1024 + 123)
        try transport.makeDirectories("sqsync/outbox")
        try write(bytes, to: "sqsync/outbox/bundle-1")
        XCTAssertEqual(try transport.listFiles(in: "sqsync/outbox"), ["bundle-1"], file: file, line: line)
        XCTAssertEqual(try rawNames("sqsync/outbox"), ["bundle-1"], "no temporary file left", file: file, line: line)

        let destination = local("copy")
        try Data("old contents".utf8).write(to: URL(fileURLWithPath: destination))
        try transport.readFile("sqsync/outbox/bundle-1", to: destination)
        let copy = try Data(contentsOf: URL(fileURLWithPath: destination))
        XCTAssertEqual(copy.count, bytes.count, file: file, line: line)
        XCTAssertTrue(copy == bytes, "downloaded bytes differ from uploaded ones", file: file, line: line)
    }

    func listingIgnoresTemporaryFilesAndFolders(file: StaticString = #filePath, line: UInt = #line) throws {
        try transport.makeDirectories("box/sub")
        try write(Data("a".utf8), to: "box/real")
        try plant("box/.tmp-0123-left-by-a-killed-writer", Data("partial".utf8))
        XCTAssertEqual(try transport.listFiles(in: "box"), ["real"], file: file, line: line)
        XCTAssertEqual(try transport.listDirectories(in: "box"), ["sub"], file: file, line: line)
        XCTAssertEqual(try transport.listFiles(in: "missing/folder"), [], file: file, line: line)
        XCTAssertEqual(try transport.listDirectories(in: "missing"), [], file: file, line: line)
    }

    func writingAnExistingNameFailsAndKeepsTheOldFile(file: StaticString = #filePath, line: UInt = #line) throws {
        try transport.makeDirectories("box")
        try write(Data("first".utf8), to: "box/name")
        XCTAssertThrowsError(try write(Data("second".utf8), to: "box/name"), file: file, line: line) { error in
            XCTAssertEqual((error as? TransportError)?.kind, .io, "\(error)", file: file, line: line)
            XCTAssertTrue("\(error)".contains("already exists"), "\(error)", file: file, line: line)
        }
        XCTAssertEqual(try read("box/name"), Data("first".utf8), file: file, line: line)
        XCTAssertEqual(try rawNames("box"), ["name"], "no temporary file left", file: file, line: line)
    }

    func removingIsIdempotent(file: StaticString = #filePath, line: UInt = #line) throws {
        try transport.makeDirectories("box")
        try write(Data("x".utf8), to: "box/gone")
        try transport.removeFile("box/gone")
        XCTAssertEqual(try transport.listFiles(in: "box"), [], file: file, line: line)
        XCTAssertNoThrow(try transport.removeFile("box/gone"), file: file, line: line)
        XCTAssertNoThrow(try transport.removeFile("no/such/folder/file"), file: file, line: line)
    }

    /// `filesBlockFolders`: false where a file and a folder may share a name (object stores).
    func makeDirectoriesIsNestedAndIdempotent(
        filesBlockFolders: Bool = true, file: StaticString = #filePath, line: UInt = #line
    ) throws {
        try transport.makeDirectories("p/q/r")
        try transport.makeDirectories("p/q/r")
        try transport.makeDirectories("p/q")
        XCTAssertEqual(try transport.listDirectories(in: ""), ["p"], file: file, line: line)
        XCTAssertEqual(try transport.listDirectories(in: "p/q"), ["r"], file: file, line: line)
        try write(Data("deep".utf8), to: "p/q/r/file")
        XCTAssertEqual(try read("p/q/r/file"), Data("deep".utf8), file: file, line: line)
        if filesBlockFolders { XCTAssertThrowsError(try transport.makeDirectories("p/q/r/file/below"), file: file, line: line) }
    }

    func readingAMissingFileFails(file: StaticString = #filePath, line: UInt = #line) throws {
        XCTAssertThrowsError(try read("no-such-file"), file: file, line: line) { error in
            XCTAssertEqual((error as? TransportError)?.kind, .io, "\(error)", file: file, line: line)
            XCTAssertTrue("\(error)".contains("no-such-file"), "\(error)", file: file, line: line)
        }
        XCTAssertThrowsError(try transport.listFiles(in: "../outside"), file: file, line: line)
    }
}

/// `count` bytes from SplitMix64 with a random seed: unpredictable enough to catch any
/// reordering or truncation, and fast in debug builds.
func randomBytes(_ count: Int) -> Data {
    var state = UInt64.random(in: .min ... .max)
    var data = Data(count: count)
    data.withUnsafeMutableBytes { (buffer: UnsafeMutableRawBufferPointer) in
        var index = 0
        while index < count {
            state &+= 0x9E37_79B9_7F4A_7C15
            var word = state
            word = (word ^ (word >> 30)) &* 0xBF58_476D_1CE4_E5B9
            word = (word ^ (word >> 27)) &* 0x94D0_49BB_1331_11EB
            word ^= word >> 31
            for shift in stride(from: 0, to: min(64, (count - index) * 8), by: 8) {
                buffer[index] = UInt8(truncatingIfNeeded: word >> UInt64(shift))
                index += 1
            }
        }
    }
    return data
}

/// A fresh temporary folder, removed when the test ends.
func makeScratchFolder(_ test: XCTestCase) throws -> URL {
    let url = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("transport-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    test.addTeardownBlock { try? FileManager.default.removeItem(at: url) }
    return url
}

/// Plants and lists files in a real folder, for transports whose medium is one.
func folderContract(_ transport: Transport, root: String, scratch: URL) -> TransportContract {
    TransportContract(
        transport: transport, scratch: scratch,
        plant: { path, bytes in try bytes.write(to: URL(fileURLWithPath: "\(root)/\(path)")) },
        rawNames: { directory in try FileManager.default.contentsOfDirectory(atPath: "\(root)/\(directory)").sorted() })
}

final class DirectoryTransportTests: XCTestCase {
    private func contract() throws -> TransportContract {
        let scratch = try makeScratchFolder(self)
        let root = scratch.appendingPathComponent("stick/mailbox").path
        return folderContract(DirectoryTransport(root: root), root: root, scratch: scratch)
    }

    func testRoundTripOfThreeMebibytes() throws { try contract().roundTripOfThreeMebibytes() }
    func testListingIgnoresTemporaryFilesAndFolders() throws { try contract().listingIgnoresTemporaryFilesAndFolders() }
    func testWritingAnExistingNameFails() throws { try contract().writingAnExistingNameFailsAndKeepsTheOldFile() }
    func testRemovingIsIdempotent() throws { try contract().removingIsIdempotent() }
    func testMakeDirectoriesIsNested() throws { try contract().makeDirectoriesIsNestedAndIdempotent() }
    func testReadingAMissingFileFails() throws { try contract().readingAMissingFileFails() }

    func testWritingIntoAMissingFolderNamesThePath() throws {
        let scratch = try makeScratchFolder(self)
        let transport = DirectoryTransport(root: scratch.path)
        let source = scratch.appendingPathComponent("source").path
        try Data("x".utf8).write(to: URL(fileURLWithPath: source))
        XCTAssertThrowsError(try transport.writeFile(from: source, to: "absent/file")) { error in
            XCTAssertEqual((error as? TransportError)?.kind, .io)
            XCTAssertTrue("\(error)".contains("\(scratch.path)/absent"), "\(error)")
        }
    }

    func testRelativePathJoining() throws {
        XCTAssertEqual(try RelativePath.join("/srv/box", "a//b/./c"), "/srv/box/a/b/c")
        XCTAssertEqual(try RelativePath.join("/", "a"), "/a")
        XCTAssertEqual(try RelativePath.join(".", "a/b"), "a/b")
        XCTAssertEqual(try RelativePath.join("/srv/box/", ""), "/srv/box/")
        XCTAssertThrowsError(try RelativePath.join("/srv", "a/../../etc"))
        XCTAssertThrowsError(try RelativePath.join("/srv", "/etc/passwd"), "an absolute path leaves the root")
    }

    func testUploadsAreNamedAfterTheirOwnerAndListedAsTemporary() throws {
        let scratch = try makeScratchFolder(self)
        let transport = DirectoryTransport(root: scratch.path)
        transport.uploadOwner = "owner-id"
        XCTAssertTrue(transport.temporaryName(in: "box").hasPrefix("box/.tmp-owner-id-"))
        try transport.makeDirectories("box")
        try Data("partial".utf8).write(to: scratch.appendingPathComponent("box/.tmp-owner-id-1"))
        try Data("x".utf8).write(to: scratch.appendingPathComponent("box/real"))
        XCTAssertEqual(try transport.temporaryFiles(in: "box"), [".tmp-owner-id-1"])
        XCTAssertEqual(try transport.listFiles(in: "box"), ["real"])
    }

    func testSymbolicLinksBelowTheRootAreNeitherListedNorFollowed() throws {
        let scratch = try makeScratchFolder(self)
        let outside = scratch.appendingPathComponent("outside").path
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        try Data("secret".utf8).write(to: URL(fileURLWithPath: outside + "/file"))
        let transport = DirectoryTransport(root: scratch.appendingPathComponent("box").path)
        try transport.makeDirectories("sqsync")
        let root = transport.root
        try FileManager.default.createSymbolicLink(atPath: root + "/sqsync/linked", withDestinationPath: outside)
        try FileManager.default.createSymbolicLink(atPath: root + "/sqsync/file-link", withDestinationPath: outside + "/file")
        XCTAssertEqual(try transport.listFiles(in: "sqsync"), [])
        XCTAssertEqual(try transport.listDirectories(in: "sqsync"), [])
        let local = scratch.appendingPathComponent("copy").path
        XCTAssertThrowsError(try transport.readFile("sqsync/file-link", to: local))
        XCTAssertThrowsError(try transport.readFile("sqsync/linked/file", to: local))
        XCTAssertThrowsError(try transport.listFiles(in: "sqsync/linked"))
        XCTAssertThrowsError(try transport.removeFile("sqsync/linked/file"))
        XCTAssertThrowsError(try transport.writeFile(from: outside + "/file", to: "sqsync/linked/new"))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: outside), ["file"])
    }
}

final class MemoryTransportTests: XCTestCase {
    private func contract() throws -> (TransportContract, MemoryTransport) {
        let memory = MemoryTransport()
        let contract = TransportContract(
            transport: memory, scratch: try makeScratchFolder(self),
            plant: { path, bytes in memory.files[path] = bytes },
            rawNames: { directory in
                memory.files.keys.filter { $0.hasPrefix("\(directory)/") }.map {
                    String($0.dropFirst(directory.count + 1))
                }
                .sorted()
            })
        return (contract, memory)
    }

    func testRoundTripOfThreeMebibytes() throws { try contract().0.roundTripOfThreeMebibytes() }
    func testListingIgnoresTemporaryFilesAndFolders() throws {
        try contract().0.listingIgnoresTemporaryFilesAndFolders()
    }
    func testWritingAnExistingNameFails() throws { try contract().0.writingAnExistingNameFailsAndKeepsTheOldFile() }
    func testRemovingIsIdempotent() throws { try contract().0.removingIsIdempotent() }
    func testMakeDirectoriesIsNested() throws { try contract().0.makeDirectoriesIsNestedAndIdempotent() }
    func testReadingAMissingFileFails() throws { try contract().0.readingAMissingFileFails() }

    func testWritingNeedsTheFolder() throws {
        let (contract, _) = try contract()
        XCTAssertThrowsError(try contract.write(Data("x".utf8), to: "absent/file"))
    }
}
