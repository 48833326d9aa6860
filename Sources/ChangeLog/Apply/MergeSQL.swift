import SQLiteDatabase

/// The statements the applier runs, as SQL, in one place.
enum MergeSQL {
    static let startApplying = #"UPDATE "_sqsync_replica" SET "applying" = 1"#
    static let stopApplying = #"UPDATE "_sqsync_replica" SET "applying" = 0"#

    /// Triggers in the schema other than sqsync's own: the app's, which an import must fire.
    /// GLOB, unlike LIKE, tells `_SQSYNC_…` (the app's) from `_sqsync_…`.
    static let appTriggers = """
        SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND name NOT GLOB '_sqsync_*'
        """

    /// A sender's row: retired, and its clock as it last reported it.
    static let senderRecord = """
        SELECT "retired", "reported_seq", "reported_hlc" FROM "_sqsync_sites" WHERE "knowledge_id" = ?
        """

    /// Sites whose deletions this replica purged, up to where.
    static let purgedSites = """
        SELECT "knowledge_id", "forgotten_seq", coalesce("name", "knowledge_id") AS "label" FROM "_sqsync_sites"
        WHERE "forgotten_seq" > 0
        """

    /// What a merged change set's origin held of a site: this replica must hold as much before
    /// a change it knows of, with no trace here, can only come from a copied database.
    static let raiseNeeded = #"UPDATE "_sqsync_sites" SET "needed_seq" = max("needed_seq", ?2) WHERE "site" = ?1"#

    static let holdsWhatItWasTold = """
        SELECT NOT EXISTS (SELECT 1 FROM "_sqsync_sites" s, "_sqsync_replica" r
                           WHERE s."site" != r."site" AND s."known_seq" < s."needed_seq")
           AND NOT EXISTS (SELECT 1 FROM "_sqsync_sites" WHERE "forgotten_seq" > 0)
        """

    /// What this replica held of a retired site when it was retired (NULL: not retired).
    static let retiredAtByID = """
        SELECT "retired_seq" FROM "_sqsync_sites" WHERE "knowledge_id" = ? AND "retired" = 1
        """

    static let lastLogRow = #"SELECT coalesce(max("id"), 0) FROM "_sqsync_log""#

    /// Log rows the triggers appended for the import's own writes: they are not local changes.
    static let forgetImportLogRows = #"DELETE FROM "_sqsync_log" WHERE "id" > ?"#

    static let rowEntry = """
        SELECT "cl", "hlc", "site", "seq", "cells" FROM "_sqsync_rows" WHERE "tid" = ? AND "pk" = ?
        """

    /// A deleted row's entry. A new clock takes the column clocks with it: they are stored
    /// relative to the row's (``CellClocks``), and a deleted row has none.
    static let upsertRowEntry = """
        INSERT INTO "_sqsync_rows" ("tid", "pk", "cl", "hlc", "site", "seq") VALUES (?, ?, ?, ?, ?, ?)
        ON CONFLICT ("tid", "pk") DO UPDATE SET "cl" = excluded."cl", "hlc" = excluded."hlc",
            "site" = excluded."site", "seq" = excluded."seq", "cells" = NULL
        """

    /// The same for a row whose entry is known to exist.
    static let updateRowEntry = """
        UPDATE "_sqsync_rows" SET "cl" = ?3, "hlc" = ?4, "site" = ?5, "seq" = ?6, "cells" = NULL
        WHERE "tid" = ?1 AND "pk" = ?2
        """

    /// The entry of a row just written, with its column clocks and the checksum of its values
    /// as stored (``RowChecksum``), in one write: ?1 the metadata key, ?2–?5 cl, hlc, site,
    /// seq, ?6 the column clocks (packed, ``CellClocks``), the key values from ?7 on.
    static func upsertLiveRowEntry(_ table: TableInfo) -> String {
        upsertLiveRowEntry(table, checksum: RowChecksum.ofRow(table, firstKeyParameter: 7))
    }

    /// The same with the checksum bound as ?7, computed by the applier from the values it
    /// inserted: no read of the row back.
    static func upsertLiveRowEntryWithChecksum(_ table: TableInfo) -> String {
        upsertLiveRowEntry(table, checksum: "?7")
    }

