import Crypto
import Foundation
import Glibc

@testable import Bundle

/// A readers' key file as a stolen reader's key can write it by hand, with sqsync's own age
/// pieces (an exporter never writes one): the genuine content, signed by `maker`, for exactly
/// `readers`, every stanza carrying the file key but `victim`'s, which wraps another. Every
/// reader but the victim opens it; a writer, which can check only its own stanza, cannot tell.
public enum PoisonedReadersKey {
    /// Writes such a file into `mailbox`'s `sqsync/keys/` under its genuine name, which it
    /// returns; `scratch` holds the genuine file while it is taken apart.
    public static func plant(
        readers: [SigningKey], maker: SigningKey, victim: SigningKey, inMailbox mailbox: String, scratch: String
    ) throws -> String {
        let keysFolder = mailbox + "/sqsync/keys"
        try FileManager.default.createDirectory(atPath: keysFolder, withIntermediateDirectories: true)
        let staged = scratch + "/staged-\(UUID().uuidString).age"
        defer { try? FileManager.default.removeItem(atPath: staged) }
        let key = try ReadersKey.make(readers: readers.map(\.publicKey), signingKey: maker, writingTo: staged)
        let descriptor = open(staged, O_RDONLY)
        defer { close(descriptor) }
        var status = stat()
        guard descriptor >= 0, fstat(descriptor, &status) == 0 else { throw CocoaError(.fileReadUnknown) }
        let plaintext = try HashingFileOutput(scratchFor: staged, in: scratch)
        try AgeFile.decrypt(descriptor: descriptor, path: staged, fileSize: Int(status.st_size), with: maker, into: plaintext)
        let content = try HashingFileInput(descriptor: plaintext.descriptor, path: staged, range: 0..<plaintext.bytesWritten)
            .readBytes(plaintext.bytesWritten)

        let fileKey = SymmetricKey(size: .bits128), otherKey = SymmetricKey(size: .bits128)
        var header = AgeFile.magic
        for reader in readers {
            guard let stanza = try AgeFile.wrap(reader.publicKey == victim.publicKey ? otherKey : fileKey, for: reader.publicKey)
            else { throw CocoaError(.featureUnsupported) }
            header += stanza
        }
        header += Array("---".utf8)
        let mac = HMAC<SHA256>.authenticationCode(for: header, using: AgeFile.headerKey(fileKey))
        header += Array((" " + AgeFile.base64(Array(mac)) + "\n").utf8)
        let nonce = (0..<16).map { _ in UInt8.random(in: 0...255) }
        let sealed = try ChaChaPoly.seal(
            content, using: AgeFile.payloadKey(fileKey, nonce: nonce), nonce: AgeFile.chunkNonce(0, last: true))
        try Data(header + nonce + Array(sealed.ciphertext) + Array(sealed.tag))
            .write(to: URL(fileURLWithPath: keysFolder + "/" + key.name))
        return key.name
    }
}
