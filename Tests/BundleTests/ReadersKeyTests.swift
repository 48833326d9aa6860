import Crypto
import Foundation
import TestSupport
import XCTest

@testable import Bundle

/// Mailbox readers' keys (docs/BUNDLE_FORMAT.md, "Readers' keys"): age's X25519 recipient
/// type both ways with the standard `age` tool, Bech32 against `age-keygen`, a key file every
/// reader opens (and `age` too), and key files made or altered by someone who is not a reader
/// refused.
final class ReadersKeyTests: AgeFileTestCase {
    private func plaintext(_ count: Int) throws -> (path: String, bytes: [UInt8]) {
        let bytes = (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let file = path("plain-\(count)")
        try Data(bytes).write(to: URL(fileURLWithPath: file))
        return (file, bytes)
    }

    private func makeKey(readers: [SigningKey], by maker: SigningKey) throws -> (key: ReadersKey, file: String) {
        let made = path("made-\(UUID().uuidString.prefix(6))")
        let key = try ReadersKey.make(readers: readers.map(\.publicKey), signingKey: maker, writingTo: made)
        let file = path(key.name)
        try FileManager.default.moveItem(atPath: made, toPath: file)
        return (key, file)
    }

    // MARK: Bech32 and X25519

    /// An identity `age-keygen` made decodes to a secret whose public key is the recipient it
    /// printed, and we encode both back to the same text.
    func testBech32AgreesWithAgeKeygen() throws {
        try requireAge()
        for index in 0..<3 {
            let file = path("keygen-\(index).txt")
            let result = try run("/usr/bin/age-keygen", ["-o", file])
            XCTAssertEqual(result.status, 0, result.stderr)
            let lines = try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n").map(String.init)
            let recipient = try XCTUnwrap(lines.first { $0.hasPrefix("# public key: ") }).dropFirst("# public key: ".count)
            let identity = try XCTUnwrap(lines.first { $0.hasPrefix("AGE-SECRET-KEY-1") })
            let secret = try XCTUnwrap(Bech32.decode(prefix: "AGE-SECRET-KEY-", identity))
            let publicKey = Array(try Curve25519.KeyAgreement.PrivateKey(rawRepresentation: secret).publicKey.rawRepresentation)
            XCTAssertEqual(Bech32.decode(prefix: "age", String(recipient)), publicKey)
            XCTAssertEqual(Bech32.encode(prefix: "age", publicKey), String(recipient))
            XCTAssertEqual(Bech32.encode(prefix: "AGE-SECRET-KEY-", secret).uppercased(), identity)
            var damaged = Array(identity.utf8)
            damaged[20] = damaged[20] == UInt8(ascii: "Q") ? UInt8(ascii: "P") : UInt8(ascii: "Q")
            XCTAssertNil(Bech32.decode(prefix: "AGE-SECRET-KEY-", String(decoding: damaged, as: UTF8.self)), "a changed character")
        }
    }

    /// A file for a readers' key opens with the key, at chunk edges; `age` opens it with the
    /// key file's identity; we open what `age -r age1…` wrote; the writer's own SSH stanza
    /// still opens it; a stranger with neither is not addressed.
    func testX25519StanzasBothWaysWithAge() throws {
        let writer = SigningKey.generate(comment: "writer"), reader = SigningKey.generate(comment: "reader")
        let stranger = SigningKey.generate(comment: "stranger")
        let (key, keyFile) = try makeKey(readers: [writer, reader], by: writer)
        for count in [0, 1, 65_536, 65_537, 150_000] {
            let (file, bytes) = try plaintext(count)
            let encrypted = try encrypt(file, to: [writer.publicKey], readersKey: key, as: "e-\(count).age")
            XCTAssertEqual(try decrypt(encrypted, with: reader, readersKeys: [key]), bytes, "\(count) bytes")
            XCTAssertEqual(try decrypt(encrypted, with: writer), bytes, "the writer's own stanza, \(count) bytes")
            XCTAssertThrowsError(try decrypt(encrypted, with: stranger)) { error in
                XCTAssertEqual((error as? BundleError)?.kind, .notAddressed, "\(error)")
            }
            XCTAssertEqual(AgeFile.readersKeyName(ofFile: encrypted), key.name)
            let header = String(decoding: try Data(contentsOf: URL(fileURLWithPath: encrypted)).prefix(600), as: UTF8.self)
            XCTAssertEqual(header.components(separatedBy: "\n-> ").count - 1, 3, "one SSH stanza, one X25519, one name: \(header)")
        }
        try requireAge()
        // `age -d -i id_ed25519 KEYFILE` gives an identity file; with it `age` opens the bundle.
        let identity = path("identity.txt")
        let opened = try run("/usr/bin/age", ["-d", "-i", try writeKey(reader, "reader-id"), "-o", identity, keyFile])
        XCTAssertEqual(opened.status, 0, opened.stderr)
        let (file, bytes) = try plaintext(70_000)
        let encrypted = try encrypt(file, to: [writer.publicKey], readersKey: key, as: "for-age.age")
        let out = path("age-out")
        let result = try run("/usr/bin/age", ["-d", "-i", identity, "-o", out, encrypted])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(Array(try Data(contentsOf: URL(fileURLWithPath: out))), bytes)
        let theirs = path("theirs.age")
        let sealed = try run("/usr/bin/age", ["-r", Bech32.encode(prefix: "age", key.publicKey), "-o", theirs, file])
        XCTAssertEqual(sealed.status, 0, sealed.stderr)
        XCTAssertEqual(try decrypt(theirs, with: stranger, readersKeys: [key]), bytes)
    }

    // MARK: Key files

    /// A key made for 1,100 readers (past the old cliff of 1,024) has a stanza for each of them;
    /// readers across the list (every 50th, the last, the maker: opening costs a header parse,
    /// slow in a debug build) open it and read a bundle encrypted once to it, whose header is
    /// the same size as for two readers; a key not among them cannot open the key file.
    func testEveryOneOfAThousandAndMoreReadersOpensTheKey() throws {
        let readers = (0..<1_100).map { SigningKey.generate(comment: "reader\($0)") }
        let (key, keyFile) = try makeKey(readers: readers, by: readers[17])
        XCTAssertEqual(key.readers.count, 1_100)
        XCTAssertTrue(key.name.hasPrefix(ReadersKey.readersDigest(readers.map(\.publicKey).reversed()) + "-"), "order does not matter")
        let (file, bytes) = try plaintext(10_000)
        let encrypted = try encrypt(file, to: [readers[17].publicKey], readersKey: key, as: "many.age")
        let (small, _) = try makeKey(readers: Array(readers.prefix(2)), by: readers[0])
        let fewer = try encrypt(file, to: [readers[0].publicKey], readersKey: small, as: "few.age")
        XCTAssertEqual(
            try FileManager.default.attributesOfItem(atPath: encrypted)[.size] as? Int,
            try FileManager.default.attributesOfItem(atPath: fewer)[.size] as? Int, "the size does not grow with the readers")
        let tags = try AgeFile.recipients(ofFile: keyFile).map(\.tag)
        XCTAssertEqual(Set(tags), Set(readers.map { AgeFile.tag(of: $0.publicKey) }), "one stanza per reader")
        for index in Array(stride(from: 0, to: readers.count, by: 50)) + [17, readers.count - 1] {
            let opened = try ReadersKey.open(path: keyFile, name: key.name, with: readers[index])
            XCTAssertEqual(opened.publicKey, key.publicKey, "reader \(index)")
            XCTAssertEqual(opened.maker, readers[17].publicKey)
            XCTAssertEqual(try decrypt(encrypted, with: readers[index], readersKeys: [opened]), bytes, "reader \(index)")
        }
        XCTAssertThrowsError(try ReadersKey.open(path: keyFile, name: key.name, with: SigningKey.generate(comment: "outsider"))) {
            XCTAssertEqual(($0 as? BundleError)?.kind, .notAddressed, "\($0)")
        }
    }

    /// Key files written by hand, as an attacker who can write to the mailbox would: a key
    /// signed by an outsider for the right readers, one wrapped for the outsider as well, one
    /// under another key's name, one whose secret is not its public key, one cut short. Each
    /// is refused by a reader that can decrypt it.
    func testKeyFilesMadeByOthersThanItsReadersAreRefused() throws {
        let a = SigningKey.generate(comment: "a"), b = SigningKey.generate(comment: "b")
        let outsider = SigningKey.generate(comment: "outsider")
        let (honest, honestFile) = try makeKey(readers: [a, b], by: a)
        let plainText = try String(
            decoding: {
                let descriptor = open(honestFile, O_RDONLY)
                defer { close(descriptor) }
                var status = stat()
                fstat(descriptor, &status)
                let output = try HashingFileOutput(scratchFor: honestFile)
                try AgeFile.decrypt(descriptor: descriptor, path: honestFile, fileSize: Int(status.st_size), with: b, into: output)
                return try AgeFile.readExactly(output.descriptor, 0, output.bytesWritten, path: honestFile)
            }(), as: UTF8.self)
        XCTAssertTrue(plainText.hasPrefix("# sqsync readers' key 1\n# public: age1"), plainText)

        /// Writes `text` encrypted to `keys`, as anyone with their public keys can.
        func plant(_ text: String, to keys: [SSHPublicKey], name: String) throws -> String {
            let plain = path("plant-plain")
            try? FileManager.default.removeItem(atPath: plain)
            try Data(text.utf8).write(to: URL(fileURLWithPath: plain))
            return try encrypt(plain, to: keys, readersKey: nil, as: "planted-\(UUID().uuidString.prefix(6))")
        }
        // Signed for a and b by the outsider: it must not sign as a reader.
        var lines = plainText.split(separator: "\n").map(String.init)
        let signatureIndex = try XCTUnwrap(lines.firstIndex { $0.hasPrefix("# signature: ") })
        var outsiderSigned = lines
        outsiderSigned[2] = "# made-by: " + outsider.publicKey.openSSHLine
        let outsiderFile = try plant(outsiderSigned.joined(separator: "\n") + "\n", to: [a.publicKey, b.publicKey], name: honest.name)
        XCTAssertThrowsError(try ReadersKey.open(path: outsiderFile, name: honest.name, with: b)) {
            XCTAssertTrue("\($0)".contains("not signed by one of its readers"), "\($0)")
        }
        let wrappedForMore = try plant(plainText, to: [a.publicKey, b.publicKey, outsider.publicKey], name: honest.name)
        XCTAssertThrowsError(try ReadersKey.open(path: wrappedForMore, name: honest.name, with: b)) {
            XCTAssertTrue("\($0)".contains("wrapped for someone who is not one of its readers"), "\($0)")
        }
        let (other, _) = try makeKey(readers: [a, b], by: b)
        XCTAssertThrowsError(try ReadersKey.open(path: honestFile, name: other.name, with: b)) {
            XCTAssertTrue("\($0)".contains("not what its name says"), "\($0)")
        }
        var otherSecret = lines
        otherSecret[otherSecret.count - 1] = Bech32.encode(prefix: "AGE-SECRET-KEY-", Array(Curve25519.KeyAgreement.PrivateKey().rawRepresentation)).uppercased()
        let mismatched = try plant(otherSecret.joined(separator: "\n") + "\n", to: [a.publicKey, b.publicKey], name: honest.name)
        XCTAssertThrowsError(try ReadersKey.open(path: mismatched, name: honest.name, with: b)) {
            XCTAssertTrue("\($0)".contains("its secret is not its public key's"), "\($0)")
        }
        lines.remove(at: signatureIndex)
        let unsigned = try plant(lines.joined(separator: "\n") + "\n", to: [a.publicKey, b.publicKey], name: honest.name)
        XCTAssertThrowsError(try ReadersKey.open(path: unsigned, name: honest.name, with: b)) {
            XCTAssertNotNil($0 as? BundleError, "\($0)")
        }
        let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: honestFile)))
        let cut = path("cut")
        try Data(bytes.prefix(bytes.count - 5)).write(to: URL(fileURLWithPath: cut))
        XCTAssertThrowsError(try ReadersKey.open(path: cut, name: honest.name, with: b)) {
            XCTAssertNotNil($0 as? BundleError, "\($0)")
        }
        XCTAssertEqual(try ReadersKey.open(path: honestFile, name: honest.name, with: b).publicKey, honest.publicKey)
    }
}
