import SQLiteDatabase

extension Database {
    /// Every row of a query as an array of values, for tests that compare whole rows.
    public func valueRows(_ sql: String, _ values: SQLValue...) throws -> [[SQLValue]] {
        try rows(sql, values).map(\.values)
    }

    /// Every row of every table, sqsync's own included, each as text, sorted: for checks that
    /// a refused import changed nothing.
    public func everyTable() throws -> [String: [String]] {
        var result: [String: [String]] = [:]
        let names = try valueRows("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        for name in names.compactMap({ $0[0].stringValue }) {
            result[name] = try valueRows("SELECT * FROM \(quoteIdentifier(name))").map { "\($0)" }.sorted()
        }
        return result
    }
}
