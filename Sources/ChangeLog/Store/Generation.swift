import FoundationEssentials
import SQLiteDatabase

/// "Has anything in sqsync's own state changed since?" in one row: every insert, update and
/// delete in a watched table raises `_sqsync_generation`'s number, by triggers. At a thousand
/// replicas, reading and hashing a line per replica to answer it cost a quiet sync more than
/// everything else it did, and the fold's pass over every acknowledgement (a row per peer and
/// site) as much again (docs/PERFORMANCE.md, "A thousand replicas").
extension Replica {
    /// The tables the fold's pass over the acknowledgements reads (``forgetAcknowledgedChanges``).
    static let horizonInputs = ["_sqsync_sites", "_sqsync_acks", "_sqsync_replica"]

    /// The number, after making sure each of `tables` that exists has its three triggers, by
    /// name and on that table: a table rebuilt by a later migration (or renamed aside, taking
    /// its triggers along), or created after the others (Bundle's), gets them then, and the
    /// number is raised, so that no state read before counts as unchanged. Tables that do
    /// not exist yet are skipped; the one that creates them is a schema change.
    public func generation(watching tables: [String]) throws -> Int64 {
        let list = SQLValue.text(String(decoding: try JSONEncoder().encode(tables), as: UTF8.self))
        if let row = try database.row(GenerationSQL.triggerCount, list), try row.int64("triggers") != 3 * (try row.int64("tables")) {
            try database.inTransaction {
                for table in tables where try database.int64(GenerationSQL.tableExists, .text(table)) == 1 {
                    for trigger in GenerationSQL.triggers(on: table) {
                        try database.execute("DROP TRIGGER IF EXISTS \(quoteIdentifier(trigger.name))")
                        try database.execute(trigger.sql)
                    }
                }
                try database.execute(GenerationSQL.raise)
            }
        }
        return try database.int64(GenerationSQL.current)
    }
}

/// The generation's SQL, in one place.
enum GenerationSQL {
    static let current = #"SELECT "n" FROM "_sqsync_generation""#
    static let raise = #"UPDATE "_sqsync_generation" SET "n" = "n" + 1"#
    static let horizonAt = #"SELECT "horizon_at" FROM "_sqsync_generation""#
    static let recordHorizon = #"UPDATE "_sqsync_generation" SET "horizon_at" = "n""#
    static let tableExists = #"SELECT count(*) FROM sqlite_schema WHERE "type" = 'table' AND "name" = ?"#

    /// How many of the tables named in the JSON list ?1 exist, and how many of the generation
    /// triggers they should have are there, each under its name on its own table.
    static let triggerCount = """
        SELECT (SELECT count(*) FROM sqlite_schema WHERE "type" = 'table' AND "name" IN (SELECT "value" FROM json_each(?1))) AS "tables",
               (SELECT count(*) FROM sqlite_schema s JOIN json_each(?1) w ON s."tbl_name" = w."value"
                WHERE s."type" = 'trigger' AND s."name" IN ('_sqsync_generation_' || w."value" || '_insert',
                    '_sqsync_generation_' || w."value" || '_update', '_sqsync_generation_' || w."value" || '_delete')) AS "triggers"
        """

    static func triggers(on table: String) -> [(name: String, sql: String)] {
        ["insert", "update", "delete"].map { operation in
            let name = "_sqsync_generation_\(table)_\(operation)"
            return (
                name,
                """
                CREATE TRIGGER \(quoteIdentifier(name)) AFTER \(operation.uppercased()) ON \(quoteIdentifier(table))
                BEGIN
                  \(raise);
                END
                """
            )
        }
    }
}
