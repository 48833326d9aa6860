import Bundle
import ChangeLog
import SQLiteDatabase
import Crypto
import FoundationEssentials
import Glibc

/// What a replica left in a mailbox's `acks/<knowledge-id>/` folder: the knowledge it holds,
/// signed like a bundle (SSHSIG, namespace `sqsync`, by a key in the reader's
/// `allowed_signers`).
///
/// Acknowledgements decide what a sync leaves for the others and which bundles it removes,
/// so an unsigned one would let anyone who can write to the folder (or the stick) make a peer
/// skip exporting changes, or have a bundle removed before its reader took it. The signed
/// text names the replica, so a valid file copied into another replica's folder is refused.
///
///     sqsync-ack 1
///     replica <knowledge-id>
///     name <name>
///     knowledge <id>:<seq>,<id>:<seq>
///     learned <id>:<previous>:<reached>:<own-seq>,…     (see ``LearningEvent``)
///     birth <hex>                                      (the replica's birth, ``ReplicaIdentity``; absent when empty)
///     unopened <key-file>,…                            (readers' keys it could not open; absent when none)
///     damaged <bundle-file>,…                          (bundles it found damaged; absent when none)
///     written <ms>                                     (when it was written: its file name's stamp; absent before 0.5)
///     statement <counter> <folded> <signature base64>  (its acknowledgement statement, whose knowledge is the line above; absent before 0.6)
///     statement <base64>                               (or the whole statement, as bundles carry it, when its knowledge is another)
///     -----BEGIN SSH SIGNATURE-----      (over every byte above this line)
///     …
///     -----END SSH SIGNATURE-----
struct MailboxAcknowledgement {
    static let magic = "sqsync-ack 1"
    /// An acknowledgement file is a few lines per replica; a larger one is not read.
    static let maxBytes = 1 << 20
    /// Bundles' namespace: `allowed_signers` lines limit sqsync keys to it. The signed text
    /// starts with ``magic``, never with a bundle's magic, so one cannot pass for the other.
    static let namespace = "sqsync"

    var replica: String
    var name: String
    var knowledge: Knowledge
    /// The replica's latest ``LearningEvent`` per other replica.
    var learned: [String: LearningEvent] = [:]
    /// The replica's birth: with the key that signs the file, it proves the replica's ID.
    var birth: [UInt8] = []
    /// Readers' key files of this mailbox the replica could not open (a damaged file, or a
    /// stanza not for its key, as a key planted by another reader's stolen key would have):
    /// a writer that encrypts to one moves to a key of its own.
    var unopened: [String] = []
    /// Bundle files of this mailbox the replica found damaged (truncated: a stick pulled while
    /// one was written): their writer leaves each again under another name.
    var damaged: [String] = []
    /// At most this many of each are said (the rest next time): a few lines per replica.
    static let maxNamedFiles = 16
    /// When the replica wrote it (Unix ms), the stamp its file name starts with, signed: a copy
    /// of the file under another name is a replay, not a newer word.
    var written: UInt64?
    /// The replica's own acknowledgement statement (signed on its own, as bundles carry it),
    /// as the file holds it: readers keep it and relay it in their bundles, so the replica's
    /// word reaches replicas beyond this mailbox whether or not it has changes to send. When
    /// its knowledge is the file's, only its counter, fold and signature are written, so the
    /// file does not list every replica twice. Decoded only where needed (``statement``):
    /// every sync reads every reader's file from its cache.
    var statementText: String?

    /// The line for `statement`, given the file's `knowledge`.
    static func statementText(_ statement: AcknowledgementStatement, knowledge: Knowledge) throws -> String {
        guard statement.knowledge == knowledge else { return Data(try statement.stored()).base64EncodedString() }
        return "\(statement.counter) \(statement.countersFolded) " + Data(statement.signature).base64EncodedString()
    }

    var statement: AcknowledgementStatement? {
        guard let statementText else { return nil }
        let parts = statementText.split(separator: " ")
        if parts.count == 3, let counter = Int64(parts[0]), let folded = Int64(parts[1]),
            let signature = Data(base64Encoded: String(parts[2])), signature.count == 64
        {
            return AcknowledgementStatement(
                replica: replica, counter: counter, countersFolded: folded, knowledge: knowledge, signature: Array(signature))
        }
        return Data(base64Encoded: statementText).flatMap { try? AcknowledgementStatement(stored: Array($0)) }
    }

