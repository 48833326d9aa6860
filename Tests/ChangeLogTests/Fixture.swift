import Foundation
import SQLiteDatabase
import TestSupport
import XCTest

@testable import ChangeLog

/// What one in-process exchange carried: the header and every row change, kept in memory so
/// a test can drop it, apply it twice, or apply it late.
struct ChangeSet {
    var header: ChangeSetHeader
    var changes: [RowChange]
    /// Knowledge ID of the replica it was made for (informational).
    var receiver: String?
}

/// A temporary folder for one test's replicas, removed when the sandbox goes away.
final class Sandbox {
    let directory: String

    init() throws {
        directory =
            FileManager.default.temporaryDirectory
            .appendingPathComponent("sqsync-changelog-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(atPath: directory) }

    func path(_ name: String) -> String { directory + "/" + name }

    /// A new replica named `name` whose schema is `schema`, with `track` tracked.
    func replica(
        _ name: String, schema: String = "", track tables: [String] = [],
        allowIntegerPrimaryKey: Bool = false
    ) throws -> Replica {
        let (replica, created) = try Replica.initialize(path: path(name + ".db"), name: name)
        XCTAssertTrue(created, "\(name) should be a new replica")
        if !schema.isEmpty { try replica.database.execute(schema) }
        if !tables.isEmpty { try replica.track(tables, allowIntegerPrimaryKey: allowIntegerPrimaryKey) }
        return replica
    }

    /// A clone of `source` (same schema, data and knowledge, new identity).
    func clone(_ source: Replica, _ name: String) throws -> Replica {
        try source.clone(to: path(name + ".db"), name: name)
    }

    /// `count` replicas sharing one schema: the first made here, the others cloned from it.
    func replicas(_ names: [String], schema: String, track tables: [String]) throws -> [Replica] {
        let first = try replica(names[0], schema: schema, track: tables)
        return [first] + (try names.dropFirst().map { try clone(first, $0) })
    }
}

// MARK: - Exchange without files

/// This replica's own changes after `since`'s entry for it (every one when absent), in one
/// snapshot: what it signs as their origin. Local writes are folded first, as
/// `BundleExchange.export` does.
func changeSet(from source: Replica, since base: Knowledge) throws -> ChangeSet {
    try source.fold()
    return try source.readSnapshot {
        let exporter = try ChangeExporter(replica: source, ownChangesAfter: base[source.knowledgeID])
        var changes: [RowChange] = []
        try exporter.forEachChange { changes.append($0) }
        return ChangeSet(header: exporter.header, changes: changes, receiver: nil)
    }
}

func changeSet(from source: Replica, for receiver: Replica) throws -> ChangeSet {
    var set = try changeSet(from: source, since: receiver.knowledge())
    set.receiver = receiver.knowledgeID
    return set
}

/// What each replica merged of other replicas, by database path: a relay forwards those
/// sets as they came, the way Bundle's segment store keeps signed segments.
nonisolated(unsafe) private var merged: [String: [ChangeSet]] = [:]

/// Every set `source` can give a replica that holds `knowledge`: its own changes after it,
/// and the sets of other origins it merged that the receiver lacks.
func changeSets(from source: Replica, for knowledge: Knowledge) throws -> [ChangeSet] {
    let own = try changeSet(from: source, since: knowledge)
    let relayed = merged[source.path, default: []].filter { $0.header.last > knowledge[$0.header.origin] }
    return (own.header.last > own.header.base ? [own] : []) + relayed
}

/// Merges a change set into `replica` the way an import does: one transaction.
@discardableResult
func apply(_ set: ChangeSet, to replica: Replica) throws -> ApplySummary {
    let summary = try replica.database.inTransaction {
        let applier = try ChangeMerger(replica: replica, header: set.header)
        for change in set.changes { try applier.apply(change) }
        return try applier.finish()
    }
    if summary.knowledgeAdvanced && set.header.origin != replica.knowledgeID {
        merged[replica.path, default: []].append(set)
    }
    return summary
}

/// One exchange: what `destination` lacks of `source` (its own changes and what it relays),
/// merged into `destination`; a set that met a life another set begins is merged again after.
@discardableResult
func sync(from source: Replica, to destination: Replica) throws -> ApplySummary {
    var waiting = try changeSets(from: source, for: destination.knowledge())
    var total = ApplySummary()
    total.knowledgeAdvanced = true
    while !waiting.isEmpty {
        var later: [ChangeSet] = []
        for set in waiting where set.header.last > (try destination.knowledge()[set.header.origin]) {
            let summary = try apply(set, to: destination)
            total.add(summary)
            if !summary.knowledgeAdvanced { later.append(set) }
        }
        if later.count == waiting.count {
            total.knowledgeAdvanced = false
            break
        }
        waiting = later
    }
    // What the sender says of itself, as a bundle's signed envelope carries it.
    try destination.database.inTransaction { try destination.recordSender(try report(of: source)) }
    return total
}

/// What `replica` says of itself in a bundle it sends.
func report(of replica: Replica) throws -> SenderReport {
    try replica.fold()
    let sites = try replica.database.valueRows(
        #"SELECT "knowledge_id", "forgotten_seq" FROM "_sqsync_sites" WHERE "forgotten_seq" > 0"#)
    let clock = try clock(of: replica)
    return SenderReport(
        knowledgeID: replica.knowledgeID, name: replica.name, seq: clock.seq, hlc: clock.hlc, knowledge: try replica.knowledge(),
        forgotten: Knowledge(Dictionary(uniqueKeysWithValues: sites.map { ($0[0].stringValue!, $0[1].int64Value!) })))
}

/// Both directions, `a` first.
func syncBoth(_ a: Replica, _ b: Replica) throws {
    try sync(from: a, to: b)
    try sync(from: b, to: a)
}

/// Exchanges between every ordered pair until a whole round changes nothing and every
/// replica holds the same knowledge.
func syncUntilQuiet(_ replicas: [Replica], maxRounds: Int = 10, file: StaticString = #filePath, line: UInt = #line) throws {
    for _ in 0..<maxRounds {
        var changed = 0
        for source in replicas {
            for destination in replicas where destination !== source {
                changed += try sync(from: source, to: destination).changes
            }
        }
        let knowledges = try replicas.map { try $0.knowledge() }
        if changed == 0 && knowledges.allSatisfy({ $0 == knowledges[0] }) { return }
    }
    XCTFail("replicas did not become quiet after \(maxRounds) rounds", file: file, line: line)
}

// MARK: - Reading state

/// Every row of `table`, all columns in declared order, ordered by primary key.
func rows(of replica: Replica, table: String) throws -> [[SQLValue]] {
    let key = try replica.database.valueRows(
        "SELECT name FROM pragma_table_info(?) WHERE pk > 0 ORDER BY pk", .text(table)
    ).compactMap { $0[0].stringValue }
    let order = key.isEmpty ? "rowid" : key.map(quoteIdentifier).joined(separator: ", ")
    return try replica.database.valueRows("SELECT * FROM \(quoteIdentifier(table)) ORDER BY \(order)")
}

/// Every column clock a replica holds, unpacked from its row entries: tid, stored key, cid,
/// hlc, site, seq, ordered by row entry, then cid.
func cellEntries(of replica: Replica) throws -> [[SQLValue]] {
    var entries: [[SQLValue]] = []
    for row in try replica.database.valueRows(
        #"SELECT "tid", "pk", "cells", "hlc", "site" FROM "_sqsync_rows" WHERE "cells" IS NOT NULL ORDER BY 1, 2"#)
    {
        let entry = RowClock(hlc: row[3].int64Value ?? 0, site: Int(row[4].int64Value ?? 0))
        for clock in try replica.cellClocks(row[2], of: entry) {
            entries.append([
                row[0], row[1], .integer(Int64(clock.cid)), .integer(clock.hlc), .integer(Int64(clock.site)), .integer(clock.seq),
            ])
        }
    }
    return entries
}

/// sqsync's per-row and per-cell metadata and the conflict log, for "nothing changed" checks.
func metadata(of replica: Replica) throws -> [[SQLValue]] {
    try replica.database.valueRows(#"SELECT 'row', "tid", "pk", "cl", "hlc", "site", "seq" FROM "_sqsync_rows" ORDER BY 2, 3"#)
        + cellEntries(of: replica).map { [.text("cell")] + $0 }
        + replica.database.valueRows(
            #"SELECT 'conflict', "kind", "table_name", "pk", "column_name", "lost_value", "lost_row", "lost_site", "lost_hlc" FROM "_sqsync_conflicts" ORDER BY "id""#
        )
}

func conflictCount(_ replica: Replica) throws -> Int {
    Int(try replica.database.scalar(#"SELECT count(*) FROM "_sqsync_conflicts""#)?.int64Value ?? -1)
}

/// Local sequence number and clock, after numbering the writes the triggers left pending.
func clock(of replica: Replica) throws -> (seq: Int64, hlc: Int64) {
    try replica.fold()
    let row = try replica.database.valueRows(#"SELECT "seq", "hlc" FROM "_sqsync_replica""#)[0]
    return (row[0].int64Value ?? -1, row[1].int64Value ?? -1)
}

/// Simulates a fast wall clock: the replica's hybrid clock jumps to `hlc`.
func setClock(of replica: Replica, to hlc: Int64) throws {
    try replica.database.run(#"UPDATE "_sqsync_replica" SET "hlc" = ?"#, .integer(hlc))
}

var nowMilliseconds: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

/// Asserts that every replica holds the same rows of `table`.
func assertSameRows(_ replicas: [Replica], table: String, file: StaticString = #filePath, line: UInt = #line) throws {
    let expected = try rows(of: replicas[0], table: table)
    for replica in replicas.dropFirst() {
        XCTAssertEqual(
            try rows(of: replica, table: table), expected,
            "\(replica.name) differs from \(replicas[0].name) in \(table)", file: file, line: line)
    }
}

// MARK: - The sqlite3 shell as an outside writer

struct ShellError: Error, CustomStringConvertible {
    var description: String
}

/// Runs `sql` with /usr/bin/sqlite3 against `path`, as another application would.
func sqlite3Shell(_ path: String, _ sql: String) throws {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
    process.arguments = ["-bail", "-cmd", ".timeout 5000", path]
    let input = Pipe()
    let errorFile = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite3-err-\(UUID().uuidString)").path
    _ = FileManager.default.createFile(atPath: errorFile, contents: nil)
    defer { try? FileManager.default.removeItem(atPath: errorFile) }
    process.standardInput = input
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle(forWritingAtPath: errorFile)
    try process.run()
    input.fileHandleForWriting.write(Data((sql + "\n").utf8))
    try input.fileHandleForWriting.close()
    process.waitUntilExit()
    let stderr = (try? String(contentsOfFile: errorFile, encoding: .utf8)) ?? ""
    guard process.terminationStatus == 0, stderr.isEmpty else {
        throw ShellError(description: "sqlite3 exited \(process.terminationStatus): \(stderr)")
    }
}
