import ArgumentParser

/// What to say when the first word is not a command: a bare `sqsync` is a usage error (exit
/// 2, with the list of commands), and a misspelt command is named with the nearest one.
enum CommandSuggestion {
    /// The usage error for `arguments` (without the program name), or nil when they name a
    /// command (or start with an option, which the parser judges).
    static func usageError(for arguments: [String], commands: [String], usage: String) -> String? {
        guard let first = arguments.first else { return usage }
        guard !first.hasPrefix("-"), first != "help", !commands.contains(first) else { return nil }
        let nearest = commands.map { ($0, distance(first.lowercased(), $0)) }.min { $0.1 < $1.1 }
        if let nearest, nearest.1 <= max(2, first.count / 3) {
            return "sqsync: unknown command '\(first)'; did you mean '\(nearest.0)'? (sqsync --help lists them)"
        }
        return "sqsync: unknown command '\(first)' (sqsync --help lists the commands)"
    }

    /// Edit distance, with a swap of two neighbours counting as one edit (`stauts`).
    static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        guard !a.isEmpty, !b.isEmpty else { return max(a.count, b.count) }
        var table = [[Int]](repeating: [Int](repeating: 0, count: b.count + 1), count: a.count + 1)
        for i in 0...a.count { table[i][0] = i }
        for j in 0...b.count { table[0][j] = j }
        for i in 1...a.count {
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                table[i][j] = min(table[i - 1][j] + 1, table[i][j - 1] + 1, table[i - 1][j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    table[i][j] = min(table[i][j], table[i - 2][j - 2] + 1)
                }
            }
        }
        return table[a.count][b.count]
    }
}