    private static func upsertLiveRowEntry(_ table: TableInfo, checksum: String) -> String {
        """
        INSERT INTO "_sqsync_rows" ("tid", "pk", "cl", "hlc", "site", "seq", "cells", "sum")
        VALUES (\(table.tid), ?1, ?2, ?3, ?4, ?5, ?6, \(checksum))
        \(liveRowEntryReplaces)
        """
    }

    /// A live row's entry replaces whatever entry its key had.
    private static let liveRowEntryReplaces = """
        ON CONFLICT ("tid", "pk") DO UPDATE SET "cl" = excluded."cl", "hlc" = excluded."hlc",
            "site" = excluded."site", "seq" = excluded."seq", "cells" = excluded."cells", "sum" = excluded."sum"
        """



    /// A table's CREATE statement.
    static let tableDefinition = "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?"

    /// The greatest metadata key a table's entries hold (``EntryKeyCeiling``), and its bytes
    /// as stored.
    static let greatestEntryKey = """
        SELECT "pk", CAST("pk" AS BLOB) AS "bytes" FROM "_sqsync_rows" WHERE "tid" = ? ORDER BY "pk" DESC LIMIT 1
        """

    /// After a merge of columns: the row's column clocks (?2, packed) and the checksum of its
    /// values as stored, in one write; ?1 the metadata key, the key values from ?3 on.
    static func writeCellsAndChecksum(_ table: TableInfo) -> String {
        """
        UPDATE "_sqsync_rows" SET "cells" = ?2, "sum" = \(RowChecksum.ofRow(table, firstKeyParameter: 3))
        WHERE "tid" = \(table.tid) AND "pk" = ?1
        """
    }

    /// The same with the checksum bound as ?3, handed over by the row's UPDATE
    /// (``updateRowNotingChecksum(_:columns:)``): no read of the row back.
    static func writeCellsAndNotedChecksum(_ table: TableInfo) -> String {
        """
        UPDATE "_sqsync_rows" SET "cells" = ?2, "sum" = ?3 WHERE "tid" = \(table.tid) AND "pk" = ?1
        """
    }

    static let recordConflict = """
        INSERT INTO "_sqsync_conflicts" ("kind", "table_name", "pk", "column_name", "lost_value", "lost_row",
            "lost_site", "lost_hlc", "won_site", "won_hlc", "won_value", "lost_value_known")
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        """

    /// Moves the local clock past every value seen, and takes the next local change.
    static let observeClock = #"UPDATE "_sqsync_replica" SET "hlc" = max("hlc", ?)"#
    static let tick = """
        UPDATE "_sqsync_replica" SET "seq" = "seq" + 1,
            "hlc" = max("hlc" + 1, \(MetadataSQL.wallClockMilliseconds))
        RETURNING "site", "seq", "hlc"
        """

    static let advanceKnowledge = """
        UPDATE "_sqsync_sites" SET "known_seq" = max("known_seq", ?) WHERE "site" = ?
        """

    /// The latest time this replica learned of a site's changes (``LearningEvent``).
    static let recordLearning = """
        INSERT OR REPLACE INTO "_sqsync_learned" ("site", "previous", "reached", "own_seq") VALUES (?, ?, ?, ?)
        """

    static let schemaVersion = #"UPDATE "_sqsync_sites" SET "schema_version" = ? WHERE "site" = ?"#

    static let heardFrom = """
        UPDATE "_sqsync_sites" SET "last_heard" = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
            "first_heard" = coalesce("first_heard", strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
            "reported_seq" = CASE WHEN "reported_seq" IS NULL OR "reported_seq" < ?1 THEN ?1 ELSE "reported_seq" END,
            "reported_hlc" = CASE WHEN "reported_seq" IS NULL OR "reported_seq" < ?1 THEN ?2 ELSE "reported_hlc" END
        WHERE "site" = ?3
        """

    static func compositeKey(columns: Int) -> String {
        "SELECT " + TriggerSQL.storedKey((1...columns).map { "?\($0)" })
    }

    static func keyCondition(_ columns: [ColumnInfo], firstParameter: Int) -> String {
        columns.enumerated().map { "\(quoteIdentifier($0.element.name)) = ?\(firstParameter + $0.offset)" }
            .joined(separator: " AND ")
    }

    static func insertRow(_ table: String, columns: [String]) -> String {
        """
        INSERT INTO \(quoteIdentifier(table)) (\(columns.map(quoteIdentifier).joined(separator: ", ")))
        VALUES (\(columns.indices.map { "?\($0 + 1)" }.joined(separator: ", ")))
        """
    }

