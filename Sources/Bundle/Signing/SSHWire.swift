import FoundationEssentials
import Glibc

/// Builds the SSH wire encoding (RFC 4251 section 5) that OpenSSH key files and
/// SSHSIG signatures are made of.
struct SSHWriter {
    private(set) var bytes: [UInt8] = []

    mutating func appendRaw<S: Sequence>(_ raw: S) where S.Element == UInt8 {
        bytes.append(contentsOf: raw)
    }

    mutating func appendUInt32(_ value: UInt32) {
        bytes.append(UInt8(truncatingIfNeeded: value >> 24))
        bytes.append(UInt8(truncatingIfNeeded: value >> 16))
        bytes.append(UInt8(truncatingIfNeeded: value >> 8))
        bytes.append(UInt8(truncatingIfNeeded: value))
    }

    mutating func appendString<C: Collection>(_ value: C) where C.Element == UInt8 {
        appendUInt32(UInt32(value.count))
        bytes.append(contentsOf: value)
    }

    mutating func appendString(_ value: String) {
        appendString(Array(value.utf8))
    }
}

/// Reads the SSH wire encoding. Every read checks the length against what is
/// left, so a hostile length field becomes an error, never a trap.
struct SSHReader {
    private let bytes: [UInt8]
    private var offset = 0
    /// Names the structure being read, so errors say which one was damaged.
    private let context: String

    init(_ bytes: [UInt8], context: String) {
        self.bytes = bytes
        self.context = context
    }

    var remaining: Int { bytes.count - offset }

    mutating func readRaw(count: Int) throws -> [UInt8] {
        guard count <= remaining else {
            throw KeyFormatError("\(context) is truncated")
        }
        defer { offset += count }
        return Array(bytes[offset..<offset + count])
    }

    mutating func readUInt32() throws -> UInt32 {
        try readRaw(count: 4).reduce(0) { $0 << 8 | UInt32($1) }
    }

    mutating func readString() throws -> [UInt8] {
        try readRaw(count: Int(readUInt32()))
    }

    /// Reads a string that OpenSSH treats as a C string: it must be UTF-8 and
    /// hold no NUL, or OpenSSH and sqsync could disagree about its value.
    mutating func readText(_ what: String) throws -> String {
        let raw = try readString()
        guard !raw.contains(0), let text = String(bytes: raw, encoding: .utf8) else {
            throw KeyFormatError("\(context): \(what) is not valid text")
        }
        return text
    }

    func expectEnd() throws {
        guard remaining == 0 else {
            throw KeyFormatError("\(context) has \(remaining) unexpected trailing bytes")
        }
    }
}

/// OpenSSH's PEM-like armour: base64 wrapped at 70 columns between BEGIN and
/// END lines, the way `ssh-keygen` writes keys and signatures.
enum Armor {
    static let lineWidth = 70

    static func encode(_ bytes: [UInt8], label: String) -> String {
        let base64 = Data(bytes).base64EncodedString()
        var lines: [Substring] = []
        var start = base64.startIndex
        while start < base64.endIndex {
            let end = base64.index(start, offsetBy: lineWidth, limitedBy: base64.endIndex) ?? base64.endIndex
            lines.append(base64[start..<end])
            start = end
        }
        return "-----BEGIN \(label)-----\n" + lines.joined(separator: "\n") + "\n-----END \(label)-----\n"
    }

    /// Accepts surrounding whitespace and CRLF line ends, which editors and mail
    /// add, but nothing else outside the markers.
    /// Works on the UTF-8 bytes: a sync checks every peer's acknowledgement, and Foundation's
    /// whitespace trimming made this most of a quiet sync's time per peer.
    static func decode(_ text: String, label: String, what: String) throws -> [UInt8] {
        let begin = "-----BEGIN \(label)-----"
        let end = "-----END \(label)-----"
        var trimmed = Array(text.utf8)[...]
        while let first = trimmed.first, isWhitespace(first) { trimmed.removeFirst() }
        while let last = trimmed.last, isWhitespace(last) { trimmed.removeLast() }
        guard trimmed.starts(with: begin.utf8) else {
            throw KeyFormatError("\(what) does not start with \(begin)")
        }
        guard trimmed.count >= begin.utf8.count + end.utf8.count, trimmed.suffix(end.utf8.count).elementsEqual(end.utf8) else {
            throw KeyFormatError("\(what) does not end with \(end)")
        }
        let body = trimmed.dropFirst(begin.utf8.count).dropLast(end.utf8.count).filter { !isWhitespace($0) }
        guard let bytes = Base64.decode(String(decoding: body, as: UTF8.self)) else {
            throw KeyFormatError("\(what) is not valid base64")
        }
        return bytes
    }

    /// Space, tab, and the line ends of any platform.
    private static func isWhitespace(_ byte: UInt8) -> Bool {
        byte == 0x20 || (0x09...0x0d).contains(byte)
    }
}

/// Standard base64 (RFC 4648). Age's unpadded form is read by table: a header holds a
/// stanza per reader, thousands of them in a mailbox of many readers.
enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    /// The value of each character, 0xFF for bytes outside the alphabet.
    private static let values: [UInt8] = {
        var values = [UInt8](repeating: 0xFF, count: 256)
        for (value, character) in alphabet.enumerated() { values[Int(character)] = UInt8(value) }
        return values
    }()

    /// Padded, as OpenSSH writes it.
    static func encode(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
    }

    /// Padded, as OpenSSH writes it.
    static func decode<S: StringProtocol>(_ text: S) -> [UInt8]? {
        Data(base64Encoded: String(text)).map { Array($0) }
    }

    /// Text without padding; `canonical`: the bits past the last whole byte must be zero, so
    /// that one byte string has one text (age refuses the others).
    static func decodeUnpadded<Bytes: Collection>(_ text: Bytes, canonical: Bool) -> [UInt8]? where Bytes.Element == UInt8 {
        // A length of 1 modulo 4 is no whole byte.
        guard text.count % 4 != 1 else { return nil }
        var decoded: [UInt8] = []
        decoded.reserveCapacity(text.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for character in text {
            let value = values[Int(character)]
            guard value != 0xFF else { return nil }
            accumulator = accumulator << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                decoded.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
            }
        }
        guard !canonical || accumulator & ((1 << UInt32(bits)) - 1) == 0 else { return nil }
        return decoded
    }
}

/// Shows a name read from untrusted input in an error message without letting
/// control characters or megabytes of garbage into the terminal.
func printableName(_ raw: [UInt8]) -> String {
    if raw.count <= 64, raw.allSatisfy({ (0x20..<0x7f).contains($0) }) {
        return "\"" + String(decoding: raw, as: UTF8.self) + "\""
    }
    return "<\(raw.count) bytes>"
}
