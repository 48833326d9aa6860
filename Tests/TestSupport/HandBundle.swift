import Crypto
import Foundation

/// Bundles written by hand from docs/BUNDLE_FORMAT.md, byte by byte, as an attacker would:
/// nothing here goes through sqsync's exporter or its checks, so a test can write what the
/// exporter never would (another replica's stamps, a forged knowledge claim, a planted
/// table, an oversized value) and check that readers refuse it.

/// An Ed25519 key made by the test, written as OpenSSH files `sqsync --key` reads.
public struct HandKey {
    public let name: String
    let privateKey: Curve25519.Signing.PrivateKey
    /// The birth of the replica made with this key (``replicaID``); empty for an ID made from
    /// the key alone, as sqsync 0.2 and 0.3 made them.
    public var birth: [UInt8] = []

    public init(_ name: String) {
        self.name = name
        privateKey = Curve25519.Signing.PrivateKey()
    }

    public var publicKey: [UInt8] { Array(privateKey.publicKey.rawRepresentation) }

    /// The key and birth an envelope names as a replica's identity.
    public var identity: HandIdentity { HandIdentity(key: publicKey, birth: birth) }

    /// The SSH wire form of the public key.
    var wireBlob: [UInt8] { Wire.string(Array("ssh-ed25519".utf8)) + Wire.string(publicKey) }

    public var openSSHLine: String { "ssh-ed25519 " + Data(wireBlob).base64EncodedString() }

    /// `NAME namespaces="sqsync" ssh-ed25519 BASE64`.
    /// As `ssh-keygen -l` prints it.
    public var fingerprint: String {
        "SHA256:" + Data(SHA256.hash(data: wireBlob)).base64EncodedString().replacingOccurrences(of: "=", with: "")
    }
    public var allowedSignersLine: String { "\(name) namespaces=\"sqsync\" \(openSSHLine)" }

    /// The knowledge ID a replica born with this key and ``birth`` has:
    /// SHA-256("sqsync-replica-id\0" ‖ key ‖ birth), first 16 bytes, as a version-8 UUID.
    public var replicaID: String {
        var bytes = Array(SHA256.hash(data: Array("sqsync-replica-id\u{0}".utf8) + publicKey + birth).prefix(16))
        bytes[6] = bytes[6] & 0x0f | 0x80
        bytes[8] = bytes[8] & 0x3f | 0x80
        return UUID(uuid: bytes.withUnsafeBytes { $0.loadUnaligned(as: uuid_t.self) }).uuidString.lowercased()
    }

    /// Writes the private key (OpenSSH format, unencrypted) at `path` and its `.pub` beside it.
    public func write(to path: String) throws {
        let seed = Array(privateKey.rawRepresentation)
        var secret = Wire.u32(0x5a17_5a17) + Wire.u32(0x5a17_5a17)
        secret += Wire.string(Array("ssh-ed25519".utf8)) + Wire.string(publicKey) + Wire.string(seed + publicKey)
        secret += Wire.string(Array(name.utf8))
        var pad: UInt8 = 1
        while secret.count % 8 != 0 {
            secret.append(pad)
            pad += 1
        }
        var body = Array("openssh-key-v1\u{0}".utf8) + Wire.string(Array("none".utf8)) + Wire.string(Array("none".utf8))
        body += Wire.string([]) + Wire.u32(1) + Wire.string(wireBlob) + Wire.string(secret)
        let base64 = Data(body).base64EncodedString()
        var lines = ["-----BEGIN OPENSSH PRIVATE KEY-----"]
        var rest = Substring(base64)
        while !rest.isEmpty {
            lines.append(String(rest.prefix(70)))
            rest = rest.dropFirst(70)
        }
        lines.append("-----END OPENSSH PRIVATE KEY-----")
        try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o600)
        try (openSSHLine + " " + name + "\n").write(toFile: path + ".pub", atomically: true, encoding: .utf8)
    }

    /// SSHSIG's signed data for `message` in namespace `sqsync`, signed: what sqsync's own
    /// messages (segment headers, statements, moves) carry, 64 bytes.
    public func sign(_ message: [UInt8], namespace: String = "sqsync") -> [UInt8] {
        Array(try! privateKey.signature(for: Self.signedData(message, namespace: namespace)))
    }

    static func signedData(_ message: [UInt8], namespace: String = "sqsync") -> [UInt8] {
        Array("SSHSIG".utf8) + Wire.string(Array(namespace.utf8)) + Wire.string([]) + Wire.string(Array("sha512".utf8))
            + Wire.string(Array(SHA512.hash(data: message)))
    }

    /// An admin statement (docs/SCOPES.md) with `json` as its act, signed in `namespace`
    /// (`sqsync-admin` unless a test tries another).
    public func adminStatement(json: String, issued: Int64, namespace: String = "sqsync-admin") -> [UInt8] {
        let message = Array("SQSYNC-ADMIN-1\n".utf8) + publicKey + Wire.varint(UInt64(issued)) + Array(json.utf8)
        return message + sign(message, namespace: namespace)
    }

    /// Its allowed_signers line with the admin namespace too.
    public var adminSignersLine: String { "\(name) namespaces=\"sqsync,sqsync-admin\" \(openSSHLine)" }

    /// The SSHSIG blob (PROTOCOL.sshsig) over `message`, as a bundle's trailer holds it.
    func sshsigBlob(_ message: [UInt8]) -> [UInt8] {
        let signature = Wire.string(Array("ssh-ed25519".utf8)) + Wire.string(sign(message))
        return Array("SSHSIG".utf8) + Wire.u32(1) + Wire.string(wireBlob) + Wire.string(Array("sqsync".utf8))
            + Wire.string([]) + Wire.string(Array("sha512".utf8)) + Wire.string(signature)
    }
}