    /// The file's whole text, signed with `key`.
    func signedText(key: SigningKey) throws -> String {
        let events: [String] = learned.sorted { $0.key < $1.key }.map {
            "\($0.key):\($0.value.previous):\($0.value.reached):\($0.value.ownSeq)"
        }
        var lines: [String] = [
            Self.magic, "replica \(replica)", "name \(name.filter { !$0.isNewline })", "knowledge \(knowledge)",
            "learned " + events.joined(separator: ","),
        ]
        if !birth.isEmpty { lines.append("birth " + hexString(birth)) }
        if !unopened.isEmpty { lines.append("unopened " + unopened.prefix(Self.maxNamedFiles).joined(separator: ",")) }
        if !damaged.isEmpty { lines.append("damaged " + damaged.prefix(Self.maxNamedFiles).joined(separator: ",")) }
        if let written { lines.append("written \(written)") }
        if let statementText { lines.append("statement " + statementText) }
        lines.append("")
        let payload = lines.joined(separator: "\n")
        let signature = try SSHSignature.sign(
            messageDigest: SHA512.hash(data: Data(payload.utf8)), namespace: Self.namespace, key: key)
        return payload + signature.armored + (signature.armored.hasSuffix("\n") ? "" : "\n")
    }

    /// Reads a file left in `acks/<expectedReplica>/`; throws a one-line reason (without the
    /// file's name) when it is not signed by a trusted key or speaks for another replica.
    /// Returns the acknowledgement, the signer's principal and key (whose binding to the
    /// replica ``KeyBinding`` checks).
    /// `learnedAbout`: the one replica whose ``LearningEvent`` the reader needs (its own: what
    /// an import judges by); nil reads every event.
    static func verified(
        _ text: String, expectedReplica: String, trust: AllowedSigners, learnedAbout: String? = nil
    ) throws -> (acknowledgement: MailboxAcknowledgement, signer: String, key: SSHPublicKey) {
        try read(text, expectedReplica: expectedReplica, trust: trust, checkingSignature: true, learnedAbout: learnedAbout)
    }

    /// Reads a file whose signature was checked when it was first read (``verified(_:expectedReplica:trust:)``),
    /// from the sync cache: the signer must still be trusted, the Ed25519 check is not repeated.
    static func alreadyVerified(
        _ text: String, expectedReplica: String, trust: AllowedSigners, learnedAbout: String? = nil
    ) throws -> (acknowledgement: MailboxAcknowledgement, signer: String, key: SSHPublicKey) {
        try read(text, expectedReplica: expectedReplica, trust: trust, checkingSignature: false, learnedAbout: learnedAbout)
    }

    private static let armorMarker = Array("-----BEGIN SSH SIGNATURE-----".utf8)

    /// Where `needle` first starts in `haystack` (a file of a hundred bytes or so per replica,
    /// read once per reader by every sync).
    private static func firstIndex(of needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard let lead = needle.first, haystack.count >= needle.count else { return nil }
        return haystack.withUnsafeBufferPointer { hay in
            needle.withUnsafeBufferPointer { pin in
                (0...(hay.count - pin.count)).first { hay[$0] == lead && memcmp(hay.baseAddress! + $0, pin.baseAddress!, pin.count) == 0 }
            }
        }
    }

