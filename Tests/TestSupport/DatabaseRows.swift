import SQLiteDatabase

extension Database {
    /// Every row of a query as an array of values, for tests that compare whole rows.
    public func valueRows(_ sql: String, _ values: SQLValue...) throws -> [[SQLValue]] {
        try rows(sql, values).map(\.values)
    }
}
