import Bundle
import CSQLite
import ChangeLog
import SQLiteDatabase
import Foundation
import SampleData

/// `make bench`: sqsync against plain SQLite and SQLite's session extension, same data, same
/// run, release build. Prints ratios; speed claims in the README come from here.
@main
struct Bench {
    static let rows = Int(ProcessInfo.processInfo.environment["SQSYNC_BENCH_ROWS"] ?? "") ?? 100_000
    static let largeRows = Int(ProcessInfo.processInfo.environment["SQSYNC_BENCH_LARGE"] ?? "") ?? 1_000_000
    /// `SQSYNC_BENCH_ONLY=capture,bundles`: run only those sections (capture, bundles, metadata,
    /// migration, ssh, rclone, quiet, readers, scale, relay, large, scopes), for profiling one of them.
    static let sections = ProcessInfo.processInfo.environment["SQSYNC_BENCH_ONLY"].map { Set($0.split(separator: ",").map(String.init)) }
    static func runs(_ section: String) -> Bool { sections?.contains(section) ?? true }
    static let schema = """
        CREATE TABLE items (id TEXT PRIMARY KEY, name TEXT NOT NULL, qty INTEGER, price REAL, note TEXT, updated INTEGER);
        """

    static func main() throws {
        // SQLite's memory statistics stay on, as in the programs that capture changes (the
        // `sqsync` command turns them off: `Database.leaveOutMemoryStatistics()`).
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("sqsync-bench-\(getpid())").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let keys = (0..<rows).map { _ in UUID().uuidString.lowercased() }
        print("sqsync benchmark: \(rows) rows, SQLite \(String(cString: sqlite3_libversion())), release build\n")

        if runs("capture") { try capture(folder: folder, keys: keys) }
        if runs("bundles") { try bundles(folder: folder, keys: keys, session: try sessionExtension(folder: folder, keys: keys)) }
        if runs("metadata") { try metadata(folder: folder, keys: keys) }
        if runs("migration") { try MigrationBench.run(folder: folder, keys: keys) }
        if runs("ssh") { try SSHRound.run(folder: folder, changes: 10_000) }
        if runs("rclone") { try RcloneRound.run(folder: folder, changes: 10_000) }
        if runs("quiet") { try QuietSync.run(folder: folder) }
        if runs("scale") || runs("readers") { try Scale.readersKeyCost(folder: folder) }
        if runs("scale") { try Scale.run(folder: folder) }
        if runs("relay") { try RelayBench.run(folder: folder, keys: keys) }
        if largeRows > 0 && runs("large") { try largeImport(folder: folder) }
        if largeRows > 0 && runs("scopes") { try ScopeBench.run(folder: folder) }
    }

    // MARK: Helpers

    static func time(_ body: () throws -> Void) rethrows -> Double {
        let start = DispatchTime.now().uptimeNanoseconds
        try body()
        return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    }

    /// `body`, with `perf record` sampling only meanwhile when SQSYNC_BENCH_PERF_CONTROL names
    /// the FIFO of `perf record -D -1 --control fifo:FIFO`: a profile of one part of a section.
    static func profiled<T>(_ body: () throws -> T) rethrows -> T {
        guard let control = ProcessInfo.processInfo.environment["SQSYNC_BENCH_PERF_CONTROL"] else { return try body() }
        func send(_ command: String) {
            guard let fifo = FileHandle(forWritingAtPath: control) else { return }
            fifo.write(Data((command + "\n").utf8))
            try? fifo.close()
        }
        send("enable")
        defer { send("disable") }
        return try body()
    }

    static func rate(_ count: Int, _ seconds: Double) -> String {
        String(format: "%9.0f/s", Double(count) / seconds)
    }

    static func openDatabase(_ path: String, schema: String = schema) throws -> Database {
        try? FileManager.default.removeItem(atPath: path)
        let database = try Database(path: path)
        try database.useWriteAheadLog()
        try database.execute(schema)
        return database
    }

    static func insertAll(_ database: Database, keys: [String]) throws {
        try insertAll(database, keys: keys.map(SQLValue.text))
    }