    private static func read(
        _ text: String, expectedReplica: String, trust: AllowedSigners, checkingSignature: Bool, learnedAbout: String?
    ) throws -> (acknowledgement: MailboxAcknowledgement, signer: String, key: SSHPublicKey) {
        let bytes = Array(text.utf8)
        guard let armor = firstIndex(of: armorMarker, in: bytes) else {
            throw TransportError(.io, "not signed")
        }
        let payload = String(decoding: bytes[..<armor], as: UTF8.self)
        let signature: SSHSignature
        do {
            signature = try SSHSignature(armored: String(decoding: bytes[armor...], as: UTF8.self))
        } catch {
            throw TransportError(.io, "damaged signature")
        }
        guard
            !checkingSignature
                || signature.isValid(messageDigest: SHA512.hash(data: Data(payload.utf8)), namespace: namespace)
        else {
            throw TransportError(.io, "bad signature: the file was altered after it was signed")
        }
        guard let signer = trust.principal(for: signature.publicKey, namespace: namespace) else {
            // The usual cause: the sites never exchanged their allowed_signers lines.
            let name = payload.split(separator: "\n").first { $0.hasPrefix("name ") }.map { String($0.dropFirst(5)) }
            let who = checkingSignature ? name.map { " (replica \(displayText($0)))" } ?? "" : ""
            throw TransportError(
                .io,
                "signed by an untrusted key \(signature.publicKey.fingerprint)\(who); if you trust it, add this line to \(trust.fileName): \(AllowedSigners.suggestedLine(for: signature.publicKey, name: checkingSignature ? name : nil))"
            )
        }
        // Byte by byte: the knowledge and learned lines list every replica.
        var fields: [String: String] = [:]
        var lineStart = 0
        while lineStart < armor {
            let lineEnd = bytes[lineStart..<armor].firstIndex(of: UInt8(ascii: "\n")) ?? armor
            let line = bytes[lineStart..<lineEnd]
            if lineStart == 0 {
                guard line.elementsEqual(magic.utf8) else { throw TransportError(.io, "not an acknowledgement") }
            } else if let space = line.firstIndex(of: UInt8(ascii: " ")) {
                fields[String(decoding: line[..<space], as: UTF8.self)] = String(decoding: line[(space + 1)...], as: UTF8.self)
            }
            lineStart = lineEnd + 1
        }
        guard let replica = fields["replica"], let knowledgeText = fields["knowledge"],
            let knowledge = try? Knowledge(parsing: knowledgeText)
        else {
            throw TransportError(.io, "not an acknowledgement")
        }
        guard replica == expectedReplica else {
            throw TransportError(.io, "speaks for replica \(replica), not \(expectedReplica)")
        }
        var learned: [String: LearningEvent] = [:]
        let events = Substring(fields["learned"] ?? "").utf8.split(separator: UInt8(ascii: ","))
        if let learnedAbout {
            let wanted = Array((learnedAbout + ":").utf8)
            for entry in events where entry.starts(with: wanted) { learned[learnedAbout] = try Self.learningEvent(Substring(entry)) }
        } else {
            for entry in events.map(Substring.init) { learned[String(entry.prefix { $0 != ":" })] = try Self.learningEvent(entry) }
        }
        var birth: [UInt8] = []
        if let hex = fields["birth"] {
            let digits = Array(hex.utf8)
            guard digits.count <= 64, digits.count % 2 == 0 else { throw TransportError(.io, "not an acknowledgement") }
            for index in stride(from: 0, to: digits.count, by: 2) {
                guard let byte = UInt8(String(decoding: digits[index..<(index + 2)], as: UTF8.self), radix: 16) else {
                    throw TransportError(.io, "not an acknowledgement")
                }
                birth.append(byte)
            }
        }
        // Only names a key file can have, and a few: anything else is not a readers' key.
        let unopened = (fields["unopened"] ?? "").split(separator: ",").map(String.init).filter(ReadersKey.isFileName)
            .prefix(Self.maxNamedFiles)
        let damaged = (fields["damaged"] ?? "").split(separator: ",").map(String.init).filter(BundleExchange.isBundleFileName)
            .prefix(Self.maxNamedFiles)
        return (
            MailboxAcknowledgement(
                replica: replica, name: fields["name"] ?? "", knowledge: knowledge, learned: learned, birth: birth,
                unopened: Array(unopened), damaged: Array(damaged), written: fields["written"].flatMap { UInt64($0) },
                statementText: fields["statement"]),
            signer,
            signature.publicKey
        )
    }

    /// One `id:previous:reached:own` entry of the `learned` line.
    private static func learningEvent(_ entry: Substring) throws -> LearningEvent {
        let parts = entry.split(separator: ":")
        guard parts.count == 4, let previous = Int64(parts[1]), let reached = Int64(parts[2]), let own = Int64(parts[3]) else {
            throw TransportError(.io, "not an acknowledgement")
        }
        return LearningEvent(previous: previous, reached: reached, ownSeq: own)
    }
}
