import SQLiteDatabase

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
    /// `sqsync_key(stored)` and `sqsync_stored_key(key)`, registered where a replica opens
    /// its database.
    static var functions: [SQLFunction] {
        [
            SQLFunction("sqsync_key", argumentCount: 1, options: [.deterministic, .innocuous], key),
            SQLFunction("sqsync_stored_key", argumentCount: 1, options: [.deterministic, .innocuous], storedKey),
        ]
    }

    private static func key(_ arguments: SQLFunctionArguments, _ result: SQLFunctionResult) {
        switch arguments.storageClass(0) {
        case .text:
            guard let text = arguments.bytes(0) else { return }
            if let compact = compactUUID(text.assumingMemoryBound(to: UInt8.self)) {
                result.setBlob(compact)
            } else {
                result.setArgument(arguments, 0)
            }
        case .blob:
            guard let blob = arguments.bytes(0) else { return }
            result.setBlob([plainBlob] + blob)
        default:
            result.setArgument(arguments, 0)
        }
    }

    private static func storedKey(_ arguments: SQLFunctionArguments, _ result: SQLFunctionResult) {
        guard arguments.storageClass(0) == .blob else { return result.setArgument(arguments, 0) }
        guard let bytes = arguments.bytes(0) else { return }
        switch stored(bytes) {
        case .text(let text): result.setText(text)
        case .blob(let blob): result.setBlob(blob)
        default: result.setError("sqsync: a key in sqsync's metadata is in no form this sqsync reads")
        }
    }
}

extension Replica {
    /// The key under which sqsync's metadata holds the row with these key values.
    func metadataKey(_ values: [SQLValue]) throws -> SQLValue {
        if values.count == 1 { return MetadataKey.of(values[0]) }
        let statement = try database.statement(MergeSQL.compositeKey(columns: values.count))
        try statement.bind(values)
        return MetadataKey.of(try statement.fetchOne { $0.value(at: 0) } ?? .null)
    }
}
