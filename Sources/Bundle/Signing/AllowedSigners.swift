import ChangeLog
import Crypto
import FoundationEssentials
import Glibc

/// The keys trusted to sign bundles, in OpenSSH's `allowed_signers` format
/// (`man ssh-keygen`, section ALLOWED SIGNERS), so the same file works with
/// `ssh-keygen -Y verify`.
///
/// Lines for key types other than ssh-ed25519 are skipped rather than
/// rejected: a file shared with other tools may hold RSA or security-key
/// signers, which sqsync simply never matches.
public struct AllowedSigners: Sendable {
    struct Entry: Sendable {
        var principals: [String]
        var key: SSHPublicKey
        /// Patterns from `namespaces="..."`; nil when the option is absent,
        /// which OpenSSH reads as "any namespace".
        var namespaces: [String]?
        var validAfter: Date?
        var validBefore: Date?
    }

    var entries: [Entry] = [] {
        didSet {
            fingerprint = Self.fingerprint(of: entries)
            entriesByKey = Self.index(entries)
        }
    }
    /// Positions in ``entries`` of each key's lines, in order: a mailbox's writer asks about
    /// every reader's key.
    private var entriesByKey: [SSHPublicKey: [Int]] = [:]

    public init(text: String) throws {
        var parsed: [Entry] = []
        for (index, line) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
            do {
                if let entry = try Self.parse(line: line) {
                    parsed.append(entry)
                }
            } catch let error as KeyFormatError {
                throw KeyFormatError("line \(index + 1): \(error.description)")
            }
        }
        entries = parsed
        fingerprint = Self.fingerprint(of: parsed)
        entriesByKey = Self.index(parsed)
    }

    private static func index(_ entries: [Entry]) -> [SSHPublicKey: [Int]] {
        var positions: [SSHPublicKey: [Int]] = [:]
        for (position, entry) in entries.enumerated() { positions[entry.key, default: []].append(position) }
        return positions
    }

    /// A digest of the trusted keys, to tell whether trust changed between two syncs; nil when an
    /// entry has a validity window, whose meaning changes with the time alone. Made once: a
    /// quiet sync compares it, and it lists every trusted key.
    public private(set) var fingerprint: String?

    private static func fingerprint(of entries: [Entry]) -> String? {
        guard entries.allSatisfy({ $0.validAfter == nil && $0.validBefore == nil }) else { return nil }
        let text = entries.map {
            "\($0.principals.joined(separator: ",")) \($0.namespaces?.joined(separator: ",") ?? "*") \($0.key.openSSHLine)"
        }.joined(separator: "\n")
        return hexString(SHA256.hash(data: Data(text.utf8)))
    }

    /// The file it was loaded from: a refusal of an unknown signer names the file to add its
    /// line to (`--trust`, `SQSYNC_TRUST` or the default), not only the line.
    public private(set) var path: String?

    /// ``path``, or the file's usual name for trust made from text.
    public var fileName: String { path ?? "allowed_signers" }

    public static func load(path: String) throws -> AllowedSigners {
        guard let bytes = try readFileIfExists(atPath: path) else {
            throw KeyFormatError(
                "\(path): no such allowed signers file; create it with one line per trusted key "
                    + "(`sqsync keygen` prints the line to add)")
        }
        do {
            var signers = try AllowedSigners(text: String(decoding: bytes, as: UTF8.self))
            signers.path = path
            return signers
        } catch let error as KeyFormatError {
            throw KeyFormatError("\(path): \(error.description)")
        }
    }

    /// The name a signature is attributed to, or nil when the key may not sign
    /// in `namespace`. Honours `valid-after`/`valid-before` the way
    /// `ssh-keygen -Y verify` does, against `time`.
    public func principal(for key: SSHPublicKey, namespace: String, at time: Date = Date()) -> String? {
        for entry in (entriesByKey[key] ?? []).map({ entries[$0] }) {
            if let patterns = entry.namespaces, !Self.matches(namespace, patterns: patterns) { continue }
            if let after = entry.validAfter, time < after { continue }
            if let before = entry.validBefore, time > before { continue }
            return entry.principals[0]
        }
        return nil
    }

    /// The line `sqsync keygen` prints. The principal is quoted when it holds
    /// whitespace, which is the only quoting the format knows; a comma in it
    /// starts a second principal, and it cannot hold a double quote or a line
    /// break.
    public static func line(principal: String, key: SSHPublicKey, namespace: String = "sqsync") -> String {
        let name = principal.contains(where: \.isWhitespace) ? "\"\(principal)\"" : principal
        let escaped = namespace.replacing("\"", with: "\\\"")
        return "\(name) namespaces=\"\(escaped)\" \(key.openSSHLine)"
    }

    /// The line that would trust `key`, for a message: under `name` when it is a plain word
    /// (letters, digits, `.`, `_`, `-`; it comes from a file anyone may have written), else
    /// under `NAME` for the user to fill in.
    public static func suggestedLine(for key: SSHPublicKey, name: String?) -> String {
        let plain = name.flatMap { name in
            !name.isEmpty && name.count <= 64 && name.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) }
                ? name : nil
        }
        return line(principal: plain ?? "NAME", key: key)
    }

    // MARK: - Parsing

    /// Words that start the key part of a line; anything else in that position
    /// is the options field (OpenSSH instead tries to parse a key and falls
    /// back to options, which comes to the same for every real key type).
    private static let keyTypePrefixes = ["ssh-", "ecdsa-", "sk-", "rsa-"]

    private static func parse(line: Substring) throws -> Entry? {
        var scanner = LineScanner(line)
        scanner.skipSpace()
        if scanner.isAtEnd || scanner.peek == "#" { return nil }

        let principalsField = try scanner.principals()
        let principals = principalsField.split(separator: ",").map(String.init)
        guard !principals.isEmpty else { throw KeyFormatError("no principal before the key") }
        scanner.skipSpace()

        var options = Options()
        let firstWord = scanner.peekWord()
        guard !firstWord.isEmpty else { throw KeyFormatError("missing key") }
        if !keyTypePrefixes.contains(where: { firstWord.hasPrefix($0) }) {
            options = try Options(parsing: scanner.options())
            scanner.skipSpace()
        }

        let keyType = scanner.word()
        let keyBase64 = scanner.word()
        guard !keyType.isEmpty else { throw KeyFormatError("missing key") }
        guard keyType == SSHPublicKey.keyType, !options.isCertificateAuthority else { return nil }
        guard !keyBase64.isEmpty else { throw KeyFormatError("missing key after \(keyType)") }
        guard let blob = Base64.decode(keyBase64) else { throw KeyFormatError("the key is not valid base64") }
        return Entry(
            principals: principals, key: try SSHPublicKey(wireBlob: blob), namespaces: options.namespaces,
            validAfter: options.validAfter, validBefore: options.validBefore)
    }

    /// OpenSSH's `match_pattern_list`: comma-separated globs with `*` and `?`,
    /// where a matching `!pattern` denies even if another pattern allows.
    static func matches(_ name: String, patterns: [String]) -> Bool {
        var allowed = false
        for pattern in patterns {
            if pattern.hasPrefix("!") {
                if glob(Array(name), Array(pattern.dropFirst())) { return false }
            } else if glob(Array(name), Array(pattern)) {
                allowed = true
            }
        }
        return allowed
    }

    private static func glob(_ name: [Character], _ pattern: [Character]) -> Bool {
        var n = 0
        var p = 0
        var starP: Int?
        var starN = 0
        while n < name.count {
            if p < pattern.count, pattern[p] == "?" || pattern[p] == name[n] {
                n += 1
                p += 1
            } else if p < pattern.count, pattern[p] == "*" {
                starP = p
                starN = n
                p += 1
            } else if let star = starP {
                p = star + 1
                starN += 1
                n = starN
            } else {
                return false
            }
        }
        while p < pattern.count, pattern[p] == "*" { p += 1 }
        return p == pattern.count
    }
}