    static func insertAll(_ database: Database, keys: [SQLValue]) throws {
        try database.inTransaction {
            let insert = try database.statement("INSERT INTO items VALUES (?, ?, ?, ?, ?, ?)")
            for (index, key) in keys.enumerated() {
                try insert.bind([
                    key, .text("item \(index)"), .integer(Int64(index % 100)), .real(Double(index) * 0.25),
                    .text("note for \(index)"), .integer(1_700_000_000 + Int64(index)),
                ])
                try insert.run()
            }
        }
    }

    static func updateAll(_ database: Database, keys: [String], round: Int = 1) throws {
        try database.inTransaction {
            let update = try database.statement("UPDATE items SET qty = ? WHERE id = ?")
            for (index, key) in keys.enumerated() {
                try update.bind([.integer(Int64(index + round * 7)), .text(key)])
                try update.run()
            }
        }
    }

    static func deleteAll(_ database: Database, keys: [String]) throws {
        try database.inTransaction {
            let delete = try database.statement("DELETE FROM items WHERE id = ?")
            for key in keys {
                try delete.bind([.text(key)])
                try delete.run()
            }
        }
    }

    static func tracked(_ path: String, name: String) throws -> Replica {
        _ = try openDatabase(path)
        let replica = try Replica.initialize(path: path, name: name).replica
        try replica.track(["items"], allowIntegerPrimaryKey: false)
        return replica
    }

    static func line(_ label: String, _ plain: String, _ other: String, _ ratio: Double, _ ratioLabel: String) {
        print(
            label.padding(toLength: 30, withPad: " ", startingAt: 0) + plain + "  " + other
                + String(format: "   %5.2fx %@", ratio, ratioLabel))
    }

    // MARK: Capture

    static func capture(folder: String, keys: [String]) throws {
        print("Capture (one transaction per phase)")
        print("                                          plain SQLite    tracked   tracked/plain time (median of \(max(1, repeats)))")
        // UUIDv7 keys (what SPEC §2 recommends) are time-ordered: inserts append to both B-trees.
        let ordered = uuidv7Keys(keys.count)
        try capturePhases(folder: folder, keys: keys, label: "UUIDv4")
        try capturePhases(folder: folder, keys: ordered, label: "UUIDv7")
        if largeRows > 0 {
            try capturePhases(folder: folder, keys: (0..<largeRows).map { _ in UUID().uuidString.lowercased() }, label: "UUIDv4")
        }
        try counterCapture(folder: folder, keys: keys)
        print("")
    }

    /// `UPDATE items SET qty = qty + 1` on every row: plain, with `qty` last-writer-wins,
    /// and with `qty` a counter (its trigger logs a delta instead of a mask bit).
    static func counterCapture(folder: String, keys: [String]) throws {
        let plain = try openDatabase(folder + "/plain-counter.db")
        let lww = try tracked(folder + "/tracked-lww-increments.db", name: "bench")
        let counter = try tracked(folder + "/tracked-counter.db", name: "bench")
        try counter.setPolicy(.counter, table: "items", column: "qty")
        for database in [plain, lww.database, counter.database] { try insertAll(database, keys: keys) }
        try lww.fold()
        try counter.fold()
        func increments(_ database: Database) throws {
            try database.inTransaction {
                let update = try database.statement("UPDATE items SET qty = qty + 1 WHERE id = ?")
                for key in keys {
                    try update.bind([.text(key)])
                    try update.run()
                }
            }
        }
        let plainTime = try time { try increments(plain) }
        let lwwTime = try time { try increments(lww.database) }
        let counterTime = try time { try increments(counter.database) }
        line("  \(keys.count) increments, lww", rate(keys.count, plainTime), rate(keys.count, lwwTime), lwwTime / plainTime, "")
        line(
            "  \(keys.count) increments, counter", rate(keys.count, plainTime), rate(keys.count, counterTime),
            counterTime / plainTime, String(format: "(%.2fx the lww column)", counterTime / lwwTime))
        let fold = try time { try counter.fold() }
        print(
            "  fold of those \(keys.count) deltas".padding(toLength: 30, withPad: " ", startingAt: 0) + "        -      "
                + rate(keys.count, fold))
    }

    static func uuidv7Keys(_ count: Int) -> [String] {
        (0..<count).map {
            String(format: "0190%08x-7%03x-8000-%012llx", $0, $0 % 4096, UInt64.random(in: 0..<(1 << 48)))
        }
    }

