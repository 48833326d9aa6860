import ChangeLog
import Glibc

/// Writes `text` to standard error at once (unbuffered), as every message of sqsync's is.
func writeStandardError(_ text: String) {
    writeAll(2, Array(text.utf8))
}

/// Writes `text` to standard output, after anything `print` left in its buffer.
func writeStandardOutput(_ text: String) {
    fflush(nil)
    writeAll(1, Array(text.utf8))
}

private func writeAll(_ descriptor: Int32, _ bytes: [UInt8]) {
    var offset = 0
    while offset < bytes.count {
        let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress! + offset, $0.count - offset) }
        if written < 0 && errno == EINTR { continue }
        guard written > 0 else { return }
        offset += written
    }
}

/// JSON's null, for `--json` objects built as `[String: Any]`.
struct JSONNull {}

/// `--json` text of dictionaries, arrays, strings, numbers, booleans, optionals and
/// ``JSONNull``: keys sorted, no white space, slashes not escaped (docs/JSON_OUTPUT.md).
func jsonText(_ value: Any) -> String {
    var text = ""
    appendJSON(value, to: &text)
    return text
}

private func appendJSON(_ value: Any, to text: inout String) {
    let mirror = Mirror(reflecting: value)
    if mirror.displayStyle == .optional {
        if let wrapped = mirror.children.first?.value { appendJSON(wrapped, to: &text) } else { text += "null" }
        return
    }
    switch value {
    case is JSONNull: text += "null"
    case let flag as Bool: text += flag ? "true" : "false"
    case let string as String: text += JSONText.string(string)
    case let string as Substring: text += JSONText.string(String(string))
    case let number as Int: text += String(number)
    case let number as Int64: text += String(number)
    case let number as Int32: text += String(number)
    case let number as UInt64: text += String(number)
    case let number as UInt32: text += String(number)
    case let number as UInt8: text += String(number)
    case let number as Double: text += number.isFinite ? "\(number)" : "null"
    case let object as [String: Any]:
        text += "{"
        for (index, key) in object.keys.sorted().enumerated() {
            if index > 0 { text += "," }
            text += JSONText.string(key)
            text += ":"
            appendJSON(object[key]!, to: &text)
        }
        text += "}"
    case let array as [Any]:
        text += "["
        for (index, element) in array.enumerated() {
            if index > 0 { text += "," }
            appendJSON(element, to: &text)
        }
        text += "]"
    default: text += JSONText.string("\(value)")
    }
}

/// Whether `path` names a folder (following links); nil when nothing is there.
func isFolder(_ path: String) -> Bool? {
    var status = stat()
    guard stat(path, &status) == 0 else { return nil }
    return status.st_mode & S_IFMT == S_IFDIR
}
