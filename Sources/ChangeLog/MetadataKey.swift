import CSQLite

/// The form a row's key takes in sqsync's metadata (`_sqsync_rows`, `_sqsync_changes`,
/// `_sqsync_counters`, `_sqsync_snapshot`): the stored key (``TriggerSQL/storedKey(_:)``,
/// what the triggers write to the capture log), with UUIDs in 16 bytes instead of 36.
///
/// The key is most of a row entry's bytes, and SPEC §2 recommends UUID keys. The triggers
/// cannot call sqsync's functions (every writer runs them), so the log keeps the stored key
/// and the fold turns it into this form.
///
/// - A UUID in its canonical text form, lowercase or uppercase, becomes a 17-byte BLOB: 0x01
///   (lowercase) or 0x02 (uppercase), then the 16 bytes.
/// - A BLOB gets a 0x00 byte in front, so it never reads as a UUID.
/// - Everything else (integers, reals, other text, composite keys) is kept as it is.
///
/// sqsync's own connections get it as SQL functions: `sqsync_key(stored)` and
/// `sqsync_stored_key(key)`, its inverse.
enum MetadataKey {
    private static let plainBlob: UInt8 = 0
    private static let lowercaseUUID: UInt8 = 1
    private static let uppercaseUUID: UInt8 = 2

    /// SQL for the metadata key of the stored key `storedKeySQL` (on sqsync's connections).
    static func sql(_ storedKeySQL: String) -> String { "sqsync_key(\(storedKeySQL))" }

    static func of(_ stored: SQLValue) -> SQLValue {
        switch stored {
        case .text(var text):
            return text.withUTF8 { compactUUID($0) }.map(SQLValue.blob) ?? stored
        case .blob(let bytes):
            return .blob([plainBlob] + bytes)
        default:
            return stored
        }
    }

    /// The stored key back; nil for a BLOB in no form this version writes (damaged metadata).
    static func stored(_ key: SQLValue) -> SQLValue? {
        guard case .blob(let bytes) = key else { return key }
        return bytes.withUnsafeBufferPointer { stored(UnsafeRawBufferPointer($0)) }
    }

    /// The key values of a metadata key (``KeyCodec``); nil when it does not read back.
    static func values(_ key: SQLValue, columns: Int) -> [SQLValue]? {
        stored(key).flatMap { KeyCodec.decode($0, columns: columns) }
    }

    private static func stored(_ bytes: UnsafeRawBufferPointer) -> SQLValue? {
        switch bytes.first {
        case plainBlob:
            return .blob(Array(bytes.dropFirst()))
        case lowercaseUUID where bytes.count == 17, uppercaseUUID where bytes.count == 17:
            return .text(uuidText(bytes.dropFirst(), uppercase: bytes.first == uppercaseUUID))
        default:
            return nil
        }
    }

    /// 0x01 or 0x02 and the 16 bytes of `text` when it is a UUID in canonical form
    /// (8-4-4-4-12 hex digits, one case throughout).
    private static func compactUUID(_ text: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        guard text.count == 36, text[8] == dash, text[13] == dash, text[18] == dash, text[23] == dash else { return nil }
        var cases: UInt8 = 0
        let result = [UInt8](unsafeUninitializedCapacity: 17) { buffer, initialized in
            for (index, position) in digitPairs.enumerated() {
                let high = hexDigits[Int(text[position])], low = hexDigits[Int(text[position + 1])]
                cases |= high | low
                buffer[1 + index] = (high & 0x0f) << 4 | (low & 0x0f)
            }
            // Digits alone read back lowercase; mixed case would not read back at all.
            guard cases & notHex == 0, cases & (lower | upper) != lower | upper else { return }
            buffer[0] = cases & upper != 0 ? uppercaseUUID : lowercaseUUID
            initialized = 17
        }
        return result.count == 17 ? result : nil
    }