    /// Capture ratios move by ±30% from one run to the next (each phase's commit checkpoints
    /// the write-ahead log, with an fsync), so each size runs `repeats` times on fresh
    /// files, plain and tracked side by side, and prints the median run of each phase.
    static let repeats = Int(ProcessInfo.processInfo.environment["SQSYNC_BENCH_REPEATS"] ?? "") ?? 3

    /// Beside each tracked phase, the same writes with the session extension recording them:
    /// what capture costs in C inside SQLite, changes kept in memory, nothing written. Its
    /// ratio is printed as a yardstick (the median of its own runs).
    static func capturePhases(folder: String, keys: [String], label: String) throws {
        let phases: [(String, (Database) throws -> Void)] = [
            ("inserts", { try insertAll($0, keys: keys) }),
            ("1-column updates", { try updateAll($0, keys: keys) }),
            ("deletes", { try deleteAll($0, keys: keys) }),
        ]
        var runs: [[(plain: Double, tracked: Double, session: Double)]] = Array(repeating: [], count: phases.count)
        var folds: [Double] = []
        for _ in 0..<max(1, repeats) {
            let plain = try openDatabase(folder + "/plain-\(label)-\(keys.count).db")
            let replica = try tracked(folder + "/tracked-\(label)-\(keys.count).db", name: "bench")
            let recorded = try openDatabase(folder + "/session-\(label)-\(keys.count).db")
            for (index, phase) in phases.enumerated() {
                let plainTime = try time { try phase.1(plain) }
                let trackedTime = try time { try phase.1(replica.database) }
                let sessionTime = try timeRecorded(recorded) { try phase.1(recorded) }
                runs[index].append((plainTime, trackedTime, sessionTime))
            }
            folds.append(try time { try replica.fold() })
        }
        for (index, phase) in phases.enumerated() {
            let median = runs[index].sorted { $0.tracked / $0.plain < $1.tracked / $1.plain }[runs[index].count / 2]
            let session = runs[index].map { $0.session / $0.plain }.sorted()[runs[index].count / 2]
            line(
                "  \(keys.count) \(phase.0), \(label)", rate(keys.count, median.plain), rate(keys.count, median.tracked),
                median.tracked / median.plain, String(format: "(session ext. %.2fx)", session))
        }
        let fold = folds.sorted()[folds.count / 2]
        print(
            "  fold of those \(keys.count * 3) changes".padding(toLength: 30, withPad: " ", startingAt: 0) + "        -      "
                + rate(keys.count * 3, fold) + "   (when anything next reads them)")
    }

    // MARK: Session extension

    /// The session extension's changesets for the same inserts, updates and deletes as the
    /// bundles, a database that has taken none of them yet, and a copy of the writer once
    /// it had inserted its rows (``writersCopy``).
    struct SessionChangesets {
        let inserts: [UInt8]
        let updates: [UInt8]
        let deletes: [UInt8]
        let target: Database
        let writersCopy: Database
    }

    static func changeset(_ database: Database, _ body: () throws -> Void) throws -> [UInt8] {
        var session: OpaquePointer?
        guard sqlite3session_create(database.sqliteHandle, "main", &session) == SQLITE_OK, let session else {
            throw BenchError("sqlite3session_create failed")
        }
        defer { sqlite3session_delete(session) }
        guard sqlite3session_attach(session, "items") == SQLITE_OK else { throw BenchError("sqlite3session_attach failed") }
        try body()
        var size: Int32 = 0
        var buffer: UnsafeMutableRawPointer?
        guard sqlite3session_changeset(session, &size, &buffer) == SQLITE_OK, let buffer else {
            throw BenchError("sqlite3session_changeset failed")
        }
        defer { sqlite3_free(buffer) }
        return Array(UnsafeRawBufferPointer(start: buffer, count: Int(size)))
    }

    /// The time of `body` with a session recording every change it makes to `items`; freeing
    /// the recorded changes afterwards is not timed.
    static func timeRecorded(_ database: Database, _ body: () throws -> Void) throws -> Double {
        var session: OpaquePointer?
        guard sqlite3session_create(database.sqliteHandle, "main", &session) == SQLITE_OK, let session else {
            throw BenchError("sqlite3session_create failed")
        }
        defer { sqlite3session_delete(session) }
        guard sqlite3session_attach(session, "items") == SQLITE_OK else { throw BenchError("sqlite3session_attach failed") }
        return try time(body)
    }

