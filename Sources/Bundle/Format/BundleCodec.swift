import ChangeLog
import FoundationEssentials
import Glibc
import SQLiteDatabase

/// The primitives of docs/BUNDLE_FORMAT.md: LEB128 varints, zigzag, strings, tagged values.
enum BundleCodec {
    static let magic: [UInt8] = Array("SQSYNCB".utf8) + [0]
    /// The version this sqsync writes and reads: changes signed by their origin, in segments
    /// a relay forwards as they are (docs/BUNDLE_FORMAT.md).
    static let version: UInt8 = 5
    /// Version 4 (sqsync 0.3) lacks only the births of identities; version 3 (sqsync 0.2) the
    /// admin statements at the envelope's end too: both read as they are.
    static let oldestReadable: UInt8 = 3
    static let trailerMagic: [UInt8] = Array("SQSYNC-SIG\n".utf8)
    /// Every signature sqsync makes or checks is an SSHSIG one in this namespace, the one
    /// `allowed_signers` names; each signed message starts with its own tag, so one kind can
    /// never be taken for another.
    static let signatureNamespace = "sqsync"
    /// Columns that merge other than last-writer-wins: the segment lists their policies and
    /// row records may carry counter contributions.
    static let mergePolicies = "merge-policies"
    /// The segment names the admin statements its changes were made under (docs/SCOPES.md).
    static let adminStatements = "admin-statements"
    /// The segment holds only the rows of some labels, which it names.
    static let scope = "scope"
    /// Records may carry a row's reach (docs/BUNDLE_FORMAT.md, "Records").
    static let reach = "reach"
    static let knownCapabilities: Set<String> = [mergePolicies, adminStatements, scope, reach]
    static let endRecord: UInt8 = 0

    /// The first byte of a row record: bit 0 is always set, the others say what is left out.
    struct RowFlags: OptionSet {
        let rawValue: UInt8
        static let row = RowFlags(rawValue: 0x01)
        static let hasRowStamp = RowFlags(rawValue: 0x02)
        static let sameTable = RowFlags(rawValue: 0x04)
        static let allColumnsInOrder = RowFlags(rawValue: 0x08)
        static let columnsShareRowStamp = RowFlags(rawValue: 0x10)
        /// Counter contributions follow the columns (capability merge-policies).
        static let hasCounters = RowFlags(rawValue: 0x20)
        /// The row's reach follows (capability reach).
        static let hasReach = RowFlags(rawValue: 0x40)
        static let known: RowFlags = [
            .row, .hasRowStamp, .sameTable, .allColumnsInOrder, .columnsShareRowStamp, .hasCounters, .hasReach,
        ]
    }

    /// Change-set column indexes outside the key, in schema order: what an insert carries.
    static func nonKeyColumns(_ table: TableSchema) -> [Int] {
        table.columns.indices.filter { !table.primaryKey.contains($0) }
    }

    enum ValueTag: UInt8 {
        case null = 0, integer, real, text, blob
    }

    static func appendVarint(_ value: UInt64, to bytes: inout [UInt8]) {
        var rest = value
        while rest >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: rest) | 0x80)
            rest >>= 7
        }
        bytes.append(UInt8(rest))
    }

    static func appendVarint(_ value: Int, to bytes: inout [UInt8]) { appendVarint(UInt64(value), to: &bytes) }
    static func appendVarint(_ value: Int64, to bytes: inout [UInt8]) { appendVarint(UInt64(bitPattern: value), to: &bytes) }

    static func appendZigzag(_ value: Int64, to bytes: inout [UInt8]) {
        appendVarint(UInt64(bitPattern: (value << 1) ^ (value >> 63)), to: &bytes)
    }

    static func unzigzag(_ raw: UInt64) -> Int64 {
        Int64(bitPattern: raw >> 1) ^ -Int64(bitPattern: raw & 1)
    }

    /// A knowledge ID (a UUID) in its 16 bytes.
    static func appendID(_ id: String, to bytes: inout [UInt8]) throws {
        guard let uuid = UUID(uuidString: id) else { throw BundleError(.io, "knowledge ID \(id.debugDescription) is not a UUID") }
        withUnsafeBytes(of: uuid.uuid) { bytes.append(contentsOf: $0) }
    }

    static func appendString(_ text: String, to bytes: inout [UInt8]) {
        let utf8 = Array(text.utf8)
        appendVarint(utf8.count, to: &bytes)
        bytes.append(contentsOf: utf8)
    }

    static func appendValue(_ value: SQLValue, to bytes: inout [UInt8]) {
        switch value {
        case .null:
            bytes.append(ValueTag.null.rawValue)
        case .integer(let v):
            bytes.append(ValueTag.integer.rawValue)
            appendZigzag(v, to: &bytes)
        case .real(let v):
            bytes.append(ValueTag.real.rawValue)
            var bits = v.bitPattern.littleEndian
            withUnsafeBytes(of: &bits) { bytes.append(contentsOf: $0) }
        case .text(let v):
            bytes.append(ValueTag.text.rawValue)
            appendString(v, to: &bytes)
        case .blob(let v):
            bytes.append(ValueTag.blob.rawValue)
            appendVarint(v.count, to: &bytes)
            bytes.append(contentsOf: v)
        }
    }
}

