import Crypto
import Foundation
import TestSupport
import XCTest

@testable import Bundle

/// Encrypted bundles (docs/BUNDLE_FORMAT.md, "Encryption"): age files to `ssh-ed25519` keys.
/// The conversion of an Ed25519 key to X25519 against known vectors and against swift-crypto;
/// our files against the standard `age` tool both ways; and files altered by hand refused.
final class EncryptionTests: AgeFileTestCase {
    private func hex(_ text: String) -> [UInt8] {
        var bytes: [UInt8] = []
        var index = text.startIndex
        while index < text.endIndex {
            let next = text.index(index, offsetBy: 2)
            bytes.append(UInt8(text[index..<next], radix: 16)!)
            index = next
        }
        return bytes
    }

    // MARK: Base64

    /// Age's base64 reader against Foundation's: the same bytes for every canonical unpadded
    /// text, and a refusal of padding, stray bits, a length of 1 modulo 4 and
    /// characters outside the alphabet.
    func testBase64ReadsWhatFoundationReadsAndRefusesTheRest() {
        var generator = SystemRandomNumberGenerator()
        for length in 0..<70 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let text = AgeFile.base64(bytes)
            XCTAssertEqual(AgeFile.decodeBase64(text), bytes, "\(length) bytes")
            if length % 3 != 0 {
                XCTAssertNil(AgeFile.decodeBase64(text + "="), "padding")
                // The last character with a stray low bit set reads as other bytes, never these.
                let last = text.utf8.last!
                let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
                let stray = alphabet[alphabet.firstIndex(of: last)! | 1]
                if stray != last {
                    XCTAssertNil(AgeFile.decodeBase64(String(text.dropLast()) + String(UnicodeScalar(stray))), "stray bits")
                }
            }
        }
        XCTAssertNil(AgeFile.decodeBase64("QUJD\u{e9}"))
        XCTAssertNil(AgeFile.decodeBase64("QUJ-"))
        XCTAssertNil(AgeFile.decodeBase64("Q"))
        XCTAssertNil(AgeFile.decodeBase64("QUJDR"))
        XCTAssertEqual(AgeFile.decodeBase64("QUJD"), Array("ABC".utf8))
        XCTAssertEqual(AgeFile.decodeBase64(""), [])
    }

    // MARK: Ed25519 to X25519

    /// libsodium's `ed25519_convert` test: the seed 421151a4… gives this X25519 key pair.
    func testConversionMatchesLibsodiumsVector() throws {
        let seed = hex("421151a459faeade3d247115f94aedae42318124095afabe4d1451a559faedee")
        let signing = try Curve25519.Signing.PrivateKey(rawRepresentation: seed)
        let edwards = try SSHPublicKey(rawRepresentation: Array(signing.publicKey.rawRepresentation))
        XCTAssertEqual(
            EdwardsToMontgomery.publicKey(edwards), hex("f1814f0e8ff1043d8a44d25babff3cedcae6c22c3edaa48f857ae70de2baae50"))
        let scalar = Array(EdwardsToMontgomery.privateKey(seed: seed).rawRepresentation)
        // libsodium clamps the scalar it prints; X25519 clamps it when it is used.
        var clamped = scalar
        clamped[0] &= 248
        clamped[31] &= 127
        clamped[31] |= 64
        XCTAssertEqual(clamped, hex("8052030376d47112be7f73ed7a019293dd12ad910b654455798b4667d73de166"))
    }

    /// For any key pair, the u-coordinate of the Ed25519 public key is the X25519 public key
    /// of the converted private scalar: the field arithmetic agrees with swift-crypto's.
    func testConvertedPublicKeyIsThePrivateScalarsPublicKey() throws {
        for _ in 0..<200 {
            let key = SigningKey.generate(comment: "k")
            let converted = EdwardsToMontgomery.publicKey(key.publicKey)
            XCTAssertEqual(converted, Array(EdwardsToMontgomery.privateKey(seed: key.seedBytes).publicKey.rawRepresentation))
        }
    }

    func testFieldArithmetic() {
        let p = FieldElement.modulus
        // p − 1 squared is 1; (p − 1) + 1 is 0; 0 − 1 is p − 1.
        var bytes = (0..<32).map { UInt8(truncatingIfNeeded: p[$0 / 8] >> (8 * UInt64($0 % 8))) }
        bytes[0] -= 1
        let minusOne = FieldElement(littleEndian: bytes)
        XCTAssertEqual(minusOne * minusOne, FieldElement.one)
        XCTAssertTrue((minusOne + FieldElement.one).isZero)
        XCTAssertEqual(FieldElement(littleEndian: [UInt8](repeating: 0, count: 32)) - FieldElement.one, minusOne)
        var random = SystemRandomNumberGenerator()
        for _ in 0..<100 {
            var raw = (0..<32).map { _ in UInt8.random(in: 0...255, using: &random) }
            raw[31] &= 0x7f
            let a = FieldElement(littleEndian: raw)
            guard !a.isZero else { continue }
            XCTAssertEqual(a * a.inverse, FieldElement.one)
        }
        // The neutral point (y = 1) has no u-coordinate.
        var neutral = [UInt8](repeating: 0, count: 32)
        neutral[0] = 1
        XCTAssertNil(EdwardsToMontgomery.publicKey(try! SSHPublicKey(rawRepresentation: neutral)))
    }

    // MARK: Round trips

    private func plaintextFile(_ count: Int) throws -> (path: String, bytes: [UInt8]) {
        var generator = SplitMix64(seed: UInt64(count) &+ 7)
        let bytes = (0..<count).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
        let file = path("plain-\(count)")
        try Data(bytes).write(to: URL(fileURLWithPath: file))
        return (file, bytes)
    }

    /// Empty, one byte, one chunk exactly, a chunk and a byte, several chunks: each comes back.
    func testRoundTripAtChunkEdges() throws {
        let keys = (0..<3).map { SigningKey.generate(comment: "reader\($0)") }
        for count in [0, 1, 65_536, 65_537, 200_000] {
            let (file, bytes) = try plaintextFile(count)
            let encrypted = try encrypt(file, to: keys.map(\.publicKey), as: "e-\(count).age")
            for key in keys { XCTAssertEqual(try decrypt(encrypted, with: key), bytes, "\(count) bytes") }
        }
    }

    /// A key the file is not for, a changed byte anywhere, a cut file: each refused, naming it.
    func testOtherKeysAlterationsAndTruncationsAreRefused() throws {
        let reader = SigningKey.generate(comment: "reader"), stranger = SigningKey.generate(comment: "stranger")
        let (file, _) = try plaintextFile(150_000)
        let encrypted = try encrypt(file, to: [reader.publicKey], as: "e.age")
        XCTAssertThrowsError(try decrypt(encrypted, with: stranger)) { error in
            XCTAssertEqual((error as? BundleError)?.kind, .notAddressed, "\(error)")
            XCTAssertTrue("\(error)".contains("not addressed to this replica's key"), "\(error)")
        }
        let original = Array(try Data(contentsOf: URL(fileURLWithPath: encrypted)))
        let headerEnd = original.firstIndex(of: UInt8(ascii: "-"))! + 200
        for (what, position) in [("the share", 40), ("the MAC", headerEnd - 150), ("the nonce", headerEnd), ("a chunk", 100_000), ("the last tag", original.count - 1)] {
            var altered = original
            altered[position] ^= 0x01
            let file = path("altered.age")
            try Data(altered).write(to: URL(fileURLWithPath: file))
            XCTAssertThrowsError(try decrypt(file, with: reader), what) { error in
                XCTAssertNotNil(error as? BundleError, "\(what): \(error)")
            }
        }
        for cut in [original.count - 1, original.count - 17, 65_536 + 16 + 200, 120] {
            let file = path("cut.age")
            try Data(original.prefix(cut)).write(to: URL(fileURLWithPath: file))
            XCTAssertThrowsError(try decrypt(file, with: reader), "cut at \(cut)") { error in
                XCTAssertNotNil(error as? BundleError, "cut at \(cut): \(error)")
            }
        }
    }

    /// A stanza whose share is a low-order point (here u = 0) gives an all-zero shared secret,
    /// which age refuses and swift-crypto does not: refused before any MAC or chunk is read.
    func testALowOrderShareIsRefused() throws {
        let reader = SigningKey.generate(comment: "reader")
        let (file, _) = try plaintextFile(100)
        let encrypted = try encrypt(file, to: [reader.publicKey], as: "low.age")
        var text = String(decoding: try Data(contentsOf: URL(fileURLWithPath: encrypted)), as: UTF8.self)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        let stanza = lines[1].split(separator: " ")
        let zero = AgeFile.base64([UInt8](repeating: 0, count: 32))
        text = text.replacingOccurrences(of: String(lines[1]), with: "\(stanza[0]) \(stanza[1]) \(stanza[2]) \(zero)")
        let altered = path("low-altered.age")
        try Data(text.utf8).write(to: URL(fileURLWithPath: altered))
        XCTAssertThrowsError(try decrypt(altered, with: reader)) { error in
            XCTAssertTrue("\(error)".contains("all-zero"), "\(error)")
        }
    }

    /// A header of thousands of stanzas naming this key's tag is refused after the cap, not
    /// tried one X25519 at a time.
    func testAHeaderOfManyStanzasIsRefused() throws {
        let reader = SigningKey.generate(comment: "reader")
        let tag = AgeFile.base64(AgeFile.tag(of: reader.publicKey))
        let share = AgeFile.base64([UInt8](repeating: 9, count: 32))
        let body = AgeFile.base64([UInt8](repeating: 1, count: 32))
        let stanza = "-> ssh-ed25519 \(tag) \(share)\n\(body)\n"
        let text = "age-encryption.org/v1\n" + String(repeating: stanza, count: AgeFile.maxStanzas + 1) + "--- " + body + "\n"
        let file = path("many.age")
        try Data(text.utf8).write(to: URL(fileURLWithPath: file))
        XCTAssertThrowsError(try decrypt(file, with: reader)) { error in
            XCTAssertTrue("\(error)".contains("more than \(AgeFile.maxStanzas) recipients"), "\(error)")
        }
    }

    /// More than 1,024 readers (the old cliff): every one of them reads, the first, the last
    /// and one in the middle checked; one recipient more than readers accept is refused by the
    /// writer, so it never leaves a file nobody can open.
    func testAThousandAndMoreReadersAllReadAndTheWriterKeepsToTheReadersLimit() throws {
        let keys = (0..<1_100).map { SigningKey.generate(comment: "reader\($0)") }
        let (file, bytes) = try plaintextFile(70_000)
        let encrypted = try encrypt(file, to: keys.map(\.publicKey), as: "many-readers.age")
        for index in [0, 549, 1_099] { XCTAssertEqual(try decrypt(encrypted, with: keys[index]), bytes, "reader \(index)") }

        let tooMany = Array(repeating: keys[0].publicKey, count: AgeFile.maxStanzas + 1)
        XCTAssertThrowsError(try encrypt(file, to: tooMany, as: "too-many.age")) { error in
            XCTAssertTrue("\(error)".contains("more than the \(AgeFile.maxStanzas)"), "\(error)")
        }
    }

    // MARK: The standard age tool

    /// `age -d -i KEY` decrypts what we wrote for several recipients, with each one's key.
    func testAgeDecryptsOurFiles() throws {
        try requireAge()
        let keys = (0..<3).map { SigningKey.generate(comment: "reader\($0)") }
        let (file, bytes) = try plaintextFile(140_000)
        let encrypted = try encrypt(file, to: keys.map(\.publicKey), as: "ours.age")
        for (index, key) in keys.enumerated() {
            let out = path("age-out-\(index)")
            let result = try run("/usr/bin/age", ["-d", "-i", try writeKey(key, "id\(index)"), "-o", out, encrypted])
            XCTAssertEqual(result.status, 0, result.stderr)
            XCTAssertEqual(Array(try Data(contentsOf: URL(fileURLWithPath: out))), bytes)
        }
    }

    /// We decrypt what `age -R KEY.pub` wrote, for one recipient and for several.
    func testWeDecryptAgesFiles() throws {
        try requireAge()
        let keys = (0..<2).map { SigningKey.generate(comment: "reader\($0)") }
        let recipients = path("recipients.pub")
        try keys.map(\.publicKey.openSSHLine).joined(separator: "\n").write(toFile: recipients, atomically: true, encoding: .utf8)
        for count in [0, 70_000] {
            let (file, bytes) = try plaintextFile(count)
            let encrypted = path("theirs-\(count).age")
            let result = try run("/usr/bin/age", ["-R", recipients, "-o", encrypted, file])
            XCTAssertEqual(result.status, 0, result.stderr)
            for key in keys { XCTAssertEqual(try decrypt(encrypted, with: key), bytes) }
        }
    }
}