    static func apply(_ changeset: [UInt8], to database: Database) throws {
        var bytes = changeset
        let rc = bytes.withUnsafeMutableBytes { raw in
            sqlite3changeset_apply(
                database.sqliteHandle, Int32(raw.count), raw.baseAddress, nil,
                { _, _, _ in SQLITE_CHANGESET_REPLACE }, nil)
        }
        guard rc == SQLITE_OK else { throw BenchError("sqlite3changeset_apply failed") }
    }

    static func sessionExtension(folder: String, keys: [String]) throws -> SessionChangesets {
        let source = try openDatabase(folder + "/session-source.db")
        let inserts = try changeset(source) { try insertAll(source, keys: keys) }
        try copy(source, to: folder + "/session-writers-copy.db")
        let writersCopy = try Database(path: folder + "/session-writers-copy.db")
        try writersCopy.useWriteAheadLog()
        let updates = try changeset(source) { try updateAll(source, keys: keys) }
        let deletes = try changeset(source) { try deleteAll(source, keys: keys) }
        return SessionChangesets(
            inserts: inserts, updates: updates, deletes: deletes, target: try openDatabase(folder + "/session-target.db"),
            writersCopy: writersCopy)
    }

    /// A copy of `database` at `path`, as it is now.
    static func copy(_ database: Database, to path: String) throws {
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        try database.run("VACUUM INTO ?", .text(path))
    }

    /// Imports and applies move by ±30% from one run to the next, and the machine's speed by
    /// as much from one minute to the next, so each import is timed beside a session apply of
    /// the same changes, `repeats` times, each into a fresh copy of its target (`VACUUM
    /// INTO`), and the pair with the median ratio counts. The targets then take the changes
    /// untimed, for the next phase. `withImportCache`: each run also times a session apply
    /// on a connection given the page cache an import takes (``Replica/bulkPageCacheKiB``),
    /// and that pair's median ratio counts too.
    static func timedSideBySide(
        _ changeset: [UInt8], into sessionTarget: Database, _ bundle: ExportResult, into replica: Replica,
        trust: AllowedSigners, folder: String, withImportCache: Bool = false
    ) throws -> (session: Double, sqsync: Double, sameCache: (session: Double, sqsync: Double)?) {
        var runs: [(session: Double, sqsync: Double, sessionWithCache: Double)] = []
        for _ in 0..<max(1, repeats) {
            let session = try timedSessionApply(changeset, into: sessionTarget, folder: folder, cacheKiB: nil)
            let sessionWithCache =
                withImportCache
                ? try timedSessionApply(changeset, into: sessionTarget, folder: folder, cacheKiB: Replica.bulkPageCacheKiB) : 0
            try copy(replica.database, to: folder + "/bundle-copy.db")
            let replicaCopy = try Replica(path: folder + "/bundle-copy.db")
            let sqsync = try time { _ = try BundleExchange.importBundle(path: bundle.path, into: replicaCopy, trust: trust) }
            runs.append((session, sqsync, sessionWithCache))
        }
        try apply(changeset, to: sessionTarget)
        _ = try BundleExchange.importBundle(path: bundle.path, into: replica, trust: trust)
        let median = runs.sorted { $0.sqsync / $0.session < $1.sqsync / $1.session }[runs.count / 2]
        let medianWithCache = runs.sorted { $0.sqsync / $0.sessionWithCache < $1.sqsync / $1.sessionWithCache }[runs.count / 2]
        return (
            median.session, median.sqsync,
            withImportCache ? (medianWithCache.sessionWithCache, medianWithCache.sqsync) : nil
        )
    }

    /// One session apply into a fresh copy of `target`, on a connection with `cacheKiB` of
    /// page cache, or SQLite's default.
    static func timedSessionApply(
        _ changeset: [UInt8], into target: Database, folder: String, cacheKiB: Int64?
    ) throws -> Double {
        try copy(target, to: folder + "/session-copy.db")
        let sessionCopy = try Database(path: folder + "/session-copy.db")
        try sessionCopy.useWriteAheadLog()
        guard let cacheKiB else { return try time { try apply(changeset, to: sessionCopy) } }
        return try sessionCopy.withPageCache(ofAtLeast: cacheKiB) { try time { try apply(changeset, to: sessionCopy) } }
    }

