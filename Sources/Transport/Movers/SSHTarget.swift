import FoundationEssentials
import Glibc

/// Where an SFTP mailbox lives: `ssh://[user@]host[:port]/path`.
///
/// Kept as a value separate from the connection so the command line can parse and show an
/// address (and reject a malformed one) before any network traffic happens.
public struct SSHTarget: Sendable, Equatable {
    /// The login name; `nil` lets libssh use the local user's name, as `ssh` does.
    public var user: String?
    /// A host name or IP address (an IPv6 address without brackets).
    public var host: String
    public var port: Int
    /// An absolute path (`/srv/sqsync`), or one relative to the login folder (`~/sqsync`, `~`).
    public var path: String

    public init(user: String? = nil, host: String, port: Int = 22, path: String) {
        self.user = user
        self.host = host
        self.port = port
        self.path = path
    }

    /// Parses `ssh://[user@]host[:port]/path`.
    ///
    /// The path is absolute (`ssh://hq/srv/sqsync` → `/srv/sqsync`) unless it starts with `~/`
    /// (`ssh://hq/~/sqsync` → `~/sqsync`, the folder `sqsync` in the login folder). Percent
    /// escapes are decoded in the user and the path so names with spaces can be written.
    public init(url: String) throws {
        func fail(_ reason: String) -> SSHURLError { SSHURLError(url: url, reason: reason) }
        guard SSHTarget.isSSHURL(url) else { throw fail("it must start with ssh://") }
        let rest = url.dropFirst(SSHTarget.scheme.count)
        guard let slash = rest.firstIndex(of: "/") else {
            throw fail("it needs a folder after the host, e.g. ssh://host/srv/sqsync")
        }
        var authority = rest[..<slash]
        let rawPath = String(rest[slash...])

        if let at = authority.lastIndex(of: "@") {
            let rawUser = String(authority[..<at])
            guard !rawUser.isEmpty, let decoded = Self.percentDecoded(rawUser) else {
                throw fail("the user name before @ is empty or badly escaped")
            }
            user = decoded
            authority = authority[authority.index(after: at)...]
        } else {
            user = nil
        }

        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw fail("missing ] after an IPv6 address") }
            host = String(authority[authority.index(after: authority.startIndex)..<close])
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw fail("unexpected text after ]") }
                portText = after.dropFirst()
            }
        } else if let colon = authority.lastIndex(of: ":") {
            host = String(authority[..<colon])
            portText = authority[authority.index(after: colon)...]
        } else {
            host = String(authority)
        }
        guard !host.isEmpty else { throw fail("the host name is empty") }

        if let portText {
            guard let value = Int(portText), (1...65535).contains(value) else {
                throw fail("the port '\(portText)' is not a number from 1 to 65535")
            }
            port = value
        } else {
            port = 22
        }

        guard let decodedPath = Self.percentDecoded(rawPath) else { throw fail("the path is badly escaped") }
        path = try SSHTarget.normalize(decodedPath, fail)
    }

    /// `%XX` escapes decoded; nil for a bad escape or bytes that are not UTF-8.
    private static func percentDecoded(_ text: String) -> String? {
        func hexDigit(_ byte: UInt8) -> UInt8? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
            default: return nil
            }
        }
        var bytes: [UInt8] = []
        var input = Array(text.utf8)[...]
        while let byte = input.popFirst() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            let digits = input.prefix(2).compactMap { hexDigit($0) }
            guard digits.count == 2 else { return nil }
            bytes.append(digits[0] << 4 | digits[1])
            input = input.dropFirst(2)
        }
        return String(validating: bytes, as: UTF8.self)
    }

    /// The address in a form the user can paste back, always with the port so two mailboxes
    /// on one host are told apart in messages: `ssh://user@host:port/path`.
    public var displayName: String {
        let userPart = user.map { "\($0)@" } ?? ""
        let hostPart = host.contains(":") ? "[\(host)]" : host
        let pathPart = path.hasPrefix("/") ? path : "/\(path)"
        return "\(SSHTarget.scheme)\(userPart)\(hostPart):\(port)\(pathPart)"
    }

    /// Whether a command-line argument names an SSH mailbox rather than a local folder.
    public static func isSSHURL(_ s: String) -> Bool {
        s.lowercased().hasPrefix(scheme)
    }

    /// The folder as SFTP should see it: `~/x` becomes the relative `x`, which the server
    /// resolves against the login folder (SFTP has no `~`); `~` alone becomes `.`.
    var sftpRoot: String {
        if path == "~" { return "." }
        if path.hasPrefix("~/") { return String(path.dropFirst(2)) }
        return path
    }

    private static let scheme = "ssh://"

    /// Drops empty and `.` components and a trailing slash; keeps a leading `~` meaning home.
    private static func normalize(_ raw: String, _ fail: (String) -> SSHURLError) throws -> String {
        var parts = raw.split(separator: "/", omittingEmptySubsequences: true).filter { $0 != "." }
        guard !parts.contains("..") else { throw fail("the path may not contain '..'") }
        if let first = parts.first, first.hasPrefix("~") {
            guard first == "~" else { throw fail("only ~/ (the login folder) is supported, not \(first)/") }
            parts.removeFirst()
            return parts.isEmpty ? "~" : "~/" + parts.joined(separator: "/")
        }
        return "/" + parts.joined(separator: "/")
    }
}

/// An `ssh://` address that could not be parsed; a usage error, reported before connecting.
public struct SSHURLError: Error, CustomStringConvertible, Equatable {
    public var url: String
    public var reason: String

    public var description: String { "invalid SSH address '\(url)': \(reason)" }
}