/// A stamp as a record carries it: `site` 0 is the segment's origin (anything else is what
/// a forger would write).
public struct HandStamp: Sendable {
    public var hlc: Int64
    public var seq: Int64
    public var site: UInt64

    public init(hlc: Int64, seq: Int64, site: UInt64 = 0) {
        self.hlc = hlc
        self.seq = seq
        self.site = site
    }
}

/// A value of the format's five kinds.
public enum HandValue: Sendable {
    case null, integer(Int64), real(Double), text(String), blob([UInt8])
    /// A TEXT whose length field says `length` but that holds only `actual` bytes.
    case textClaiming(length: UInt64, actual: [UInt8])
}

/// One row record: an insert (a row stamp with every non-key column), a delete (a row stamp,
/// an even causal length, no columns), or column updates (no row stamp).
public struct HandRecord {
    public var table: Int
    public var key: [HandValue]
    public var causalLength: Int64
    public var rowStamp: HandStamp?
    /// Column index and value; each with its own stamp, or the row's when nil.
    public var columns: [(Int, HandValue, HandStamp?)]

    public init(table: Int = 0, key: [HandValue], causalLength: Int64 = 1, rowStamp: HandStamp?, columns: [(Int, HandValue, HandStamp?)]) {
        self.table = table
        self.key = key
        self.causalLength = causalLength
        self.rowStamp = rowStamp
        self.columns = columns
    }
}

/// One origin's segment.
public struct HandSegment {
    public var origin: String
    public var originName = ""
    public var base: Int64
    public var last: Int64
    public var created: Int64
    /// What the origin held; its own entry is added as `last` unless given.
    public var knowledge: [String: Int64] = [:]
    /// Name, columns, key column indexes.
    public var tables: [(String, [String], [Int])]
    public var records: [HandRecord]
    /// Who signs the header (normally the origin's key).
    public var signer: HandKey
    /// Chunk bytes changed after the header was signed (an altered relay).
    public var alterChunkAfterSigning = false
    /// Capabilities the header names (none by default: every table `lww`).
    public var capabilities: [String] = []
    /// The admin statements (their 16-byte ids) the segment says its changes were made under
    /// (capability `admin-statements`).
    public var adminStatements: [[UInt8]] = []
    /// The labels the segment says it was cut for (capability `scope`); nil: every row.
    public var scope: [String]?
    /// The chunks as given, instead of one chunk of ``records`` (see ``recordBytes()``): for
    /// records cut, miscounted or compressed otherwise than a writer would.
    public var chunks: [HandChunk]?

    public init(
        origin: String, base: Int64, last: Int64, created: Int64, tables: [(String, [String], [Int])], records: [HandRecord],
        signer: HandKey
    ) {
        self.origin = origin
        self.base = base
        self.last = last
        self.created = created
        self.tables = tables
        self.records = records
        self.signer = signer
    }