/// The options field of one line, as OpenSSH's `sshsigopt_parse` reads it.
private struct Options {
    var isCertificateAuthority = false
    var namespaces: [String]?
    var validAfter: Date?
    var validBefore: Date?

    init() {}

    init(parsing field: String) throws {
        var rest = Substring(field)
        while !rest.isEmpty {
            let nameEnd = rest.firstIndex(where: { $0 == "=" || $0 == "," }) ?? rest.endIndex
            let name = rest[..<nameEnd].lowercased()
            guard !name.isEmpty else { throw KeyFormatError("empty option name in \"\(field)\"") }
            rest = rest[nameEnd...]
            var value: String?
            if rest.first == "=" {
                rest = rest.dropFirst()
                value = try Self.dequote(&rest, option: name)
            }
            switch (name, value) {
            case ("cert-authority", nil):
                isCertificateAuthority = true
            case ("namespaces", let value?):
                guard namespaces == nil else { throw KeyFormatError("more than one namespaces option") }
                namespaces = value.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
            case ("valid-after", let value?):
                guard validAfter == nil else { throw KeyFormatError("more than one valid-after option") }
                validAfter = try Self.parseTime(value, option: name)
            case ("valid-before", let value?):
                guard validBefore == nil else { throw KeyFormatError("more than one valid-before option") }
                validBefore = try Self.parseTime(value, option: name)
            case ("cert-authority", _?):
                throw KeyFormatError("cert-authority takes no value")
            case (_, nil) where ["namespaces", "valid-after", "valid-before"].contains(name):
                throw KeyFormatError("\(name) needs a value")
            default:
                throw KeyFormatError("unsupported option \"\(name)\"")
            }
            if rest.first == "," {
                rest = rest.dropFirst()
                if rest.isEmpty { throw KeyFormatError("options end with a comma") }
            } else if !rest.isEmpty {
                throw KeyFormatError("unexpected text after option \(name)")
            }
        }
    }

