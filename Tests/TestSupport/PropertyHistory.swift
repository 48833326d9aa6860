import Foundation

/// A property test's random choices and what it did with them: seeded, so that a failing
/// seed replays (`SQSYNC_PROPERTY_SEED=S`), with the last steps for the failure message.
public struct PropertyHistory {
    public let seed: UInt64
    public var random: SplitMix64
    public private(set) var steps: [String] = []

    public init(seed: UInt64) {
        self.seed = seed
        random = SplitMix64(seed: seed)
    }

    /// The seeds to run: `SQSYNC_PROPERTY_SEED=S` replays one, `SQSYNC_PROPERTY_SEEDS=N` runs
    /// N from `first` on, else `count`.
    public static func seeds(from first: UInt64, default count: Int = 3) -> [UInt64] {
        let environment = ProcessInfo.processInfo.environment
        if let one = environment["SQSYNC_PROPERTY_SEED"].flatMap(UInt64.init) { return [one] }
        let count = environment["SQSYNC_PROPERTY_SEEDS"].flatMap(Int.init) ?? count
        return (0..<UInt64(max(count, 1))).map { first + $0 }
    }

    public mutating func note(_ step: String) { steps.append(step) }
    /// The last 40 steps, or every step with `SQSYNC_PROPERTY_STEPS=all` (replaying one seed).
    public var tail: String {
        let all = ProcessInfo.processInfo.environment["SQSYNC_PROPERTY_STEPS"] == "all"
        return steps.suffix(all ? steps.count : 40).joined(separator: "\n")
    }

    public mutating func below(_ bound: Int) -> Int { random.int(bound) }
    public mutating func chance(_ percent: Int) -> Bool { random.chance(percent) }
    public mutating func pick<T>(_ items: [T]) -> T { random.pick(items) }
}