    /// `count` rows in one statement, parameters numbered row after row. `orIgnore`: a row
    /// that breaks a constraint is left out, and the statement, which then cannot fail part-way,
    /// keeps no statement journal.
    static func insertRows(_ table: String, columns: [String], count: Int, orIgnore: Bool = false) -> String {
        let rows = (0..<count).map { row in
            "(" + columns.indices.map { "?\(row * columns.count + $0 + 1)" }.joined(separator: ", ") + ")"
        }
        return """
            INSERT \(orIgnore ? "OR IGNORE " : "")INTO \(quoteIdentifier(table))
            (\(columns.map(quoteIdentifier).joined(separator: ", "))) VALUES \(rows.joined(separator: ", "))
            """
    }

    /// The entries of `count` rows just inserted, each with the metadata key, cl, hlc, site,
    /// seq, packed column clocks and checksum (``rowEntryParameters`` a row).
    static func upsertLiveRowEntries(_ table: TableInfo, count: Int) -> String {
        let rows = (0..<count).map { row in
            "(\(table.tid), " + (1...rowEntryParameters).map { "?\(row * rowEntryParameters + $0)" }.joined(separator: ", ") + ")"
        }
        return """
            INSERT INTO "_sqsync_rows" ("tid", "pk", "cl", "hlc", "site", "seq", "cells", "sum")
            VALUES \(rows.joined(separator: ", "))
            \(liveRowEntryReplaces)
            """
    }

    static let rowEntryParameters = 7

    static func updateRow(_ table: String, columns: [String], key: [ColumnInfo]) -> String {
        """
        UPDATE \(quoteIdentifier(table)) SET \(columns.enumerated().map { "\(quoteIdentifier($0.element)) = ?\($0.offset + 1)" }.joined(separator: ", "))
        WHERE \(keyCondition(key, firstParameter: columns.count + 1))
        """
    }

    /// ``updateRow(_:columns:key:)`` that also leaves the checksum of the row it writes in
    /// the connection's ``RowChecksum/Note``: its WHERE clause passes the function the new
    /// value of each column set (the last, where a column is set twice, as SQLite does) and
    /// the stored value of every other. Only where SQLite stores the new values as given, and
    /// neither a trigger nor a foreign key action runs that could change the row after.
    static func updateRowNotingChecksum(_ table: TableInfo, columns: [String]) -> String {
        let values = table.columns.map { column in
            columns.lastIndex(of: column.name).map { "?\($0 + 1)" } ?? quoteIdentifier(column.name)
        }
        return updateRow(table.name, columns: columns, key: table.primaryKey)
            + " AND \(RowChecksum.noteFunctionName)(\(values.joined(separator: ", ")))"
    }

    /// Adds ?1 to a counter column, as SQLite adds (INTEGER overflows into REAL).
    static func addToColumn(_ table: String, column: String, key: [ColumnInfo]) -> String {
        "UPDATE \(quoteIdentifier(table)) SET \(quoteIdentifier(column)) = \(quoteIdentifier(column)) + ?1 WHERE \(keyCondition(key, firstParameter: 2))"
    }

    static func deleteRow(_ table: String, key: [ColumnInfo]) -> String {
        "DELETE FROM \(quoteIdentifier(table)) WHERE \(keyCondition(key, firstParameter: 1))"
    }

    static func selectRow(_ table: String, columns: [String], key: [ColumnInfo]) -> String {
        "SELECT \(columns.map(quoteIdentifier).joined(separator: ", ")) FROM \(quoteIdentifier(table)) WHERE \(keyCondition(key, firstParameter: 1))"
    }

    /// Unique indexes other than the primary key: their plain columns and each column's
    /// collation (a NOCASE index clashes on values that differ only in case).
    static let uniqueIndexes = """
        SELECT il."name" AS "index_name", group_concat(ii."name", char(31)) AS "columns",
               group_concat(ii."coll", char(31)) AS "collations"
        FROM pragma_index_list(?1) il JOIN pragma_index_xinfo(il."name") ii
        WHERE il."unique" = 1 AND il."origin" != 'pk' AND il."partial" = 0 AND ii."key" = 1
        GROUP BY il."name" HAVING count(*) = count(ii."name")
        """
}
