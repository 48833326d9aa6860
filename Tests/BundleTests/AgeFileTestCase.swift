import Crypto
import Foundation
import XCTest

@testable import Bundle

/// What the age tests share: a scratch folder, files encrypted and decrypted through
/// ``AgeFile``, and the standard `age` tool.
class AgeFileTestCase: XCTestCase {
    var directory: String!

    override func setUpWithError() throws {
        directory =
            FileManager.default.temporaryDirectory.appendingPathComponent("sqsync-age-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: directory)
    }

    func path(_ name: String) -> String { directory + "/" + name }

    func encrypt(_ file: String, to keys: [SSHPublicKey], readersKey: ReadersKey? = nil, as name: String) throws -> String {
        let descriptor = open(file, O_RDONLY)
        defer { close(descriptor) }
        var status = stat()
        fstat(descriptor, &status)
        let out = path(name)
        let output = try HashingFileOutput(creating: out)
        try AgeFile.encrypt(plaintext: descriptor, length: Int(status.st_size), path: file, to: keys, readersKey: readersKey, into: output)
        try output.sync()
        return out
    }

    func decrypt(_ file: String, with key: SigningKey, readersKeys: [ReadersKey] = []) throws -> [UInt8] {
        let descriptor = open(file, O_RDONLY)
        defer { close(descriptor) }
        var status = stat()
        fstat(descriptor, &status)
        let output = try HashingFileOutput(scratchFor: file)
        try AgeFile.decrypt(
            descriptor: descriptor, path: file, fileSize: Int(status.st_size), with: key, readersKeys: readersKeys, into: output)
        return try AgeFile.readExactly(output.descriptor, 0, output.bytesWritten, path: file)
    }

    func run(_ tool: String, _ arguments: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        let output = Pipe(), errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let stdout = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let stderr = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, stdout, stderr)
    }

    /// CI installs `age` (the Makefile's package list): missing there is a failure.
    func requireAge() throws {
        guard !FileManager.default.isExecutableFile(atPath: "/usr/bin/age") else { return }
        if ProcessInfo.processInfo.environment["CI"] != nil { XCTFail("/usr/bin/age missing (apt-get install age)") }
        throw XCTSkip("/usr/bin/age missing (apt-get install age)")
    }

    func writeKey(_ key: SigningKey, _ name: String) throws -> String {
        let file = path(name)
        try key.write(privateKeyPath: file)
        return file
    }
}