    /// Each record as the chunk holds it, in order (stamps are coded against the previous
    /// record's, so the records only read back in this order, whatever the chunks).
    public func recordBytes() -> [[UInt8]] {
        var previousHLC: Int64 = 0, previousSeq: Int64 = 0
        func stamp(_ stamp: HandStamp) -> [UInt8] {
            defer { (previousHLC, previousSeq) = (stamp.hlc, stamp.seq) }
            return Wire.zigzag(stamp.hlc &- previousHLC) + Wire.varint(stamp.site) + Wire.zigzag(stamp.seq &- previousSeq)
        }
        return records.map { record in
            var raw: [UInt8] = [0x01 | (record.rowStamp != nil ? 0x02 : 0)]
            raw += Wire.varint(UInt64(record.table)) + Wire.varint(UInt64(record.causalLength))
            if let rowStamp = record.rowStamp { raw += stamp(rowStamp) }
            for value in record.key { raw += Wire.value(value) }
            raw += Wire.varint(UInt64(record.columns.count))
            for (column, value, own) in record.columns {
                raw += Wire.varint(UInt64(column)) + Wire.value(value)
                if let own {
                    raw.append(1)
                    raw += stamp(own)
                } else {
                    raw.append(0)
                }
            }
            return raw
        }
    }

    func bytes() -> [UInt8] {
        let raw = recordBytes().flatMap { $0 }
        let chunks = chunks ?? (records.isEmpty ? [] : [HandChunk(raw: raw, records: records.count)])
        var header = Array("SQSYNC-SEGMENT-3\n".utf8) + Wire.id(origin) + Wire.text(originName)
        header += Wire.varint(UInt64(base)) + Wire.varint(UInt64(last)) + Wire.varint(UInt64(created)) + [0]
        let named = capabilities + (adminStatements.isEmpty ? [] : ["admin-statements"]) + (scope == nil ? [] : ["scope"])
        header += Wire.varint(UInt64(named.count))
        for capability in named { header += Wire.text(capability) }
        var known = knowledge
        known[origin] = known[origin] ?? last
        let entries = known.filter { $0.value > 0 }.sorted { $0.key < $1.key }
        header += Wire.varint(UInt64(entries.count))
        for (id, seq) in entries { header += Wire.id(id) + Wire.varint(UInt64(seq)) }
        header += Wire.varint(0)
        header += Wire.varint(UInt64(tables.count))
        for (name, columns, key) in tables {
            header += Wire.text(name) + Wire.varint(UInt64(columns.count))
            for column in columns { header += Wire.text(column) }
            header += Wire.varint(UInt64(key.count))
            for index in key { header += Wire.varint(UInt64(index)) }
            header.append(0)
        }
        header += Wire.varint(UInt64(chunks.count))
        for chunk in chunks {
            header += Wire.varint(UInt64(chunk.rawLength)) + Wire.varint(UInt64(chunk.compressed.count))
            header += Wire.varint(UInt64(chunk.records)) + Array(SHA256.hash(data: chunk.compressed))
        }
        if !adminStatements.isEmpty {
            header += Wire.varint(UInt64(adminStatements.count))
            for id in adminStatements { header += id }
        }
        if let scope {
            header += Wire.varint(UInt64(scope.count))
            for label in scope { header += Wire.text(label) }
        }
        var body = chunks.flatMap(\.compressed)
        if alterChunkAfterSigning, !body.isEmpty { body[body.count - 5] ^= 0x01 }
        return Wire.varint(UInt64(header.count)) + header + signer.publicKey + signer.sign(header) + body
    }
}

/// One chunk as a segment header lists it: the raw length and record count it declares,
/// and its compressed bytes (whose SHA-256 the header carries).
public struct HandChunk {
    public var rawLength: Int
    public var records: Int
    public var compressed: [UInt8]

    public init(rawLength: Int, records: Int, compressed: [UInt8]) {
        self.rawLength = rawLength
        self.records = records
        self.compressed = compressed
    }

    /// `raw` in a zlib stream of stored blocks, declaring its own length.
    public init(raw: [UInt8], records: Int) {
        self.init(rawLength: raw.count, records: records, compressed: Wire.zlibStored(raw))
    }
}

