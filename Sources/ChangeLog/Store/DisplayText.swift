import SQLiteDatabase

/// Text taken from a bundle (a replica's name, a table's, a reason) as it may be shown on a
/// terminal: control characters become `\x1b`, `\n` and the like, so a name cannot move the
/// cursor, colour the screen or forge a line of its own.
public func displayText(_ untrusted: String) -> String {
    var shown = ""
    shown.reserveCapacity(untrusted.utf8.count)
    for scalar in untrusted.unicodeScalars {
        switch scalar.value {
        case 0x0A: shown += "\\n"
        case 0x0D: shown += "\\r"
        case 0x09: shown += "\\t"
        case 0x5C: shown += "\\\\"
        case 0x00..<0x20, 0x7F, 0x80..<0xA0, 0x2028, 0x2029, 0x202A...0x202E, 0x2066...0x2069:
            let hex = String(scalar.value, radix: 16)
            shown += scalar.value < 0x100 ? "\\x" + String(repeating: "0", count: 2 - hex.count) + hex : "\\u{\(hex)}"
        default:
            shown.unicodeScalars.append(scalar)
        }
    }
    return shown
}

/// A value as `conflicts` and `why` show it on a terminal: its SQL literal, escaped
/// (``displayText(_:)``), and for a long BLOB or text only its start and its size, so that
/// one 4 KB value does not fill the screen (`--json` keeps every byte).
public func displayValue(_ value: SQLValue, limit: Int = 64) -> String {
    switch value {
    case .blob(let bytes) where bytes.count > limit / 2:
        return displayText(SQLValue.blob(Array(bytes.prefix(limit / 2))).literal.dropLast() + "…' (\(bytes.count) bytes)")
    case .text(let text) where text.count > limit:
        return displayText(quoteLiteral(String(text.prefix(limit))).dropLast() + "…' (\(text.count) characters)")
    default:
        return displayText(value.literal)
    }
}

/// Text already made of literals (a whole lost row, a key of several columns), escaped and cut
/// to its start and length past `limit` characters: `--json` keeps it whole.
public func displayShortened(_ text: String, limit: Int = 200) -> String {
    guard text.count > limit else { return displayText(text) }
    return displayText(String(text.prefix(limit))) + "… (\(text.count) characters)"
}
