/// Bech32 (BIP 173), the encoding age gives X25519 keys: `age1…` for a recipient and
/// `AGE-SECRET-KEY-1…` for an identity. With it a mailbox's readers' key is a line the
/// standard `age` tool takes as it is (docs/BUNDLE_FORMAT.md, "Readers' keys").
enum Bech32 {
    private static let alphabet = Array("qpzry9x8gf2tvdw0s3jn54khce6mua7l".utf8)
    private static let generator: [UInt32] = [0x3b6a_57b2, 0x2650_8e6d, 0x1ea1_19fa, 0x3d42_33dd, 0x2a14_62b3]

    private static func polymod(_ values: [UInt8]) -> UInt32 {
        var checksum: UInt32 = 1
        for value in values {
            let top = checksum >> 25
            checksum = (checksum & 0x1ff_ffff) << 5 ^ UInt32(value)
            for bit in 0..<5 where top >> UInt32(bit) & 1 == 1 { checksum ^= generator[bit] }
        }
        return checksum
    }

    private static func expanded(_ prefix: [UInt8]) -> [UInt8] {
        prefix.map { $0 >> 5 } + [0] + prefix.map { $0 & 31 }
    }

    /// Regroups bits; `padding` false refuses leftover bits that are not zeros.
    private static func regrouped(_ data: [UInt8], from: Int, to: Int, padding: Bool) -> [UInt8]? {
        var accumulator = 0, bits = 0
        var result: [UInt8] = []
        let mask = (1 << to) - 1
        for value in data {
            accumulator = accumulator << from | Int(value)
            bits += from
            while bits >= to {
                bits -= to
                result.append(UInt8(accumulator >> bits & mask))
            }
            accumulator &= (1 << bits) - 1
        }
        if padding {
            if bits > 0 { result.append(UInt8(accumulator << (to - bits) & mask)) }
        } else if bits >= from || accumulator != 0 {
            return nil
        }
        return result
    }

    /// `prefix` in lower case; the result is lower case (upper-case it whole if need be).
    static func encode(prefix: String, _ data: [UInt8]) -> String {
        let human = Array(prefix.lowercased().utf8)
        let values = regrouped(data, from: 8, to: 5, padding: true)!
        let checksum = polymod(expanded(human) + values + [0, 0, 0, 0, 0, 0]) ^ 1
        let check = (0..<6).map { UInt8(checksum >> UInt32(5 * (5 - $0)) & 31) }
        return String(decoding: human + [UInt8(ascii: "1")] + (values + check).map { alphabet[Int($0)] }, as: UTF8.self)
    }

    /// The bytes of `text` when it is valid Bech32 under `prefix` (either case, not mixed).
    static func decode(prefix: String, _ text: String) -> [UInt8]? {
        guard text.utf8.count <= 1000, text == text.lowercased() || text == text.uppercased() else { return nil }
        let lower = Array(text.lowercased().utf8)
        let human = Array(prefix.lowercased().utf8)
        guard lower.count >= human.count + 7, Array(lower.prefix(human.count)) == human, lower[human.count] == UInt8(ascii: "1")
        else { return nil }
        var values: [UInt8] = []
        for character in lower[(human.count + 1)...] {
            guard let index = alphabet.firstIndex(of: character) else { return nil }
            values.append(UInt8(index))
        }
        guard polymod(expanded(human) + values) == 1 else { return nil }
        return regrouped(Array(values.dropLast(6)), from: 5, to: 8, padding: false)
    }
}