    /// OpenSSH's `opt_dequote`: the value must be quoted, and `\"` is a quote.
    private static func dequote(_ rest: inout Substring, option: String) throws -> String {
        guard rest.first == "\"" else { throw KeyFormatError("the value of \(option) must be in double quotes") }
        rest = rest.dropFirst()
        var value = ""
        while let c = rest.first {
            rest = rest.dropFirst()
            if c == "\\", rest.first == "\"" {
                value.append("\"")
                rest = rest.dropFirst()
            } else if c == "\"" {
                return value
            } else {
                value.append(c)
            }
        }
        throw KeyFormatError("the value of \(option) has no closing quote")
    }

    /// OpenSSH's `parse_absolute_time`: YYYYMMDD, YYYYMMDDHHMM or
    /// YYYYMMDDHHMMSS, in local time unless it ends in Z or UTC.
    private static func parseTime(_ text: String, option: String) throws -> Date {
        var digits = Substring(text)
        var timeZone = TimeZone.current
        if digits.count > 1, digits.uppercased().hasSuffix("Z") {
            digits = digits.dropLast()
            timeZone = TimeZone(identifier: "UTC")!
        } else if digits.count > 3, digits.uppercased().hasSuffix("UTC") {
            digits = digits.dropLast(3)
            timeZone = TimeZone(identifier: "UTC")!
        }
        let invalid = KeyFormatError("\(option)=\"\(text)\" is not a time (expected YYYYMMDD[HHMM[SS]][Z])")
        guard [8, 12, 14].contains(digits.count), digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber)
        else { throw invalid }
        let numbers = Array(digits).map { Int(String($0))! }
        func field(_ start: Int, _ length: Int) -> Int {
            numbers[start..<start + length].reduce(0) { $0 * 10 + $1 }
        }
        var components = DateComponents()
        components.year = field(0, 4)
        components.month = field(4, 2)
        components.day = field(6, 2)
        components.hour = digits.count >= 12 ? field(8, 2) : 0
        components.minute = digits.count >= 12 ? field(10, 2) : 0
        components.second = digits.count == 14 ? field(12, 2) : 0
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        guard components.isValidDate(in: calendar), let date = calendar.date(from: components) else {
            throw invalid
        }
        return date
    }
}

/// Splits one allowed_signers line the way OpenSSH's `strdelimw` and
/// `sshkey_advance_past_options` do, including their quoting rules.
private struct LineScanner {
    private var rest: Substring

    init(_ line: Substring) {
        rest = line
    }

    var isAtEnd: Bool { rest.isEmpty }
    var peek: Character? { rest.first }

    mutating func skipSpace() {
        rest = rest.drop(while: { $0 == " " || $0 == "\t" || $0 == "\r" })
    }

    func peekWord() -> Substring {
        rest.prefix(while: { $0 != " " && $0 != "\t" && $0 != "\r" })
    }

    mutating func word() -> Substring {
        let word = peekWord()
        rest = rest.dropFirst(word.count)
        skipSpace()
        return word
    }

    /// A principals field may be quoted to hold spaces; there is no escape.
    mutating func principals() throws -> Substring {
        guard rest.first == "\"" else { return word() }
        rest = rest.dropFirst()
        guard let close = rest.firstIndex(of: "\"") else {
            throw KeyFormatError("the principals field has no closing quote")
        }
        let field = rest[..<close]
        rest = rest[rest.index(after: close)...]
        return field
    }

    /// Options end at the first space outside double quotes.
    mutating func options() throws -> String {
        var field = ""
        var quoted = false
        while let c = rest.first, quoted || (c != " " && c != "\t") {
            rest = rest.dropFirst()
            field.append(c)
            if c == "\\", rest.first == "\"" {
                field.append("\"")
                rest = rest.dropFirst()
            } else if c == "\"" {
                quoted.toggle()
            }
        }
        if quoted { throw KeyFormatError("an option value has no closing quote") }
        return field
    }
}
