import SQLiteDatabase

/// The random local writes the property tests make to their `notes(id, title, n, body)`
/// table, drawn from the history so that a seed replays them.
extension PropertyHistory {
    /// A value for a column without a declared type: NULL, a 64-bit integer, a real, text or
    /// a BLOB, and with `kinds` 6 also a small integer.
    public mutating func value(kinds: Int) -> SQLValue {
        switch below(kinds) {
        case 0: return .null
        case 1: return .integer(Int64(bitPattern: random.next()))
        case 2: return .real(Double(below(1_000_000)) / 7.0)
        case 3: return .text("t\(below(100))-é")
        case 4: return .blob((0..<below(5)).map { _ in UInt8(truncatingIfNeeded: random.next()) })
        default: return .integer(Int64(below(10)))
        }
    }

    /// One write by `who` among `keys`: an insert (or re-insert), an update of some columns,
    /// a delete, or a key change. `title` draws a title; values come from ``value(kinds:)``.
    public mutating func writeNote(
        in database: Database, keys: [String], who: String, valueKinds: Int, title: (inout PropertyHistory) -> String
    ) throws {
        let present = Set(try database.valueRows("SELECT id FROM notes").compactMap { $0[0].stringValue })
        let absent = keys.filter { !present.contains($0) }
        let roll = below(100)
        if present.isEmpty || (roll < 30 && !absent.isEmpty) {
            guard !absent.isEmpty else { return }
            let key = pick(absent)
            let (titleText, n) = (title(&self), Int64(below(1000)))
            try database.run("INSERT INTO notes VALUES (?, ?, ?, ?)", .text(key), .text(titleText), .integer(n), value(kinds: valueKinds))
            note("\(who) inserts \(key)")
        } else if roll < 75 {
            let key = pick(present.sorted())
            let columns = ["title", "n", "body"].filter { _ in chance(50) }
            guard !columns.isEmpty else { return }
            var values: [SQLValue] = []
            for column in columns {
                switch column {
                case "title": values.append(.text(title(&self)))
                case "n": values.append(.integer(Int64(below(1000))))
                default: values.append(value(kinds: valueKinds))
                }
            }
            try database.run(
                "UPDATE notes SET \(columns.map { "\($0) = ?" }.joined(separator: ", ")) WHERE id = ?", values + [.text(key)])
            note("\(who) updates \(key) \(columns)")
        } else if roll < 92 || absent.isEmpty {
            let key = pick(present.sorted())
            try database.run("DELETE FROM notes WHERE id = ?", .text(key))
            note("\(who) deletes \(key)")
        } else {
            let old = pick(present.sorted()), new = pick(absent)
            try database.run("UPDATE notes SET id = ? WHERE id = ?", .text(new), .text(old))
            note("\(who) renames \(old) → \(new)")
        }
    }
}
