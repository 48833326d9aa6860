import Crypto
import Foundation
import XCTest

@testable import Bundle

final class SigningTests: XCTestCase {
    private var directory: URL!

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("SigningTests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        if let directory {
            try? FileManager.default.removeItem(at: directory)
        }
    }

    // MARK: - Helpers

    private func path(_ name: String) -> String {
        directory.appendingPathComponent(name).path
    }

    private struct Output {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// Runs ssh-keygen with output sent to files, so a chatty child can never
    /// block on a full pipe, and without the caller's ssh-agent.
    @discardableResult
    private func sshKeygen(_ arguments: [String], stdin: String? = nil) throws -> Output {
        let outPath = path("stdout-\(UUID().uuidString)")
        let errPath = path("stderr-\(UUID().uuidString)")
        XCTAssertTrue(FileManager.default.createFile(atPath: outPath, contents: nil))
        XCTAssertTrue(FileManager.default.createFile(atPath: errPath, contents: nil))
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/ssh-keygen")
        process.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        environment["SSH_AUTH_SOCK"] = nil
        process.environment = environment
        let out = try XCTUnwrap(FileHandle(forWritingAtPath: outPath))
        let err = try XCTUnwrap(FileHandle(forWritingAtPath: errPath))
        process.standardOutput = out
        process.standardError = err
        if let stdin {
            process.standardInput = try XCTUnwrap(FileHandle(forReadingAtPath: stdin))
        } else {
            process.standardInput = FileHandle.nullDevice
        }
        try process.run()
        process.waitUntilExit()
        try out.close()
        try err.close()
        return Output(
            status: process.terminationStatus,
            stdout: try String(contentsOfFile: outPath, encoding: .utf8),
            stderr: try String(contentsOfFile: errPath, encoding: .utf8))
    }

    private func makeKeyWithSSHKeygen(
        _ name: String, type: String = "ed25519", passphrase: String = ""
    ) throws
        -> String
    {
        let keyPath = path(name)
        let result = try sshKeygen(["-q", "-t", type, "-N", passphrase, "-C", "made by ssh-keygen", "-f", keyPath])
        XCTAssertEqual(result.status, 0, result.stderr)
        return keyPath
    }

    private func write(_ text: String, to name: String) throws -> String {
        let filePath = path(name)
        try Data(text.utf8).write(to: URL(fileURLWithPath: filePath))
        return filePath
    }

    private func readBytes(_ filePath: String) throws -> [UInt8] {
        Array(try Data(contentsOf: URL(fileURLWithPath: filePath)))
    }

    private func mode(_ filePath: String) throws -> Int {
        let attributes = try FileManager.default.attributesOfItem(atPath: filePath)
        return try XCTUnwrap(attributes[.posixPermissions] as? Int)
    }

    private func assertThrows(
        _ expression: @autoclosure () throws -> some Any, containing text: String,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertThrowsError(try expression(), file: file, line: line) { error in
            let description = (error as? KeyFormatError)?.description ?? "not a KeyFormatError: \(error)"
            XCTAssertTrue(
                description.contains(text), "\"\(description)\" does not contain \"\(text)\"", file: file, line: line)
            XCTAssertFalse(description.contains("\n"), "error is not one line: \(description)", file: file, line: line)
        }
    }

    private func digest(_ bytes: [UInt8]) -> SHA512.Digest {
        SHA512.hash(data: bytes)
    }

    // MARK: - Keys

    func testGeneratedKeyRoundTripsThroughOpenSSHText() throws {
        let key = SigningKey.generate(comment: "alice@laptop")
        let text = key.openSSHText()
        XCTAssertTrue(text.hasPrefix("-----BEGIN OPENSSH PRIVATE KEY-----\n"))
        XCTAssertTrue(text.hasSuffix("\n-----END OPENSSH PRIVATE KEY-----\n"))
        for line in text.split(separator: "\n") {
            XCTAssertLessThanOrEqual(line.count, 70)
        }
        let parsed = try SigningKey(openSSHText: text)
        XCTAssertEqual(parsed.publicKey, key.publicKey)
        XCTAssertEqual(parsed.comment, "alice@laptop")
        XCTAssertFalse(String(describing: key).contains(text), "description must not show the secret")

        let reparsed = try SSHPublicKey(openSSHLine: key.publicKey.openSSHLine + " some comment")
        XCTAssertEqual(reparsed, key.publicKey)
        XCTAssertEqual(try SSHPublicKey(wireBlob: key.publicKey.wireBlob), key.publicKey)
    }

    /// Key lines are read by table: the same key and line as the blob's own encoding, fields
    /// split by any white space; a blob whose head is not ssh-ed25519's is refused.
    func testOpenSSHLinesReadTheSameWhicheverWay() throws {
        for index in 0..<200 {
            let key = SigningKey.generate(comment: "k\(index)").publicKey
            let parsed = try SSHPublicKey(openSSHLine: key.openSSHLine + " k\(index)@host")
            XCTAssertEqual(parsed, key)
            XCTAssertEqual(parsed.openSSHLine, key.openSSHLine)
            XCTAssertEqual(parsed.openSSHLine, "ssh-ed25519 " + Data(key.wireBlob).base64EncodedString())
            let tabbed = try SSHPublicKey(openSSHLine: "\t" + key.openSSHLine.replacing(" ", with: "\t") + "\n")
            XCTAssertEqual(tabbed.openSSHLine, key.openSSHLine)
        }
        // A length of 33 for the key: same first 25 characters, another blob.
        var blob = SigningKey.generate(comment: "x").publicKey.wireBlob
        blob[18] = 0x21
        blob.append(0)
        XCTAssertThrowsError(try SSHPublicKey(openSSHLine: "ssh-ed25519 " + Data(blob).base64EncodedString()))
        blob.removeLast()
        XCTAssertThrowsError(try SSHPublicKey(openSSHLine: "ssh-ed25519 " + Data(blob).base64EncodedString()))
    }

    func testWriteCreatesPrivateKeyWith0600AndPublicKeyBeside() throws {
        let key = SigningKey.generate(comment: "alice@laptop")
        let keyPath = path("id_sqsync")
        try key.write(privateKeyPath: keyPath)

        XCTAssertEqual(try mode(keyPath), 0o600)
        let loaded = try SigningKey.load(path: keyPath)
        XCTAssertEqual(loaded.publicKey, key.publicKey)
        XCTAssertEqual(loaded.comment, "alice@laptop")

        let publicText = try String(contentsOfFile: keyPath + ".pub", encoding: .utf8)
        XCTAssertEqual(publicText, key.publicKey.openSSHLine + " alice@laptop\n")
        XCTAssertEqual(try mode(keyPath + ".pub") & 0o600, 0o600)
        XCTAssertEqual(try mode(keyPath + ".pub") & 0o022, 0, "umask may only remove bits from 0644")
    }

    func testWriteRefusesToOverwrite() throws {
        let keyPath = path("id_sqsync")
        try SigningKey.generate(comment: "first").write(privateKeyPath: keyPath)
        let before = try readBytes(keyPath)
        let publicBefore = try readBytes(keyPath + ".pub")

        assertThrows(try SigningKey.generate(comment: "second").write(privateKeyPath: keyPath), containing: keyPath)
        XCTAssertEqual(try readBytes(keyPath), before)
        XCTAssertEqual(try readBytes(keyPath + ".pub"), publicBefore)

        // A stray .pub alone also stops the write, and leaves no private key behind.
        let otherPath = path("id_other")
        _ = try write("not mine\n", to: "id_other.pub")
        assertThrows(
            try SigningKey.generate(comment: "third").write(privateKeyPath: otherPath), containing: otherPath + ".pub")
        XCTAssertFalse(FileManager.default.fileExists(atPath: otherPath))
        XCTAssertEqual(try String(contentsOfFile: otherPath + ".pub", encoding: .utf8), "not mine\n")
    }

    func testLoadErrorsNameTheFile() throws {
        let missing = path("no-such-key")
        assertThrows(try SigningKey.load(path: missing), containing: missing)
        let garbage = try write("hello\n", to: "garbage")
        assertThrows(try SigningKey.load(path: garbage), containing: garbage)
    }

    // MARK: - Interoperability with OpenSSH

    func testParsesKeyMadeBySSHKeygenAndReproducesItsFile() throws {
        let keyPath = try makeKeyWithSSHKeygen("id_ed25519")
        let key = try SigningKey.load(path: keyPath)
        let publicLine = try String(contentsOfFile: keyPath + ".pub", encoding: .utf8)
        XCTAssertEqual(try SSHPublicKey(openSSHLine: publicLine), key.publicKey)
        XCTAssertEqual(key.publicKey.openSSHLine + " made by ssh-keygen\n", publicLine)
        XCTAssertEqual(key.comment, "made by ssh-keygen")

        // With ssh-keygen's random check value, our writer gives its file byte for byte.
        let original = try String(contentsOfFile: keyPath, encoding: .utf8)
        let bytes = try Armor.decode(original, label: "OPENSSH PRIVATE KEY", what: "test key")
        var reader = SSHReader(bytes, context: "test key")
        _ = try reader.readRaw(count: SigningKey.magic.count)
        for _ in 0..<3 { _ = try reader.readString() }
        _ = try reader.readUInt32()
        _ = try reader.readString()
        _ = try reader.readUInt32()
        let checkInt = try reader.readUInt32()
        XCTAssertEqual(key.openSSHText(checkInt: checkInt), original)

        let fingerprint = try sshKeygen(["-l", "-f", keyPath + ".pub"])
        XCTAssertEqual(fingerprint.status, 0, fingerprint.stderr)
        XCTAssertTrue(fingerprint.stdout.contains(" \(key.publicKey.fingerprint) "), fingerprint.stdout)
    }

    func testSSHKeygenAcceptsKeyWrittenByUs() throws {
        let key = SigningKey.generate(comment: "written by sqsync")
        let keyPath = path("id_sqsync")
        try key.write(privateKeyPath: keyPath)
        let result = try sshKeygen(["-y", "-f", keyPath])
        XCTAssertEqual(result.status, 0, result.stderr)
        let fields = result.stdout.split(separator: " ", maxSplits: 2)
        XCTAssertEqual(fields.prefix(2).joined(separator: " "), key.publicKey.openSSHLine)
    }

    func testSSHKeygenVerifiesOurSignature() throws {
        let key = SigningKey.generate(comment: "alice")
        let message = Array("a bundle's bytes\n".utf8) + (0..<1000).map { UInt8(truncatingIfNeeded: $0) }
        let messagePath = path("bundle")
        try Data(message).write(to: URL(fileURLWithPath: messagePath))

        let signature = try SSHSignature.sign(messageDigest: digest(message), namespace: "sqsync", key: key)
        XCTAssertTrue(signature.isValid(messageDigest: digest(message), namespace: "sqsync"))
        let signaturePath = try write(signature.armored, to: "bundle.sig")
        let signersPath = try write(
            AllowedSigners.line(principal: "alice@example.com", key: key.publicKey) + "\n", to: "allowed_signers")

        let good = try sshKeygen(
            ["-Y", "verify", "-f", signersPath, "-I", "alice@example.com", "-n", "sqsync", "-s", signaturePath],
            stdin: messagePath)
        XCTAssertEqual(good.status, 0, good.stdout + good.stderr)
        XCTAssertTrue(good.stdout.contains(key.publicKey.fingerprint), good.stdout)

        let otherNamespace = try sshKeygen(
            ["-Y", "verify", "-f", signersPath, "-I", "alice@example.com", "-n", "git", "-s", signaturePath],
            stdin: messagePath)
        XCTAssertNotEqual(otherNamespace.status, 0)
    }

    func testWeVerifySSHKeygenSignature() throws {
        let keyPath = try makeKeyWithSSHKeygen("id_ed25519")
        var message = Array("signed by ssh-keygen\n".utf8)
        let messagePath = path("bundle")
        try Data(message).write(to: URL(fileURLWithPath: messagePath))
        let result = try sshKeygen(["-Y", "sign", "-f", keyPath, "-n", "sqsync", messagePath])
        XCTAssertEqual(result.status, 0, result.stderr)

        let armored = try String(contentsOfFile: messagePath + ".sig", encoding: .utf8)
        let signature = try SSHSignature(armored: armored)
        let key = try SigningKey.load(path: keyPath)
        XCTAssertEqual(signature.publicKey, key.publicKey)
        XCTAssertEqual(signature.namespace, "sqsync")
        XCTAssertTrue(signature.isValid(messageDigest: digest(message), namespace: "sqsync"))
        XCTAssertFalse(signature.isValid(messageDigest: digest(message), namespace: "git"))

        // Ed25519 is deterministic, so our signature and our armour match OpenSSH's exactly.
        let ours = try SSHSignature.sign(messageDigest: digest(message), namespace: "sqsync", key: key)
        XCTAssertEqual(ours.armored, armored)

        message[3] ^= 0x01
        XCTAssertFalse(signature.isValid(messageDigest: digest(message), namespace: "sqsync"))
    }

    func testRefusesEncryptedAndNonEd25519Keys() throws {
        let encrypted = try makeKeyWithSSHKeygen("id_encrypted", passphrase: "secret passphrase")
        assertThrows(try SigningKey.load(path: encrypted), containing: "ssh-keygen -p")
        assertThrows(try SigningKey.load(path: encrypted), containing: encrypted)

        let ecdsa = try makeKeyWithSSHKeygen("id_ecdsa", type: "ecdsa")
        assertThrows(try SigningKey.load(path: ecdsa), containing: "only ssh-ed25519")
        assertThrows(
            try SSHPublicKey(openSSHLine: String(contentsOfFile: ecdsa + ".pub", encoding: .utf8)),
            containing: "only ssh-ed25519")

        let ed25519 = try makeKeyWithSSHKeygen("id_ed25519")
        assertThrows(try SigningKey.load(path: ed25519 + ".pub"), containing: "public key")
    }

    // MARK: - Signature blobs

    private func sampleSignature() throws -> SSHSignature {
        try SSHSignature.sign(
            messageDigest: digest(Array("message".utf8)), namespace: "sqsync", key: .generate(comment: ""))
    }

    func testBlobAndArmorRoundTrip() throws {
        let signature = try sampleSignature()
        let parsed = try SSHSignature(blob: signature.blob)
        XCTAssertEqual(parsed.blob, signature.blob)
        XCTAssertEqual(try SSHSignature(armored: signature.armored).blob, signature.blob)
        XCTAssertEqual(
            try SSHSignature(armored: "\r\n" + signature.armored.replacingOccurrences(of: "\n", with: "\r\n")).blob,
            signature.blob)
        XCTAssertTrue(signature.armored.hasPrefix("-----BEGIN SSH SIGNATURE-----\n"))
        XCTAssertTrue(signature.armored.hasSuffix("\n-----END SSH SIGNATURE-----\n"))
    }

    func testCorruptBlobsThrow() throws {
        let blob = try sampleSignature().blob
        for length in 0..<blob.count {
            XCTAssertThrowsError(try SSHSignature(blob: Array(blob[..<length])), "prefix of \(length) bytes")
        }
        assertThrows(try SSHSignature(blob: blob + [0]), containing: "trailing")

        var badMagic = blob
        badMagic[0] = UInt8(ascii: "X")
        assertThrows(try SSHSignature(blob: badMagic), containing: "SSHSIG")

        var badVersion = blob
        badVersion[9] = 2
        assertThrows(try SSHSignature(blob: badVersion), containing: "version 2")

        // The public key's length field claims more bytes than there are.
        var pastEnd = blob
        pastEnd[10] = 0x7f
        assertThrows(try SSHSignature(blob: pastEnd), containing: "truncated")
    }

    func testOtherHashAlgorithmAndReservedFieldAreRejected() throws {
        let key = SigningKey.generate(comment: "")
        assertThrows(try SSHSignature(blob: rebuiltBlob(key: key, hashAlgorithm: "sha256")), containing: "sha256")
        assertThrows(try SSHSignature(blob: rebuiltBlob(key: key, reserved: [1])), containing: "reserved")
        assertThrows(try SSHSignature(blob: rebuiltBlob(key: key, signatureType: "ssh-rsa")), containing: "ssh-rsa")
        XCTAssertNoThrow(try SSHSignature(blob: rebuiltBlob(key: key)))
    }

    private func rebuiltBlob(
        key: SigningKey, hashAlgorithm: String = "sha512", reserved: [UInt8] = [], signatureType: String = "ssh-ed25519"
    ) -> [UInt8] {
        var inner = SSHWriter()
        inner.appendString(signatureType)
        inner.appendString([UInt8](repeating: 7, count: 64))
        var writer = SSHWriter()
        writer.appendRaw(Array("SSHSIG".utf8))
        writer.appendUInt32(1)
        writer.appendString(key.publicKey.wireBlob)
        writer.appendString("sqsync")
        writer.appendString(reserved)
        writer.appendString(hashAlgorithm)
        writer.appendString(inner.bytes)
        return writer.bytes
    }

    func testFlippedBitInSignatureFailsVerification() throws {
        let message = Array("message".utf8)
        let signature = try sampleSignature()
        XCTAssertTrue(signature.isValid(messageDigest: digest(message), namespace: "sqsync"))
        for bit in [0, 7, 100, 511] {
            var bytes = signature.signature
            bytes[bit / 8] ^= UInt8(1 << (bit % 8))
            let flipped = SSHSignature(publicKey: signature.publicKey, namespace: "sqsync", signature: bytes)
            XCTAssertFalse(flipped.isValid(messageDigest: digest(message), namespace: "sqsync"), "bit \(bit)")
            XCTAssertFalse(
                try SSHSignature(blob: flipped.blob).isValid(messageDigest: digest(message), namespace: "sqsync"))
        }
    }

    // MARK: - allowed_signers

    func testAllowedSignersFindsPrincipal() throws {
        let alice = SigningKey.generate(comment: "").publicKey
        let bob = SigningKey.generate(comment: "").publicKey
        let stranger = SigningKey.generate(comment: "").publicKey
        let text = """
            # sqsync signers

            \(AllowedSigners.line(principal: "alice@example.com", key: alice))
              bob,bob@work,robert cert-authority \(stranger.openSSHLine)
            bob,bob@work,robert namespaces="git,sqsync" \(bob.openSSHLine) bob's laptop
            carol ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 carol
            dave namespaces="sqsync" sk-ssh-ed25519@openssh.com AAAAGnNrLXNzaC1lZDI1NTE5QG9wZW5zc2guY29t
            """
        let signers = try AllowedSigners(text: text)
        XCTAssertEqual(signers.principal(for: alice, namespace: "sqsync"), "alice@example.com")
        XCTAssertNil(signers.principal(for: alice, namespace: "git"))
        XCTAssertEqual(signers.principal(for: bob, namespace: "sqsync"), "bob")
        XCTAssertEqual(signers.principal(for: bob, namespace: "git"), "bob")
        XCTAssertNil(signers.principal(for: bob, namespace: "file"))
        XCTAssertNil(signers.principal(for: stranger, namespace: "sqsync"), "cert-authority lines are skipped")
        XCTAssertNil(signers.principal(for: SigningKey.generate(comment: "").publicKey, namespace: "sqsync"))
    }

    func testAllowedSignersOptions() throws {
        let key = SigningKey.generate(comment: "").publicKey
        let anyNamespace = try AllowedSigners(text: "\"Alice Smith,alice\" \(key.openSSHLine)\n")
        XCTAssertEqual(anyNamespace.principal(for: key, namespace: "whatever"), "Alice Smith")

        let crlf = try AllowedSigners(text: "# signers\r\n\r\nbob \(key.openSSHLine)\r\n")
        XCTAssertEqual(crlf.principal(for: key, namespace: "sqsync"), "bob")

        let wildcard = try AllowedSigners(text: "a namespaces=\"sq*,!sqbad\" \(key.openSSHLine)")
        XCTAssertEqual(wildcard.principal(for: key, namespace: "sqsync"), "a")
        XCTAssertNil(wildcard.principal(for: key, namespace: "sqbad"))
        XCTAssertNil(wildcard.principal(for: key, namespace: "git"))

        let windowed = try AllowedSigners(
            text: "a valid-after=\"20200101\",VALID-BEFORE=\"20300101000000Z\",namespaces=\"sqsync\" \(key.openSSHLine)"
        )
        let utc = TimeZone(identifier: "UTC")!
        let inside = DateComponents(calendar: Calendar(identifier: .gregorian), timeZone: utc, year: 2025).date!
        let after = DateComponents(calendar: Calendar(identifier: .gregorian), timeZone: utc, year: 2031).date!
        let before = DateComponents(calendar: Calendar(identifier: .gregorian), timeZone: utc, year: 2019).date!
        XCTAssertEqual(windowed.principal(for: key, namespace: "sqsync", at: inside), "a")
        XCTAssertNil(windowed.principal(for: key, namespace: "sqsync", at: after))
        XCTAssertNil(windowed.principal(for: key, namespace: "sqsync", at: before))
    }

    func testAllowedSignersRejectsMalformedLines() throws {
        let key = SigningKey.generate(comment: "").publicKey
        assertThrows(try AllowedSigners(text: "# ok\nalice\n"), containing: "line 2")
        assertThrows(try AllowedSigners(text: "alice frobnicate \(key.openSSHLine)"), containing: "frobnicate")
        assertThrows(try AllowedSigners(text: "\"Alice Smith\",alice \(key.openSSHLine)"), containing: "empty option")
        assertThrows(try AllowedSigners(text: "alice namespaces=\"sqsync \(key.openSSHLine)"), containing: "quote")
        assertThrows(
            try AllowedSigners(text: "alice valid-after=\"2020\" \(key.openSSHLine)"), containing: "valid-after")
        assertThrows(try AllowedSigners(text: "alice ssh-ed25519 !!!!"), containing: "base64")
    }

    func testAllowedSignersLoadNamesMissingFile() throws {
        let missing = path("allowed_signers")
        assertThrows(try AllowedSigners.load(path: missing), containing: missing)
        assertThrows(try AllowedSigners.load(path: missing), containing: "sqsync keygen")
        let bad = try write("alice\n", to: "bad_signers")
        assertThrows(try AllowedSigners.load(path: bad), containing: bad)
    }

    func testAllowedSignersLineFormat() throws {
        let key = SigningKey.generate(comment: "").publicKey
        XCTAssertEqual(
            AllowedSigners.line(principal: "alice", key: key), "alice namespaces=\"sqsync\" \(key.openSSHLine)")
        let spaced = AllowedSigners.line(principal: "Alice Smith", key: key)
        XCTAssertEqual(try AllowedSigners(text: spaced).principal(for: key, namespace: "sqsync"), "Alice Smith")
    }
}
