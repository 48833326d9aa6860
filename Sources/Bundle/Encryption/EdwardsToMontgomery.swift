import Crypto
import FoundationEssentials
import Glibc

/// The X25519 keys of an Ed25519 key pair, as age's `ssh-ed25519` recipient type uses them
/// (the reference code's `agessh` package): the same curve, seen in Montgomery form, so one
/// SSH key both signs bundles and receives them. swift-crypto has no call for the public
/// half: it needs one inverse in the field of integers modulo 2^255 − 19.
enum EdwardsToMontgomery {
    /// The Montgomery u-coordinate of an Ed25519 public key: u = (1 + y) / (1 − y), where y is
    /// the key's 255-bit little-endian encoding without its sign bit. Nil for y = 1 (the
    /// neutral point, which no real key is), whose u would be 0.
    static func publicKey(_ edwards: SSHPublicKey) -> [UInt8]? {
        var bytes = edwards.rawRepresentation
        bytes[31] &= 0x7f
        let y = FieldElement(littleEndian: bytes)
        let denominator = FieldElement.one - y
        guard !denominator.isZero else { return nil }
        return ((FieldElement.one + y) * denominator.inverse).littleEndianBytes
    }

    /// The X25519 private scalar of an Ed25519 seed: the first half of SHA-512(seed), which
    /// Ed25519 itself clamps into its secret scalar (X25519 clamps it the same way).
    static func privateKey(seed: [UInt8]) -> Curve25519.KeyAgreement.PrivateKey {
        let scalar = Array(SHA512.hash(data: seed).prefix(32))
        // 32 bytes are always a valid X25519 private key.
        return try! Curve25519.KeyAgreement.PrivateKey(rawRepresentation: scalar)
    }
}

/// An integer modulo p = 2^255 − 19 in four 64-bit limbs, least significant first, always
/// reduced below p. Only what the conversion needs: add, subtract, multiply, invert.
struct FieldElement: Equatable {
    private(set) var limbs: [UInt64]

    static let modulus: [UInt64] = [0xFFFF_FFFF_FFFF_FFED, 0xFFFF_FFFF_FFFF_FFFF, 0xFFFF_FFFF_FFFF_FFFF, 0x7FFF_FFFF_FFFF_FFFF]
    static let one = FieldElement(reduced: [1, 0, 0, 0])

    private init(reduced limbs: [UInt64]) { self.limbs = limbs }

    /// 32 little-endian bytes, reduced modulo p.
    init(littleEndian bytes: [UInt8]) {
        var limbs = [UInt64](repeating: 0, count: 4)
        for (index, byte) in bytes.prefix(32).enumerated() { limbs[index / 8] |= UInt64(byte) << (8 * UInt64(index % 8)) }
        self.limbs = Self.subtractingModulusWhileAbove(limbs)
    }

    var littleEndianBytes: [UInt8] {
        (0..<32).map { UInt8(truncatingIfNeeded: limbs[$0 / 8] >> (8 * UInt64($0 % 8))) }
    }

    var isZero: Bool { limbs.allSatisfy { $0 == 0 } }

    static func + (a: FieldElement, b: FieldElement) -> FieldElement {
        // Both are below p < 2^255, so the sum fits in 256 bits.
        FieldElement(reduced: subtractingModulusWhileAbove(adding(a.limbs, b.limbs)))
    }

    static func - (a: FieldElement, b: FieldElement) -> FieldElement {
        let (difference, borrow) = subtracting(a.limbs, b.limbs)
        // Below zero: a − b + 2^256 is held; adding p (mod 2^256) gives a − b + p.
        return FieldElement(reduced: borrow ? adding(difference, modulus) : difference)
    }

    static func * (a: FieldElement, b: FieldElement) -> FieldElement {
        var product = [UInt64](repeating: 0, count: 8)
        for i in 0..<4 {
            var carry: UInt64 = 0
            for j in 0..<4 {
                let (high, low) = a.limbs[i].multipliedFullWidth(by: b.limbs[j])
                let (partial, overflow1) = product[i + j].addingReportingOverflow(low)
                let (total, overflow2) = partial.addingReportingOverflow(carry)
                product[i + j] = total
                carry = high &+ (overflow1 ? 1 : 0) &+ (overflow2 ? 1 : 0)
            }
            product[i + 4] = carry
        }
        return FieldElement(reduced: reduce(product))
    }

    /// a^(p − 2), which is 1/a for a ≠ 0 (Fermat), by square and multiply.
    var inverse: FieldElement {
        var exponent = Self.modulus
        exponent[0] -= 2
        var result = FieldElement.one
        for bit in stride(from: 254, through: 0, by: -1) {
            result = result * result
            if exponent[bit / 64] >> UInt64(bit % 64) & 1 == 1 { result = result * self }
        }
        return result
    }

    /// A 512-bit product modulo p: 2^256 ≡ 38, so the high half folds in times 38.
    private static func reduce(_ wide: [UInt64]) -> [UInt64] {
        var folded = [UInt64](repeating: 0, count: 5)
        var carry: UInt64 = 0
        for index in 0..<4 {
            let (high, low) = wide[index + 4].multipliedFullWidth(by: 38)
            let (partial, overflow1) = wide[index].addingReportingOverflow(low)
            let (total, overflow2) = partial.addingReportingOverflow(carry)
            folded[index] = total
            carry = high &+ (overflow1 ? 1 : 0) &+ (overflow2 ? 1 : 0)
        }
        folded[4] = carry
        // What is left above 2^256 is small: fold it in again, and once more for a carry.
        var extra = folded[4]
        var limbs = Array(folded[0..<4])
        while extra != 0 {
            let (high, low) = extra.multipliedFullWidth(by: 38)
            var add = low
            var next = high
            for index in 0..<4 {
                let (total, overflow) = limbs[index].addingReportingOverflow(add)
                limbs[index] = total
                add = overflow ? 1 : 0
                if add == 0 { break }
            }
            next &+= add
            extra = next
        }
        return subtractingModulusWhileAbove(limbs)
    }

    private static func subtractingModulusWhileAbove(_ value: [UInt64]) -> [UInt64] {
        var value = value
        while !isBelowModulus(value) { value = subtracting(value, modulus).difference }
        return value
    }

    private static func isBelowModulus(_ value: [UInt64]) -> Bool {
        for index in stride(from: 3, through: 0, by: -1) where value[index] != modulus[index] {
            return value[index] < modulus[index]
        }
        return false
    }

    /// The sum modulo 2^256.
    private static func adding(_ a: [UInt64], _ b: [UInt64]) -> [UInt64] {
        var sum = [UInt64](repeating: 0, count: 4)
        var carry: UInt64 = 0
        for index in 0..<4 {
            let (partial, overflow1) = a[index].addingReportingOverflow(b[index])
            let (total, overflow2) = partial.addingReportingOverflow(carry)
            sum[index] = total
            carry = (overflow1 ? 1 : 0) + (overflow2 ? 1 : 0)
        }
        return sum
    }

    /// 256-bit difference, and whether it borrowed.
    private static func subtracting(_ a: [UInt64], _ b: [UInt64]) -> (difference: [UInt64], borrow: Bool) {
        var difference = [UInt64](repeating: 0, count: 4)
        var borrow: UInt64 = 0
        for index in 0..<4 {
            let (partial, overflow1) = a[index].subtractingReportingOverflow(b[index])
            let (total, overflow2) = partial.subtractingReportingOverflow(borrow)
            difference[index] = total
            borrow = (overflow1 ? 1 : 0) + (overflow2 ? 1 : 0)
        }
        return (difference, borrow != 0)
    }
}
