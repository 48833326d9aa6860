import SQLiteDatabase

/// Reads back the keys that the triggers store for composite primary keys
/// (``TriggerSQL/storedKey(_:)``): SQL literals joined by commas, REAL parts written with
/// 21 significant digits so they read back bit for bit.
enum KeyCodec {
    static func decode(_ stored: SQLValue, columns: Int) -> [SQLValue]? {
        guard columns > 1 else { return [stored] }
        guard case .text(let text) = stored else { return nil }
        var values: [SQLValue] = []
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty || values.isEmpty {
            guard let value = literal(&bytes) else { return nil }
            values.append(value)
            if bytes.first == UInt8(ascii: ",") { bytes = bytes.dropFirst() } else { break }
        }
        return bytes.isEmpty && values.count == columns ? values : nil
    }

    /// A key as the conflict log writes it: SQL literals joined by ", ".
    static func decodeLiterals(_ text: String) -> [SQLValue]? {
        var values: [SQLValue] = []
        var bytes = Array(text.utf8)[...]
        while true {
            guard let value = literal(&bytes) else { return nil }
            values.append(value)
            guard bytes.first == UInt8(ascii: ",") else { break }
            bytes = bytes.dropFirst()
            while bytes.first == UInt8(ascii: " ") { bytes = bytes.dropFirst() }
        }
        return bytes.isEmpty ? values : nil
    }

    private static func literal(_ bytes: inout ArraySlice<UInt8>) -> SQLValue? {
        guard let first = bytes.first else { return nil }
        switch first {
        case UInt8(ascii: "'"):
            var text: [UInt8] = []
            var index = bytes.index(after: bytes.startIndex)
            while index < bytes.endIndex {
                if bytes[index] == UInt8(ascii: "'") {
                    let next = bytes.index(after: index)
                    if next < bytes.endIndex && bytes[next] == UInt8(ascii: "'") {
                        text.append(UInt8(ascii: "'"))
                        index = bytes.index(after: next)
                        continue
                    }
                    bytes = bytes[next...]
                    return .text(String(decoding: text, as: UTF8.self))
                }
                text.append(bytes[index])
                index = bytes.index(after: index)
            }
            return nil
        case UInt8(ascii: "X"):
            guard bytes.dropFirst().first == UInt8(ascii: "'") else { return nil }
            let body = bytes.dropFirst(2).prefix { $0 != UInt8(ascii: "'") }
            guard body.count % 2 == 0, let blob = hexBytes(body) else { return nil }
            bytes = bytes.dropFirst(2 + body.count + 1)
            return .blob(blob)
        default:
            let token = bytes.prefix { $0 != UInt8(ascii: ",") }
            bytes = bytes.dropFirst(token.count)
            let text = String(decoding: token, as: UTF8.self)
            if text == "NULL" { return .null }
            if let integer = Int64(text) { return .integer(integer) }
            if let real = Double(text) { return .real(real) }
            return nil
        }
    }

    private static func hexBytes(_ hex: ArraySlice<UInt8>) -> [UInt8]? {
        var result: [UInt8] = []
        result.reserveCapacity(hex.count / 2)
        var iterator = hex.makeIterator()
        while let high = iterator.next(), let low = iterator.next() {
            guard let h = nibble(high), let l = nibble(low) else { return nil }
            result.append(h << 4 | l)
        }
        return result
    }

    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        default: return nil
        }
    }
}