    // MARK: Bundles

    static func bundles(folder: String, keys: [String], session: SessionChangesets) throws {
        let key = SigningKey.generate(comment: "bench")
        let trust = try AllowedSigners(text: AllowedSigners.line(principal: "bench", key: key.publicKey))
        let source = try tracked(folder + "/bundle-source.db", name: "source")
        let target = try source.clone(to: folder + "/bundle-target.db", name: "target")
        let count = keys.count

        print("Bundles (import includes signature check; each import beside a session apply, median of \(max(1, repeats)))")
        print(
            "  (sqsync imports with a \(Replica.bulkPageCacheKiB / 1024) MiB page cache, the session apply with SQLite's default"
                + " unless said)")
        print("                                          session ext.     sqsync   sqsync/session")
        var bundles: [ExportResult] = []
        // A second pair, unknown to the first: a third replica the source knows of would have
        // every import above keep notes for it (`_sqsync_changes`).
        let writer = try tracked(folder + "/bundle-writer.db", name: "writer")
        var writersClone: Replica?
        var cloneTimings: [(phase: String, session: Double, sqsync: Double, sameCache: (session: Double, sqsync: Double))] = []
        let phases: [(name: String, write: (Database, [String]) throws -> Void, changeset: [UInt8])] = [
            ("inserts", { try insertAll($0, keys: $1) }, session.inserts),
            ("updates", { try updateAll($0, keys: $1) }, session.updates),
            ("deletes", { try deleteAll($0, keys: $1) }, session.deletes),
        ]
        for (phase, write, changeset) in phases {
            try write(source.database, keys)
            var bundle: ExportResult!
            let export = try time {
                bundle = try BundleExchange.export(
                    replica: source, since: try target.knowledge(), key: key,
                    to: folder + "/\(phase).sqsb", intoDirectory: false)
            }
            let timed = try timedSideBySide(
                changeset, into: session.target, bundle, into: target, trust: trust, folder: folder)
            bundles.append(bundle)
            print(
                "  export \(count) \(phase)".padding(toLength: 30, withPad: " ", startingAt: 0) + "        -      "
                    + rate(count, export))
            line(
                "  import \(count) \(phase)", rate(count, timed.session), rate(count, timed.sqsync),
                timed.session / timed.sqsync, "of session apply rate")
            try write(writer.database, keys)
            if let clone = writersClone {
                let bundle = try BundleExchange.export(
                    replica: writer, since: try clone.knowledge(), key: key, to: folder + "/\(phase)-clone.sqsb",
                    intoDirectory: false)
                let timed = try timedSideBySide(
                    changeset, into: session.writersCopy, bundle, into: clone, trust: trust, folder: folder,
                    withImportCache: true)
                if let sameCache = timed.sameCache { cloneTimings.append((phase, timed.session, timed.sqsync, sameCache)) }
            } else {
                writersClone = try writer.clone(to: folder + "/bundle-writers-clone.db", name: "clone")
            }
        }
        // The targets above took their rows by apply and by import, each in the order it
        // applies: a session changeset in its hash order, which is the same for the inserts and
        // for updates and deletes of exactly those keys, a bundle in key order. Both then reach
        // the rows in the order they lie. Here each side starts from a copy of the writer, rows
        // in the order the app wrote them, as a replica made by `sqsync clone` or a copied file.
        // An import takes a larger page cache than SQLite's default; the second line gives the
        // session apply the same.
        for timed in cloneTimings {
            line(
                "  import \(count) \(timed.phase), clone", rate(count, timed.session), rate(count, timed.sqsync),
                timed.session / timed.sqsync, "of session apply rate (into a copy of the writer)")
            line(
                "    same page cache", rate(count, timed.sameCache.session), rate(count, timed.sameCache.sqsync),
                timed.sameCache.session / timed.sameCache.sqsync,
                "of session apply rate, both \(Replica.bulkPageCacheKiB / 1024) MiB cache")
        }
        let (insertBundle, updateBundle, deleteBundle) = (bundles[0], bundles[1], bundles[2])
        let perDelete = Double(deleteBundle.bytes) / Double(count), perDeleteSession = Double(session.deletes.count) / Double(count)
        let perInsert = Double(insertBundle.bytes) / Double(count), perInsertSession = Double(session.inserts.count) / Double(count)
        let perUpdate = Double(updateBundle.bytes) / Double(count), perUpdateSession = Double(session.updates.count) / Double(count)
        line(
            "  bytes per insert", String(format: "%11.1f", perInsertSession), String(format: "%9.1f", perInsert),
            perInsert / perInsertSession, "of changeset size")
        line(
            "  bytes per update", String(format: "%11.1f", perUpdateSession), String(format: "%9.1f", perUpdate),
            perUpdate / perUpdateSession, "of changeset size")
        line(
            "  bytes per delete", String(format: "%11.1f", perDeleteSession), String(format: "%9.1f", perDelete),
            perDelete / perDeleteSession, "of changeset size")
        try relay(folder: folder, keys: keys)
        try Encryption.run(folder: folder, keys: keys)
        try chinook(folder: folder, key: key)
        print("")
    }

