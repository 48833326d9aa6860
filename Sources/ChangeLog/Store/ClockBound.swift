import FoundationEssentials
import Glibc

/// How far ahead of this machine's wall clock a peer's stamp may be. Without a bound one
/// stamp near the top of the range would drag every clock there and overflow the next local
/// change (hybrid logical clocks bound it the same way: CockroachDB's maximum offset).
/// A machine whose clock is a day off keeps syncing under the default.
public enum ClockBound {
    /// The default bound: 3 days, in milliseconds.
    public static let defaultMilliseconds: Int64 = 3 * 86_400_000
    /// `SQSYNC_MAX_CLOCK_AHEAD` sets it: a number of seconds, or a number with `s`, `m`, `h`
    /// or `d` after it (`36h`).
    public static let environmentVariable = "SQSYNC_MAX_CLOCK_AHEAD"

    /// The bound in force: the environment's when it reads as a duration, else the default.
    public static var milliseconds: Int64 {
        getenv(environmentVariable).map { String(cString: $0) }.flatMap(parse) ?? defaultMilliseconds
    }

    /// A duration as `SQSYNC_MAX_CLOCK_AHEAD` takes it, in milliseconds.
    public static func parse(_ text: String) -> Int64? {
        let trimmed = text.trimmed.lowercased()
        guard let unit = trimmed.last else { return nil }
        let scale: Int64
        var number = trimmed
        switch unit {
        case "s": scale = 1000; number.removeLast()
        case "m": scale = 60_000; number.removeLast()
        case "h": scale = 3_600_000; number.removeLast()
        case "d": scale = 86_400_000; number.removeLast()
        default: scale = 1000
        }
        guard let value = Int64(number), value >= 0 else { return nil }
        let (result, overflow) = value.multipliedReportingOverflow(by: scale)
        return overflow ? nil : result
    }

    /// This machine's wall clock, in milliseconds since 1970.
    public static var now: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    /// How far `hlc` lies beyond the bound from now, or nil when it is within it.
    public static func excess(of hlc: Int64, now: Int64 = ClockBound.now) -> Int64? {
        let (limit, overflow) = now.addingReportingOverflow(milliseconds)
        if overflow || hlc <= limit { return nil }
        return hlc - now
    }

    /// "3 days 4 hours" for a span of milliseconds, for messages.
    public static func describe(_ milliseconds: Int64) -> String {
        let seconds = milliseconds / 1000
        let days = seconds / 86_400, hours = seconds % 86_400 / 3600, minutes = seconds % 3600 / 60
        if days > 0 { return "\(days) day\(days == 1 ? "" : "s")" + (hours > 0 ? " \(hours) h" : "") }
        if hours > 0 { return "\(hours) h \(minutes) min" }
        return minutes > 0 ? "\(minutes) min" : "\(seconds) s"
    }
}