/// Another replica's segment as its bytes stand (copied from a genuine bundle, then perhaps
/// altered), for a relay to put in its own bundle.
public struct HandRawSegment {
    public var origin: String
    public var base: Int64
    public var last: Int64
    public var bytes: [UInt8]

    public init(origin: String, base: Int64, last: Int64, bytes: [UInt8]) {
        self.origin = origin
        self.base = base
        self.last = last
        self.bytes = bytes
    }
}

/// A replica the envelope lists.
public struct HandSite: Sendable {
    public var id: String
    public var name: String
    public var knowledge: Int64
    public var base: Int64 = 0
    public var forgotten: Int64 = 0

    public init(id: String, name: String, knowledge: Int64, base: Int64 = 0, forgotten: Int64 = 0) {
        self.id = id
        self.name = name
        self.knowledge = knowledge
        self.base = base
        self.forgotten = forgotten
    }
}

/// A key move for the envelope: `from` signs that `site` moves to `to` after `afterSeq`.
public struct HandMove {
    public var site: Int
    public var from: HandKey
    public var to: [UInt8]
    public var afterSeq: Int64

    public init(site: Int, from: HandKey, to: [UInt8], afterSeq: Int64) {
        self.site = site
        self.from = from
        self.to = to
        self.afterSeq = afterSeq
    }
}

/// A replica's identity as an envelope names it: the key its ID was made from, and its birth.
public struct HandIdentity {
    public var key: [UInt8]
    public var birth: [UInt8]

    public init(key: [UInt8], birth: [UInt8] = []) {
        self.key = key
        self.birth = birth
    }
}

/// A whole bundle: sites (the first is the sender), segments, what the envelope adds.
public struct HandBundle {
    public var sites: [HandSite]
    public var senderSeq: Int64
    public var senderHLC: Int64
    public var segments: [HandSegment] = []
    /// Site index and identity: the key (and birth) each replica's ID was made from (or is bound to).
    public var identities: [(Int, HandIdentity)] = []
    public var moves: [HandMove] = []
    /// Segments given as bytes, after ``segments`` in the body.
    public var rawSegments: [HandRawSegment] = []
    /// Acknowledgement statements, one of each site in turn from the first: no differences
    /// from the listed knowledge, a signature of zeros (what a reader must bound before it
    /// checks any).
    public var blankStatements = 0
    /// Who signs the envelope (normally the sender's key).
    public var signer: HandKey
    /// Admin statements at the envelope's end; with any, the file is format 4.
    public var adminStatements: [[UInt8]] = []

    public init(sites: [HandSite], senderSeq: Int64, senderHLC: Int64, signer: HandKey) {
        self.sites = sites
        self.senderSeq = senderSeq
        self.senderHLC = senderHLC
        self.signer = signer
    }

