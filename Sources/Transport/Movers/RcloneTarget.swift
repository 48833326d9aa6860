import FoundationEssentials
import Glibc

/// Where an object-store mailbox lives: `rclone:REMOTE:PATH`, any remote the `rclone` program
/// knows (S3, GCS, Azure Blob, WebDAV, SFTP, …), configured the user's usual way (rclone.conf
/// or `RCLONE_CONFIG_*` variables).
///
/// Kept as a value separate from the transport so the command line can reject a malformed
/// address before any program runs.
public struct RcloneTarget: Sendable, Equatable {
    static let scheme = "rclone:"

    /// What rclone is given: `REMOTE:PATH` (`s3:bucket/sqsync`, or a connection string such as
    /// `:s3,provider=Minio:bucket`).
    public var remotePath: String

    /// Parses `rclone:REMOTE:PATH`. The remote must be named (something before a `:`), and the
    /// address may not start with `-` nor hold control characters: it is passed to rclone as
    /// one argument, and must not be taken for one of its flags.
    public init(url: String) throws {
        func fail(_ reason: String) -> RcloneURLError { RcloneURLError(url: url, reason: reason) }
        guard Self.isRcloneURL(url) else { throw fail("it must start with rclone:") }
        let rest = String(url.dropFirst(Self.scheme.count))
        guard let colon = rest.firstIndex(of: ":"), colon != rest.startIndex || rest.dropFirst().contains(":") else {
            throw fail("it needs a remote and a path, e.g. rclone:s3:bucket/sqsync")
        }
        guard !rest.hasPrefix("-") else { throw fail("a remote name may not start with '-'") }
        guard !rest.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
            throw fail("it contains control characters")
        }
        remotePath = rest
    }

    public static func isRcloneURL(_ text: String) -> Bool { text.hasPrefix(scheme) }

    /// How messages name the mailbox, and what the replica remembers it by: the address as
    /// the user wrote it, but for the parameters of a connection string
    /// (`:s3,secret_access_key=…:bucket` → `:s3,…:bucket`), which may hold credentials.
    public var displayName: String {
        guard remotePath.hasPrefix(":"), let comma = remotePath.firstIndex(of: ","),
            let colon = remotePath[comma...].firstIndex(of: ":")
        else { return Self.scheme + remotePath }
        return Self.scheme + remotePath[..<comma] + ",…" + remotePath[colon...]
    }

    /// The rclone path of a folder below the mailbox, ending in `/`: S3 would otherwise take
    /// an object named like the folder for the folder itself and list only that object.
    func remoteFolder(_ path: String) throws -> String {
        let folder = try remote(path)
        return folder.hasSuffix("/") || folder.hasSuffix(":") ? folder : folder + "/"
    }

    /// The rclone path of `path` (relative, `/`-separated) below the mailbox.
    func remote(_ path: String) throws -> String {
        let parts = try RelativePath.components(path)
        guard !parts.isEmpty else { return remotePath }
        let separator = remotePath.hasSuffix(":") || remotePath.hasSuffix("/") ? "" : "/"
        return remotePath + separator + parts.joined(separator: "/")
    }
}

/// A malformed `rclone:` address, with the address and what is wrong.
public struct RcloneURLError: Error, CustomStringConvertible {
    public var url: String
    public var reason: String
    public var description: String { "\(url): not a valid rclone: address (\(reason))" }
}