    private static let dash = UInt8(ascii: "-")
    /// Where each byte's two hex digits start in the canonical text.
    private static let digitPairs = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34]
    private static let lower: UInt8 = 0x10, upper: UInt8 = 0x20, notHex: UInt8 = 0x40
    /// Each byte's value as a hex digit in the low four bits, with `lower`, `upper` or `notHex`.
    private static let hexDigits: [UInt8] = (0...255).map { byte in
        switch UInt8(byte) {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return UInt8(byte) - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return UInt8(byte) - UInt8(ascii: "a") + 10 | lower
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return UInt8(byte) - UInt8(ascii: "A") + 10 | upper
        default: return notHex
        }
    }

    private static func uuidText<Bytes: Collection<UInt8>>(_ bytes: Bytes, uppercase: Bool) -> String {
        let digits = Array((uppercase ? "0123456789ABCDEF" : "0123456789abcdef").utf8)
        var text: [UInt8] = []
        text.reserveCapacity(36)
        for (index, byte) in bytes.enumerated() {
            if index == 4 || index == 6 || index == 8 || index == 10 { text.append(UInt8(ascii: "-")) }
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}

// MARK: SQL functions

extension MetadataKey {
    static func register(on handle: OpaquePointer) throws {
        let flags = SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS
        for (name, function) in [("sqsync_key", key), ("sqsync_stored_key", storedKey)] {
            let rc = sqlite3_create_function_v2(handle, name, 1, flags, nil, function, nil, nil, nil)
            guard rc == SQLITE_OK else {
                throw SQLiteError(code: rc, message: String(cString: sqlite3_errmsg(handle)), sql: nil)
            }
        }
    }

    private static let key: @convention(c) (OpaquePointer?, Int32, UnsafeMutablePointer<OpaquePointer?>?) -> Void = {
        context, _, values in
        let value = values?[0]
        switch sqlite3_value_type(value) {
        case SQLITE_TEXT:
            guard let text = contents(of: value, context) else { return }
            if let compact = compactUUID(text.assumingMemoryBound(to: UInt8.self)) {
                compact.withUnsafeBytes { sqsync_result_blob(context, $0.baseAddress, Int32($0.count)) }
            } else {
                sqlite3_result_value(context, value)
            }
        case SQLITE_BLOB:
            guard let blob = contents(of: value, context) else { return }
            let bytes = [plainBlob] + blob
            bytes.withUnsafeBytes { sqsync_result_blob(context, $0.baseAddress, Int32($0.count)) }
        default:
            sqlite3_result_value(context, value)
        }
    }

    /// A TEXT or BLOB argument's bytes; nil after reporting that SQLite ran out of memory.
    private static func contents(of value: OpaquePointer?, _ context: OpaquePointer?) -> UnsafeRawBufferPointer? {
        let start =
            sqlite3_value_type(value) == SQLITE_TEXT
            ? UnsafeRawPointer(sqlite3_value_text(value)) : sqlite3_value_blob(value)
        let length = Int(sqlite3_value_bytes(value))
        guard length == 0 || start != nil else {
            sqlite3_result_error_nomem(context)
            return nil
        }
        return UnsafeRawBufferPointer(start: length == 0 ? nil : start, count: length)
    }

    private static let storedKey: @convention(c) (OpaquePointer?, Int32, UnsafeMutablePointer<OpaquePointer?>?) -> Void = {
        context, _, values in
        let value = values?[0]
        guard sqlite3_value_type(value) == SQLITE_BLOB else {
            sqlite3_result_value(context, value)
            return
        }
        guard let bytes = contents(of: value, context) else { return }
        switch stored(bytes) {
        case .text(let text):
            let utf8 = Array(text.utf8)
            utf8.withUnsafeBufferPointer { buffer in
                buffer.withMemoryRebound(to: CChar.self) { sqsync_result_text(context, $0.baseAddress, Int32($0.count)) }
            }
        case .blob(let blob) where blob.isEmpty:
            sqlite3_result_zeroblob(context, 0)
        case .blob(let blob):
            blob.withUnsafeBytes { sqsync_result_blob(context, $0.baseAddress, Int32($0.count)) }
        default:
            sqlite3_result_error(context, "sqsync: a key in sqsync's metadata is in no form this sqsync reads", -1)
        }
    }
}