    /// The file's bytes.
    public func bytes() -> [UInt8] {
        // Format 5 once an identity has a birth; else as sqsync 0.2 (3) or 0.3 (4) wrote it.
        let version: UInt8 = identities.contains { !$0.1.birth.isEmpty } ? 5 : adminStatements.isEmpty ? 3 : 4
        var body = Array("SQSYNCB".utf8) + [0, version]
        let all = segments.map { (origin: $0.origin, base: $0.base, last: $0.last, bytes: $0.bytes()) }
            + rawSegments.map { (origin: $0.origin, base: $0.base, last: $0.last, bytes: $0.bytes) }
        var directory: [UInt8] = Wire.varint(UInt64(all.count))
        for segment in all {
            let site = sites.firstIndex { $0.id == segment.origin } ?? 0
            directory += Wire.varint(UInt64(site)) + Wire.varint(UInt64(segment.base)) + Wire.varint(UInt64(segment.last))
            directory += Wire.varint(UInt64(body.count)) + Wire.varint(UInt64(segment.bytes.count))
            body += segment.bytes
        }
        var envelope = Array("SQSYNC-ENVELOPE-3\n".utf8) + Wire.varint(UInt64(body.count)) + Array(SHA512.hash(data: body))
        envelope += Wire.varint(UInt64(Date().timeIntervalSince1970 * 1000)) + Wire.varint(UInt64(sites.count))
        for site in sites {
            envelope += Wire.id(site.id) + Wire.text(site.name) + Wire.varint(UInt64(site.knowledge))
            envelope += Wire.varint(UInt64(site.base)) + Wire.varint(UInt64(site.forgotten))
        }
        envelope += Wire.varint(UInt64(senderSeq)) + Wire.varint(UInt64(senderHLC)) + [0]
        envelope += Wire.varint(UInt64(identities.count))
        for (site, identity) in identities {
            envelope += Wire.varint(UInt64(site)) + identity.key
            if version >= 5 { envelope += Wire.varint(UInt64(identity.birth.count)) + identity.birth }
        }
        envelope += Wire.varint(UInt64(moves.count))
        for move in moves {
            let message = Array("SQSYNC-MOVE-3\n".utf8) + Wire.id(sites[move.site].id) + move.from.publicKey + move.to
                + Wire.varint(UInt64(move.afterSeq))
            envelope += Wire.varint(UInt64(move.site)) + move.from.publicKey + move.to + Wire.varint(UInt64(move.afterSeq))
            envelope += move.from.sign(message)
        }
        envelope += Wire.varint(UInt64(blankStatements))
        for index in 0..<blankStatements {
            envelope += Wire.varint(UInt64(index % sites.count)) + Wire.varint(0) + Wire.varint(0) + Wire.varint(0)
            envelope += [UInt8](repeating: 0, count: 64)
        }
        envelope += directory
        if version >= 4 {
            envelope += Wire.varint(UInt64(adminStatements.count))
            for statement in adminStatements { envelope += Wire.varint(UInt64(statement.count)) + statement }
        }
        let signature = signer.sshsigBlob(envelope)
        return body + envelope + signature + Wire.u32(UInt32(envelope.count)) + Wire.u32(UInt32(signature.count))
            + Array("SQSYNC-SIG\n".utf8)
    }

    public func write(to path: String) throws {
        try Data(bytes()).write(to: URL(fileURLWithPath: path))
    }
}

/// The format's primitives.
enum Wire {
    static func u32(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8(value >> 16 & 0xff), UInt8(value >> 8 & 0xff), UInt8(value & 0xff)]
    }

    static func string(_ bytes: [UInt8]) -> [UInt8] { u32(UInt32(bytes.count)) + bytes }

    static func varint(_ value: UInt64) -> [UInt8] {
        var rest = value, bytes: [UInt8] = []
        while rest >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: rest) | 0x80)
            rest >>= 7
        }
        return bytes + [UInt8(rest)]
    }

    static func zigzag(_ value: Int64) -> [UInt8] { varint(UInt64(bitPattern: (value << 1) ^ (value >> 63))) }

    /// A format `string`: varint length, then the UTF-8 bytes (not SSH's u32 framing).
    static func text(_ text: String) -> [UInt8] { varint(UInt64(text.utf8.count)) + Array(text.utf8) }

    static func id(_ uuid: String) -> [UInt8] {
        let value = UUID(uuidString: uuid)!.uuid
        return withUnsafeBytes(of: value) { Array($0) }
    }

    static func value(_ value: HandValue) -> [UInt8] {
        switch value {
        case .null: return [0]
        case .integer(let v): return [1] + zigzag(v)
        case .real(let v): return [2] + withUnsafeBytes(of: v.bitPattern.littleEndian) { Array($0) }
        case .text(let v): return [3] + varint(UInt64(v.utf8.count)) + Array(v.utf8)
        case .blob(let v): return [4] + varint(UInt64(v.count)) + v
        case .textClaiming(let length, let actual): return [3] + varint(length) + actual
        }
    }

    /// A zlib stream (RFC 1950) of stored deflate blocks: what zlib inflates, without zlib.
    static func zlibStored(_ data: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [0x78, 0x01]
        var offset = 0
        repeat {
            let take = min(65_535, data.count - offset)
            let final: UInt8 = offset + take == data.count ? 1 : 0
            out.append(final)
            out += [UInt8(take & 0xff), UInt8(take >> 8), UInt8(~take & 0xff), UInt8((~take >> 8) & 0xff)]
            out += data[offset..<(offset + take)]
            offset += take
        } while offset < data.count
        var a: UInt32 = 1, b: UInt32 = 0
        for byte in data {
            a = (a + UInt32(byte)) % 65_521
            b = (b + a) % 65_521
        }
        return out + u32(b << 16 | a)
    }
}