    /// The same inserts as a relay forwards them: A's signed segment, kept by B and sent on
    /// to C, against A's own bundle of them.
    static func relay(folder: String, keys: [String]) throws {
        let signing = (0..<3).map { SigningKey.generate(comment: "relay-\($0)") }
        let trust = try AllowedSigners(
            text: signing.enumerated().map { AllowedSigners.line(principal: "k\($0.offset)", key: $0.element.publicKey) }
                .joined(separator: "\n"))
        let origin = try tracked(folder + "/relay-a.db", name: "a")
        let relay = try origin.clone(to: folder + "/relay-b.db", name: "b")
        let last = try origin.clone(to: folder + "/relay-c.db", name: "c")
        // B hears of C, so it keeps A's segment for C.
        let hello = try BundleExchange.export(
            replica: last, since: Knowledge(), key: signing[2], to: folder + "/relay-hello.sqsb", intoDirectory: false)
        _ = try BundleExchange.importBundle(path: hello.path, into: relay, trust: trust)
        try insertAll(origin.database, keys: keys)
        let fromOrigin = try BundleExchange.export(
            replica: origin, since: try relay.knowledge(), key: signing[0], to: folder + "/relay-1.sqsb", intoDirectory: false)
        _ = try BundleExchange.importBundle(path: fromOrigin.path, into: relay, trust: trust)
        let relayed = try BundleExchange.export(
            replica: relay, since: try last.knowledge(), key: signing[1], to: folder + "/relay-2.sqsb", intoDirectory: false)
        _ = try BundleExchange.importBundle(path: relayed.path, into: last, trust: trust)
        guard try last.database.int64(#"SELECT count(*) FROM "items""#) == Int64(keys.count) else {
            throw BenchError("the relayed bundle did not carry every row")
        }
        line(
            "  relayed \(keys.count) inserts, bytes", String(format: "%11d", fromOrigin.bytes), String(format: "%9d", relayed.bytes),
            Double(relayed.bytes) / Double(fromOrigin.bytes), "of the origin's own bundle (A → B → C)")
    }

    /// A Chinook-shaped sample (integer keys, foreign keys, a composite key; generated, see
    /// `ChinookSample`): one bundle with every row against the session changeset that inserts
    /// the same rows.
    static func chinook(folder: String, key: SigningKey) throws {
        let copy = folder + "/chinook.db"
        try? FileManager.default.removeItem(atPath: copy)
        try Database(path: copy).execute(ChinookSample.sql)
        let replica = try Replica.initialize(path: copy, name: "chinook").replica
        try replica.track(try replica.userTableNames(), allowIntegerPrimaryKey: true)
        let bundle = try BundleExchange.export(
            replica: replica, since: Knowledge(), key: key, to: folder + "/chinook.sqsb", intoDirectory: false)

        let empty = folder + "/chinook-empty.db"
        try? FileManager.default.removeItem(atPath: empty)
        let target = try Database(path: empty)
        let tables = try replica.userTableNames()
        for table in tables {
            let create = try replica.database.scalar("SELECT sql FROM sqlite_schema WHERE name = ?", .text(table))?.stringValue ?? ""
            try target.execute(create)
        }
        try target.execute("ATTACH DATABASE '\(copy)' AS source")
        var session: OpaquePointer?
        guard sqlite3session_create(target.sqliteHandle, "main", &session) == SQLITE_OK, let session else {
            throw BenchError("sqlite3session_create failed")
        }
        defer { sqlite3session_delete(session) }
        sqlite3session_attach(session, nil)
        for table in tables {
            try target.execute("INSERT INTO main.\(quoteIdentifier(table)) SELECT * FROM source.\(quoteIdentifier(table))")
        }
        var size: Int32 = 0
        var buffer: UnsafeMutableRawPointer?
        guard sqlite3session_changeset(session, &size, &buffer) == SQLITE_OK else {
            throw BenchError("sqlite3session_changeset failed")
        }
        sqlite3_free(buffer)
        line(
            "  Chinook, \(bundle.rows) rows (bytes)", String(format: "%11d", Int(size)), String(format: "%9d", bundle.bytes),
            Double(bundle.bytes) / Double(size), "of changeset size")
    }

