import FoundationEssentials
import Glibc

/// Small text helpers every module uses, here because sqsync links FoundationEssentials only
/// (the full Foundation brings ICU, three quarters of a static binary's size).
extension StringProtocol {
    /// Without leading and trailing white space (spaces, tabs, line ends).
    public var trimmed: String {
        let isSpace: (Character) -> Bool = { $0.isWhitespace || $0.isNewline }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else { return "" }
        return String(self[first...last])
    }
}

/// Lower-case hexadecimal, two digits per byte.
public func hexString(_ bytes: some Sequence<UInt8>) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var result: [UInt8] = []
    for byte in bytes {
        result.append(digits[Int(byte >> 4)])
        result.append(digits[Int(byte & 0xf)])
    }
    return String(decoding: result, as: UTF8.self)
}

/// `value` in lower-case hexadecimal, zero-padded to `width` digits.
public func hexString(_ value: some BinaryInteger, width: Int) -> String {
    zeroPadded(String(value, radix: 16), width: width)
}

/// `value` in decimal, zero-padded to `width` digits.
public func decimalString(_ value: some BinaryInteger, width: Int) -> String {
    zeroPadded(String(value), width: width)
}

private func zeroPadded(_ digits: String, width: Int) -> String {
    String(repeating: "0", count: max(0, width - digits.count)) + digits
}

/// What went wrong, in the C library's words where the error carries an errno (a file
/// operation's), as Foundation's `localizedDescription` would say it.
public func errorText(_ error: any Error) -> String {
    let posix = (error as? POSIXError) ?? ((error as? CocoaError)?.underlying as? POSIXError)
    if let posix { return String(cString: strerror(posix.code.rawValue)) }
    return "\(error)"
}
