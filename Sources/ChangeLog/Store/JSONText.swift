import FoundationEssentials
import Glibc
import SQLiteDatabase

/// A tiny JSON writer for whole rows in the conflict log. BLOBs become {"blob": "HEX"}:
/// SQLite's json_object refuses them.
public enum JSONText {
    static func object(_ row: [String: SQLValue]) -> String {
        "{" + row.sorted { $0.key < $1.key }.map { string($0.key) + ":" + value($0.value) }.joined(separator: ",") + "}"
    }

    static func value(_ value: SQLValue) -> String {
        switch value {
        case .null: return "null"
        case .integer(let v): return String(v)
        case .real(let v): return v.isFinite ? "\(v)" : string("\(v)")
        case .text(let v): return string(v)
        case .blob(let v): return "{\"blob\":\"" + hexString(v) + "\"}"
        }
    }

    /// A JSON string literal: quotes, backslashes and control characters escaped, the rest as
    /// it is (`--json` output writes its strings with it too).
    public static func string(_ text: String) -> String {
        var result = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            default:
                if scalar.value < 0x20 {
                    result += "\\u" + hexString(scalar.value, width: 4)
                } else {
                    result.unicodeScalars.append(scalar)
                }
            }
        }
        return result + "\""
    }
}