    // MARK: Metadata

    static func sizes(_ database: Database) throws -> (data: Int, metadata: Int) {
        var data = 0, metadata = 0
        for row in try database.rows("SELECT name, sum(pgsize) AS bytes FROM dbstat GROUP BY name") {
            let name = try row.string("name"), bytes = try row.int("bytes")
            if name == "items" || name.hasPrefix("sqlite_autoindex_items") { data += bytes }
            // Every byte sqsync keeps per row: entries, their indexes, the capture log, and
            // other origins' signed segments kept to relay.
            if ["_sqsync_rows", "_sqsync_log", "_sqsync_tombstones", "_sqsync_changes", "_sqsync_segments"].contains(where: {
                name.hasPrefix($0)
            }) {
                metadata += bytes
            }
        }
        return (data, metadata)
    }

    static func metadata(folder: String, keys: [String]) throws {
        let replica = try tracked(folder + "/metadata.db", name: "metadata")
        try insertAll(replica.database, keys: keys)
        for round in 1...10 {
            try updateAll(replica.database, keys: keys, round: round)
            try replica.database.inTransaction {
                let update = try replica.database.statement("UPDATE items SET note = ? WHERE id = ?")
                for key in keys.prefix(keys.count / 2) {
                    try update.bind([.text("round \(round)"), .text(key)])
                    try update.run()
                }
            }
        }
        let deleted = keys.count / 10
        try deleteAll(replica.database, keys: Array(keys.suffix(deleted)))
        let live = keys.count - deleted
        try replica.fold()
        let before = try sizes(replica.database)
        _ = try replica.purge(dryRun: false)
        try replica.database.execute("VACUUM")
        let after = try sizes(replica.database)
        print("Metadata (10 rounds of updates, 10% deleted)    table bytes/row   metadata bytes/row   metadata/table")
        for (label, figures) in [("  before purge", before), ("  after full purge", after)] {
            print(
                label.padding(toLength: 34, withPad: " ", startingAt: 0)
                    + String(
                        format: "%16.1f %20.1f %15.0f%%", Double(figures.data) / Double(live),
                        Double(figures.metadata) / Double(live),
                        100 * Double(figures.metadata) / Double(figures.data)))
        }
        print("")
    }

    // MARK: Large import, in a child process to measure its peak memory

    /// 100 updates spread over the large replica's rows, from rowid `first`.
    static func updateHundredRows(_ replica: Replica, from first: Int) throws {
        try replica.database.inTransaction {
            let update = try replica.database.statement("UPDATE items SET qty = qty + 1 WHERE rowid = ?")
            for rowid in stride(from: first, through: largeRows, by: max(1, largeRows / 100)).prefix(100) {
                try update.bind([.integer(Int64(rowid))])
                try update.run()
            }
        }
    }