extension BundleCodec {
    /// `bytes` as a String; nil when they are not UTF-8. ASCII, what most values are, is
    /// taken as it is; anything else goes through the standard library's validation.
    static func text(_ bytes: UnsafeBufferPointer<UInt8>) -> String? {
        var ascii = true
        for byte in bytes where byte >= 0x80 {
            ascii = false
            break
        }
        if ascii { return String(decoding: bytes, as: UTF8.self) }
        return String(validating: bytes, as: UTF8.self)
    }
}

/// A value longer than the cap (``BundleLimits/maxValueBytes``), caught where the value's
/// table and column are known.
struct ValueTooLarge: Error {
    let bytes: UInt64
}

/// Decodes the primitives from any byte source, refusing anything malformed.
protocol ByteSource: AnyObject {
    var path: String { get }
    func readByte() throws -> UInt8
    func readBytes(_ count: Int) throws -> [UInt8]
    /// `count` bytes of UTF-8 text; nil when they are not valid UTF-8.
    func readText(_ count: Int) throws -> String?
    /// Eight bytes, least significant first (a REAL's bits).
    func readFixed64() throws -> UInt64
    /// A requirement, not only an extension method, so that a source can decode in place
    /// (``InflatingSource`` does); the default reads byte by byte.
    func readVarint() throws -> UInt64
}

extension HashingFileInput: ByteSource {}

/// An in-memory source, for the header (read whole: its length is in the payload).
final class ArraySource: ByteSource {
    let path: String
    private let bytes: [UInt8]
    private var position = 0

    init(_ bytes: [UInt8], path: String) {
        self.bytes = bytes
        self.path = path
    }

    var isAtEnd: Bool { position == bytes.count }
    var remaining: Int { bytes.count - position }

    func readByte() throws -> UInt8 {
        guard position < bytes.count else { throw BundleError(.corrupt, "\(path): the bundle header is truncated") }
        defer { position += 1 }
        return bytes[position]
    }

    func readBytes(_ count: Int) throws -> [UInt8] {
        guard count <= bytes.count - position else { throw BundleError(.corrupt, "\(path): the bundle header is truncated") }
        defer { position += count }
        return Array(bytes[position..<(position + count)])
    }
}

extension ByteSource {
    func corrupt(_ what: String) -> BundleError { BundleError(.corrupt, "\(path): damaged bundle (\(what))") }

    func readVarint() throws -> UInt64 { try readVarintBytewise() }

    func readVarintBytewise() throws -> UInt64 {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let byte = try readByte()
            guard shift < 64, !(shift == 63 && byte > 1) else { throw corrupt("varint too long") }
            result |= UInt64(byte & 0x7f) << shift
            if byte & 0x80 == 0 { return result }
            shift += 7
        }
    }

    func readCount(limit: Int = 1 << 31) throws -> Int {
        let value = try readVarint()
        guard value <= UInt64(limit) else { throw corrupt("length \(value) out of range") }
        return Int(value)
    }

    func readInt64() throws -> Int64 {
        let value = try readVarint()
        guard value <= UInt64(Int64.max) else { throw corrupt("number out of range") }
        return Int64(value)
    }

    func readZigzag() throws -> Int64 { BundleCodec.unzigzag(try readVarint()) }

    func readText(_ count: Int) throws -> String? {
        try readBytes(count).withUnsafeBufferPointer { BundleCodec.text($0) }
    }

    func readFixed64() throws -> UInt64 { try readFixed64Bytewise() }

    func readFixed64Bytewise() throws -> UInt64 {
        var bits: UInt64 = 0
        for index in 0..<8 { bits |= UInt64(try readByte()) << (8 * UInt64(index)) }
        return bits
    }

    /// A knowledge ID from its 16 bytes, as sqsync writes it: lowercase.
    func readID() throws -> String {
        let bytes = try readBytes(16)
        let uuid = bytes.withUnsafeBytes { $0.loadUnaligned(as: uuid_t.self) }
        return UUID(uuid: uuid).uuidString.lowercased()
    }

    func readString(limit: Int = 1 << 31) throws -> String {
        guard let text = try readText(try readCount(limit: limit)) else { throw corrupt("text that is not UTF-8") }
        return text
    }

    func readIndex(below count: Int, _ what: String) throws -> Int {
        let value = try readVarint()
        guard value < UInt64(count) else { throw corrupt("\(what) \(value) out of range") }
        return Int(value)
    }

    /// A tagged value; a TEXT or BLOB longer than `maxBytes` throws ``ValueTooLarge`` before
    /// any of it is read, for the caller to name where it stood.
    func readValue(maxBytes: Int = BundleLimits.maxValueBytes) throws -> SQLValue {
        guard let tag = BundleCodec.ValueTag(rawValue: try readByte()) else { throw corrupt("unknown value type") }
        switch tag {
        case .null: return .null
        case .integer: return .integer(try readZigzag())
        case .real: return .real(Double(bitPattern: try readFixed64()))
        case .text, .blob:
            let length = try readVarint()
            guard length <= UInt64(maxBytes) else { throw ValueTooLarge(bytes: length) }
            if tag == .blob { return .blob(try readBytes(Int(length))) }
            guard let text = try readText(Int(length)) else { throw corrupt("text that is not UTF-8") }
            return .text(text)
        }
    }
}
