/// SplitMix64 (Steele, Lea, Flood 2014): small, seedable, and the same sequence on every
/// platform, so a failing property-test seed can be replayed anywhere.
public struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// Uniform enough in 0..<n for the small n tests use.
    public mutating func int(_ n: Int) -> Int { Int(next() % UInt64(n)) }
    public mutating func chance(_ percent: Int) -> Bool { int(100) < percent }
    public mutating func pick<T>(_ items: [T]) -> T { items[int(items.count)] }
}