    static func largeImport(folder: String) throws {
        // Every replica signs with its own key (docs/KEYS.md).
        let key = SigningKey.generate(comment: "bench")
        let targetKey = SigningKey.generate(comment: "bench-target")
        let keyPath = folder + "/large.key"
        try key.write(privateKeyPath: keyPath)
        let trustPath = folder + "/large.allowed_signers"
        try (AllowedSigners.line(principal: "bench", key: key.publicKey) + "\n"
            + AllowedSigners.line(principal: "bench-target", key: targetKey.publicKey) + "\n").write(
            toFile: trustPath, atomically: true, encoding: .utf8)
        let source = try tracked(folder + "/large-source.db", name: "large")
        let target = try source.clone(to: folder + "/large-target.db", name: "large-target")
        try insertAll(source.database, keys: (0..<largeRows).map { _ in UUID().uuidString.lowercased() })
        let bundle = try BundleExchange.export(
            replica: source, since: Knowledge(), key: key, to: folder + "/large.sqsb", intoDirectory: false)
        let (status, seconds, maxRSS) = try spawnMeasured(
            sqsyncBinary, ["import", folder + "/large-target.db", bundle.path, "--trust", trustPath, "-q"])
        print("Large import (child process: sqsync import)")
        print(
            String(
                format: "  %d changes, %.1f MB bundle: %.1f s, %.0f changes/s, peak memory %.1f MB (exit %d)",
                bundle.rows, Double(bundle.bytes) / 1e6, seconds, Double(bundle.rows) / seconds, Double(maxRSS) / 1024, status))

        // A replica with every row tracked and acknowledged: a small export and status must
        // cost what they read, not the database's size. The target tells the source what it
        // now holds, as its next bundle would.
        let reply = try BundleExchange.export(
            replica: target, since: try source.knowledge(), key: targetKey, to: folder + "/reply.sqsb", intoDirectory: false)
        _ = try BundleExchange.importBundle(path: reply.path, into: source, trust: try AllowedSigners(text: String(contentsOfFile: trustPath, encoding: .utf8)))
        let acknowledged = try source.knowledge()
        try updateHundredRows(source, from: 1)
        var small: ExportResult!
        let exportSeconds = try time {
            small = try BundleExchange.export(
                replica: source, since: acknowledged, key: key, to: folder + "/small.sqsb", intoDirectory: false)
        }
        let statusSeconds = try time { _ = try source.status() }
        print(
            String(
                format: "  export of %d changes from a %d-row replica: %.1f ms; status: %.1f ms",
                small.rows, largeRows, exportSeconds * 1000, statusSeconds * 1000))

        // No live peer at all (the target retired): `export --since` a knowledge within the
        // window of own changes kept for it (Replica.sinceWindow) still reads only what it sends.
        _ = try source.retire(peer: target.knowledgeID)
        let before = try source.knowledge()
        try updateHundredRows(source, from: 2)
        try source.fold()
        var since: ExportResult!
        let sinceSeconds = try time {
            since = try BundleExchange.export(
                replica: source, since: Knowledge(parsing: before.description), key: key, to: folder + "/since.sqsb",
                intoDirectory: false)
        }
        print(
            String(
                format: "  export --since of %d changes from a %d-row replica with no live peer: %.1f ms (window %d own changes)",
                since.rows, largeRows, sinceSeconds * 1000, Replica.sinceWindow))
    }

    /// The `sqsync` built beside this benchmark (`make bench` builds both).
    static let sqsyncBinary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        .appendingPathComponent("sqsync").path

    /// Runs a child to completion; its exit status, or 128 + the signal that killed it.
    static func spawnAndWait(_ executable: String, _ arguments: [String]) throws -> Int32 {
        let pid = try spawn(executable, arguments)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        return status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + status & 0x7f
    }

    static func spawn(_ executable: String, _ arguments: [String]) throws -> pid_t {
        var pid: pid_t = 0
        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        guard posix_spawn(&pid, executable, nil, nil, argv, environ) == 0 else {
            throw BenchError("cannot start \(executable)")
        }
        return pid
    }

    /// Runs a child to completion and returns its exit status, seconds, and peak memory in
    /// KiB. The peak is the child's own `VmHWM`, sampled from /proc while it runs: wait4's
    /// ru_maxrss would also count this (large) process, whose address space a vfork-based
    /// posix_spawn shares until exec.
    static func spawnMeasured(_ executable: String, _ arguments: [String]) throws -> (Int32, Double, Int) {
        let start = DispatchTime.now().uptimeNanoseconds
        let pid = try spawn(executable, arguments)
        var status: Int32 = 0
        var peak = 0
        while waitpid(pid, &status, WNOHANG) == 0 {
            if let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
                let line = text.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
                let kib = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
            {
                peak = max(peak, kib)
            }
            usleep(20_000)
        }
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        return ((status >> 8) & 0xff, seconds, peak)
    }
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
