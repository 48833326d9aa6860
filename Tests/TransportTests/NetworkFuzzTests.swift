import Bundle
import ChangeLog
import Foundation
import SQLiteDatabase
import TestSupport
import XCTest

@testable import Transport

/// Networks, not pairs: replicas joined by folder mailboxes in a random topology (a line, a
/// star with a second level, a ring), each writing, updating, renaming and deleting rows,
/// visiting its mailboxes in random order; files lost, put back late and copied to another
/// mailbox; purges; late joiners made with `init` (with rows of their own) and with `clone`,
/// attached through one site, one of them after a purge; a site's file copied with `cp` and
/// used as a site of its own, which follows the fix its first sync prints; a site's file
/// restored in place from a backup of itself taken earlier in the run (its change numbers go
/// back), which follows the fix once a sync says so (`reidentify`). In half the networks
/// values are capped (`SQSYNC_MAX_VALUE_BYTES`) and some writes are larger: each origin leaves
/// them out, then sends them once the cap is raised, before the end. In half, every bundle goes
/// to a mailbox's readers' key (lost, put back and copied key files included, as bundles are:
/// any file in a mailbox may be). Then every site visits its
/// mailboxes until the network is quiet: every replica holds the same rows, every row that was
/// inserted and never deleted is there, no bundle is held, and no outbox keeps more than its
/// replica's current bundles.
///
/// Runs 2 seeds; `SQSYNC_PROPERTY_SEEDS=N` runs N (`make fuzz` runs many).
/// `SQSYNC_PROPERTY_SEED=S` replays one.
final class NetworkFuzzTests: XCTestCase {
    func testEveryChangeReachesEveryReplicaThroughAnyChainOfMeetings() throws {
        let seeds = PropertyHistory.seeds(from: 0x4E7_0000_0000, default: 2)
        for seed in seeds {
            let network = try FuzzNetwork(seed: seed)
            defer { network.removeFiles() }
            do {
                try network.run()
            } catch {
                let all = ProcessInfo.processInfo.environment["SQSYNC_PROPERTY_SEED"] != nil
                XCTFail("seed \(seed) threw \(error)\n\(all ? "every step" : "last steps"):\n\(all ? network.history.steps.joined(separator: "\n") : network.history.tail)")
            }
        }
    }
}

private final class FuzzNetwork {
    struct Site {
        var name: String
        var replica: Replica
        var key: SigningKey
        var mailboxes: [Int]
        /// A file copied with `cp` that has not yet followed the fix its first sync prints.
        var unfixedCopy = false
        /// A file restored from its own backup that no sync has yet said so to.
        var unfixedRestore = false
    }

    let directory: String
    var history: PropertyHistory
    var sites: [Site] = []
    /// Each mailbox: its folder and the sites that visit it.
    var mailboxes: [(folder: String, members: [Int])] = []
    var trustLines: [String] = []
    var trust: AllowedSigners
    /// Files taken out of a mailbox, to come back late (or never).
    var limbo: [(file: String, back: String)] = []
    /// Keys some site inserted; keys some site deleted or renamed away.
    var inserted: Set<String> = []
    var removed: Set<String> = []
    var joiners = 0
    var copies = 0
    /// A backup of one site's file, taken mid-run, to be restored over it later.
    var backup: (site: Int, path: String)?
    var restoredYet = false
    let keys = (0..<30).map { "k\($0)" }
    /// The value cap while the network runs, if any: some writes are larger.
    let valueCap: Int?
    static let largeValue = 3000
    /// Whether bundles are encrypted, every one to a mailbox's readers' key
    /// (`SQSYNC_MAX_DIRECT_RECIPIENTS` 1), as past a few dozen readers; else in the clear.
    /// Decided by the seed's last bit, so other draws stay as they were.
    let sharesReadersKeys: Bool
    /// Whether a mailbox every first site visits joins the topology, where one bundle
    /// supersedes the others' (docs/BUNDLE_FORMAT.md, "What a relay keeps"); and whether a
    /// sync reads one acknowledgement file not read before, not up to 64. Decided by the
    /// seed's next bits, for the same reason.
    let hasHub: Bool
    let readsOneAcknowledgement: Bool

    init(seed: UInt64) throws {
        history = PropertyHistory(seed: seed)
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqsync-network-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        trust = try AllowedSigners(text: "")
        let count = 4 + history.below(2)
        valueCap = history.below(2) == 0 ? 2048 : nil
        sharesReadersKeys = seed & 1 == 1
        hasHub = seed & 2 == 2
        readsOneAcknowledgement = seed & 4 == 4
        let first = try newReplica("s0", rows: (0..<8).map { "k\($0)" })
        sites.append(first)
        for index in 1..<count {
            let key = SigningKey.generate(comment: "s\(index)")
            let clone = try first.replica.clone(
                to: directory + "/s\(index).db", name: "s\(index)", knowledgeID: ReplicaIdentity.knowledgeID(for: key.publicKey))
            try addTrust("s\(index)", key)
            sites.append(Site(name: "s\(index)", replica: clone, key: key, mailboxes: []))
        }
        switch history.below(3) {
        case 0:
            history.note("topology: a line of \(count)")
            for index in 1..<count { try connect(index - 1, index) }
        case 1:
            history.note("topology: a star of \(count) with a second level")
            for index in 1..<min(count, 3) { try connect(0, index) }
            for index in 3..<count { try connect(1 + (index % 2), index) }
        default:
            history.note("topology: a ring of \(count)")
            for index in 1..<count { try connect(index - 1, index) }
            try connect(count - 1, 0)
        }
        if hasHub {
            history.note("and a mailbox all \(count) visit")
            try connect(Array(0..<count))
        }
    }

    func removeFiles() { try? FileManager.default.removeItem(atPath: directory) }

    private func addTrust(_ name: String, _ key: SigningKey) throws {
        trustLines.append(AllowedSigners.line(principal: name, key: key.publicKey))
        trust = try AllowedSigners(text: trustLines.joined(separator: "\n") + "\n")
    }

    /// A replica made with `init`: the table, rows of its own, tracked.
    private func newReplica(_ name: String, rows: [String]) throws -> Site {
        let key = SigningKey.generate(comment: name)
        let replica = try Replica.initialize(
            path: directory + "/\(name).db", name: name, knowledgeID: ReplicaIdentity.knowledgeID(for: key.publicKey)
        ).replica
        try replica.database.execute("CREATE TABLE notes (id TEXT PRIMARY KEY, title TEXT, n INTEGER, body)")
        for id in rows {
            try replica.database.run("INSERT INTO notes VALUES (?, ?, 0, NULL)", .text(id), .text("\(name)'s \(id)"))
            inserted.insert(id)
        }
        _ = try replica.track(["notes"], allowIntegerPrimaryKey: false)
        try addTrust(name, key)
        return Site(name: name, replica: replica, key: key, mailboxes: [])
    }

    private func connect(_ a: Int, _ b: Int) throws { try connect([a, b]) }

    private func connect(_ members: [Int]) throws {
        let folder = directory + "/box\(mailboxes.count)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        mailboxes.append((folder, members))
        for member in members { sites[member].mailboxes.append(mailboxes.count - 1) }
    }

    // MARK: Steps

    func run() throws {
        if let valueCap {
            history.note("values capped at \(valueCap) bytes until the end")
            setenv("SQSYNC_MAX_VALUE_BYTES", String(valueCap), 1)
        }
        if sharesReadersKeys {
            history.note("every bundle goes to a mailbox's readers' key")
            setenv("SQSYNC_MAX_DIRECT_RECIPIENTS", "1", 1)
        }
        if readsOneAcknowledgement {
            history.note("a sync reads one acknowledgement file not read before")
            Mailbox.acknowledgementsReadPerSync = 1
        }
        defer {
            unsetenv("SQSYNC_MAX_VALUE_BYTES")
            unsetenv("SQSYNC_MAX_DIRECT_RECIPIENTS")
            Mailbox.acknowledgementsReadPerSync = 64
        }
        for step in 0..<110 {
            let roll = history.below(100)
            switch roll {
            case 0..<5 where valueCap != nil: try writeLarge(at: history.below(sites.count))
            case 0..<44: try write(at: history.below(sites.count))
            case 44..<86: try visit(site: history.below(sites.count), step: step)
            case 86..<90: try lose()
            case 90..<93: try putBack()
            case 93..<96: try duplicate()
            case 96..<98: try purge(at: history.below(sites.count))
            case 98: if copies < 2 { try copyWithCp() }
            default: if joiners < 3 { try join(afterPurge: false) }
            }
            if step == 30 && copies == 0 { try copyWithCp() }
            if step == 20 { try takeBackup() }
            if step == 60 { try restoreBackup() }
            if step == 70 && joiners < 3 {
                for index in sites.indices { try purge(at: index) }
                try join(afterPurge: true)
            }
        }
        while !limbo.isEmpty { try putBack() }
        unsetenv("SQSYNC_MAX_VALUE_BYTES")
        try settle()
        try check()
    }

    private func write(at index: Int) throws {
        let site = sites[index]
        let before = Set(try ids(of: site.replica))
        try history.writeNote(in: site.replica.database, keys: keys, who: site.name, valueKinds: 6) { history in
            "t\(history.below(50))"
        }
        let after = Set(try ids(of: site.replica))
        inserted.formUnion(after.subtracting(before))
        removed.formUnion(before.subtracting(after))
    }

    /// A value over the cap: a new row's, or an existing row's body.
    private func writeLarge(at index: Int) throws {
        let site = sites[index]
        let id = history.pick(keys)
        let exists = try ids(of: site.replica).contains(id)
        let sql =
            exists
            ? "UPDATE notes SET body = zeroblob(\(Self.largeValue)) WHERE id = ?"
            : "INSERT INTO notes VALUES (?, 'large', 0, zeroblob(\(Self.largeValue)))"
        try site.replica.database.run(sql, .text(id))
        if !exists { inserted.insert(id) }
        history.note("\(site.name): a \(Self.largeValue)-byte body \(exists ? "for" : "in a new row") \(id)")
    }

    private func visit(site index: Int, step: Int) throws {
        guard let box = sites[index].mailboxes.isEmpty ? nil : history.pick(sites[index].mailboxes) else { return }
        let report = try sync(index, box)
        history.note("step \(step): \(sites[index].name) visits box\(box): \(report.imported.count) in, \(report.exported?.rows ?? 0) rows out")
    }

    @discardableResult
    private func sync(_ index: Int, _ box: Int) throws -> SyncReport {
        let mailbox = Mailbox(transport: DirectoryTransport(root: mailboxes[box].folder), encrypts: sharesReadersKeys)
        if sites[index].unfixedCopy { try followTheFix(index, mailbox) }
        let report = try mailbox.sync(replica: sites[index].replica, key: sites[index].key, trust: trust)
        if sites[index].unfixedRestore {
            let toldRestored = report.refused.contains { $0.reason.contains("restored") && $0.reason.contains("sqsync reidentify") }
            if toldRestored || !report.signedAsThisReplica.isEmpty {
                if !report.rejected.isEmpty { throw FuzzFailure("\(sites[index].name), restored: rejected \(report.rejected)") }
                try followTheRestoreFix(index, told: report.refused.map(\.reason) + report.signedAsThisReplica)
                return report
            }
        }
        if !report.rejected.isEmpty || !report.refused.isEmpty {
            throw FuzzFailure("\(sites[index].name) at box\(box): rejected \(report.rejected), refused \(report.refused)")
        }
        return report
    }

    private func bundleFiles(in box: Int) -> [String] {
        let outbox = mailboxes[box].folder + "/sqsync/outbox"
        return filesBelow(outbox).filter { $0.hasSuffix(".sqsb") }.map { outbox + "/" + $0 }
    }

    private func lose() throws {
        let box = history.below(mailboxes.count)
        let keys = mailboxes[box].folder + "/sqsync/keys"
        let files = bundleFiles(in: box) + filesBelow(keys).filter { $0.hasSuffix(".age") }.map { keys + "/" + $0 }
        guard !files.isEmpty else { return }
        let file = history.pick(files)
        let aside = directory + "/limbo-\(UUID().uuidString.prefix(8))"
        try FileManager.default.moveItem(atPath: file, toPath: aside)
        limbo.append((aside, file))
        history.note("lost \(file.dropFirst(directory.count))")
    }

    private func putBack() throws {
        guard !limbo.isEmpty else { return }
        let (aside, back) = limbo.remove(at: history.below(limbo.count))
        if history.chance(30) || FileManager.default.fileExists(atPath: back) {
            try? FileManager.default.removeItem(atPath: aside)
            history.note("gone for good: \(back.dropFirst(directory.count))")
            return
        }
        try FileManager.default.moveItem(atPath: aside, toPath: back)
        history.note("back late: \(back.dropFirst(directory.count))")
    }

    /// A bundle copied into another mailbox, as a user copying a stick would.
    private func duplicate() throws {
        guard mailboxes.count > 1 else { return }
        let from = history.below(mailboxes.count), to = history.below(mailboxes.count)
        let files = bundleFiles(in: from)
        guard from != to, !files.isEmpty else { return }
        let file = history.pick(files)
        let sender = URL(fileURLWithPath: file).deletingLastPathComponent().lastPathComponent
        let target = mailboxes[to].folder + "/sqsync/outbox/\(sender)"
        try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: true)
        let copy = target + "/" + URL(fileURLWithPath: file).lastPathComponent
        guard !FileManager.default.fileExists(atPath: copy) else { return }
        try FileManager.default.copyItem(atPath: file, toPath: copy)
        history.note("copied \(file.dropFirst(directory.count)) to box\(to)")
    }

    /// A site's file copied with `cp` (its WAL folded in first), used as a site of its own with
    /// the same key, and met by a site the original may meet too.
    private func copyWithCp() throws {
        copies += 1
        let original = history.below(sites.count), name = "cp\(copies)"
        try sites[original].replica.database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        let path = directory + "/\(name).db"
        try FileManager.default.copyItem(atPath: sites[original].replica.path, toPath: path)
        sites.append(Site(name: name, replica: try Replica(path: path), key: sites[original].key, mailboxes: [], unfixedCopy: true))
        try connect(history.below(sites.count - 1), sites.count - 1)
        history.note("\(name): a copy of \(sites[original].name) made with cp")
    }

    /// The copy's first sync refuses, naming it, the word "copy" and the fix; it follows it.
    private func followTheFix(_ index: Int, _ mailbox: Mailbox) throws {
        do {
            _ = try mailbox.sync(replica: sites[index].replica, key: sites[index].key, trust: trust)
            throw FuzzFailure("\(sites[index].name), a copy, synced")
        } catch let error as ChangeLogError where error.kind == .identityClash {
            let said = error.description
            guard said.contains(sites[index].replica.path), said.contains("copy"), said.contains("sqsync reidentify") else {
                throw FuzzFailure("\(sites[index].name): the refusal does not say what to do: \(said)")
            }
        }
        let birth = ReplicaIdentity.newBirth()
        let result = try sites[index].replica.reidentify(as: ReplicaIdentity.knowledgeID(for: sites[index].key.publicKey, birth: birth))
        try KeyBinding.bindOwnIdentity(replica: sites[index].replica, key: sites[index].key.publicKey, birth: birth)
        sites[index].unfixedCopy = false
        history.note("\(sites[index].name) reidentified: \(result.changesTaken) writes its own")
    }

    /// A backup of a site's file (SQLite's online backup, as `sqlite3 .backup` makes).
    private func takeBackup() throws {
        let index = history.below(sites.count)
        guard !sites[index].unfixedCopy else { return }
        let path = directory + "/backup-\(sites[index].name).db"
        try sites[index].replica.database.backup(toPath: path)
        backup = (index, path)
        history.note("\(sites[index].name) backed up")
    }

    /// The backup copied back over the site's file, in place (as `sqlite3 .restore` does):
    /// what it wrote since is gone from the file, and it writes under the numbers it reused.
    /// Rows only that file held are lost with it, not by sqsync: they leave what must arrive.
    private func restoreBackup() throws {
        guard let backup, !sites[backup.site].unfixedCopy, !sites[backup.site].unfixedRestore else { return }
        let index = backup.site, path = sites[index].replica.path
        let before = Set(try ids(of: sites[index].replica))
        var elsewhere: Set<String> = []
        for other in sites.indices where other != index { elsewhere.formUnion(try ids(of: sites[other].replica)) }
        try Database(path: backup.path).backup(toPath: path)
        sites[index].replica = try Replica(path: path)
        sites[index].unfixedRestore = true
        restoredYet = true
        let lost = before.subtracting(try ids(of: sites[index].replica)).subtracting(elsewhere)
        inserted.subtract(lost)
        history.note("\(sites[index].name) restored from its backup in place\(lost.isEmpty ? "" : ", losing \(lost.sorted()) only it held")")
    }

    /// A sync told the restored file so (its own acknowledgement or change written by the
    /// file before the restore): it says to run `reidentify`, which it does.
    private func followTheRestoreFix(_ index: Int, told: [String]) throws {
        let birth = ReplicaIdentity.newBirth()
        let result = try sites[index].replica.reidentify(as: ReplicaIdentity.knowledgeID(for: sites[index].key.publicKey, birth: birth))
        try KeyBinding.bindOwnIdentity(replica: sites[index].replica, key: sites[index].key.publicKey, birth: birth)
        try sites[index].replica.clearConflicts()
        sites[index].unfixedRestore = false
        history.note("\(sites[index].name) told it was restored (\(told.first ?? "")), reidentified: \(result.changesTaken) writes its own")
    }

    private func purge(at index: Int) throws {
        let result = try sites[index].replica.purge(dryRun: false)
        history.note("\(sites[index].name) purges \(result.tombstones) tombstones")
    }

    /// A late joiner attached through one site: made with `init` (rows of its own, and a key
    /// other sites hold too) or a `clone` of a site other than the one it meets.
    private func join(afterPurge: Bool) throws {
        joiners += 1
        let name = "j\(joiners)"
        // Often through the latest joiner: a chain of late joiners, each meeting only the last.
        let through = joiners > 1 && history.chance(50) ? sites.count - 1 : history.below(sites.count)
        if history.chance(50) || sites.count < 2 {
            var site = try newReplica(name, rows: ["\(name)-own-1", "\(name)-own-2"])
            site.mailboxes = []
            sites.append(site)
            history.note("\(name) joins through \(sites[through].name), made with init\(afterPurge ? " after a purge" : "")")
        } else {
            var source = (through + 1 + history.below(sites.count - 1)) % sites.count
            // Not a clone of a file that a backup will be restored over: the clone would hold
            // writes of the file's that only the file could sign, and the restore drops them
            // (docs/TROUBLESHOOTING.md, "A backup restored in place").
            if let backup, backup.site == source, !restoredYet { source = (source + 1) % sites.count }
            let key = SigningKey.generate(comment: name)
            let clone = try sites[source].replica.clone(
                to: directory + "/\(name).db", name: name, knowledgeID: ReplicaIdentity.knowledgeID(for: key.publicKey),
                emptying: Mailbox.perFileTables)
            try addTrust(name, key)
            sites.append(Site(name: name, replica: clone, key: key, mailboxes: []))
            history.note("\(name) joins through \(sites[through].name), a clone of \(sites[source].name)\(afterPurge ? " after a purge" : "")")
        }
        try connect(through, sites.count - 1)
    }

    // MARK: The end

    private func ids(of replica: Replica) throws -> [String] {
        try replica.database.valueRows("SELECT id FROM notes ORDER BY id").compactMap { $0[0].stringValue }
    }

    private func rows(of replica: Replica) throws -> [[SQLValue]] {
        try replica.database.valueRows("SELECT * FROM notes ORDER BY id")
    }

    private func settle() throws {
        var quietRounds = 0
        for round in 0..<30 {
            let before = try sites.map { try rows(of: $0.replica) }
            for index in sites.indices {
                for box in sites[index].mailboxes { try sync(index, box) }
            }
            let after = try sites.map { try rows(of: $0.replica) }
            history.note("settling, round \(round)")
            if before == after && Set(after.map { "\($0)" }).count == 1 {
                quietRounds += 1
                if quietRounds == 2 { return }
            } else {
                quietRounds = 0
            }
        }
    }

    private func check() throws {
        let reference = try rows(of: sites[0].replica)
        for site in sites.dropFirst() where try rows(of: site.replica) != reference {
            let held = Dictionary(try rows(of: site.replica).map { ($0[0].stringValue ?? "", $0) }) { a, _ in a }
            let want = Dictionary(reference.map { ($0[0].stringValue ?? "", $0) }) { a, _ in a }
            let differing = Set(held.keys).union(want.keys).sorted().filter { held[$0] != want[$0] }.map {
                "\($0): \(held[$0].map { "\($0)" } ?? "absent") here, \(want[$0].map { "\($0)" } ?? "absent") at \(sites[0].name)"
            }
            let names = Dictionary(uniqueKeysWithValues: sites.map { ($0.replica.knowledgeID, $0.name) })
            func named(_ knowledge: Knowledge) -> String {
                knowledge.seqs.sorted { $0.key < $1.key }.map { "\(names[$0.key] ?? $0.key):\($0.value)" }.joined(separator: " ")
            }
            throw FuzzFailure(
                "\(site.name) differs from \(sites[0].name):\n\(differing.joined(separator: "\n"))\nknowledge \(named(try site.replica.knowledge())) vs \(named(try sites[0].replica.knowledge()))\ngaps \(try BundleExchange.gaps(of: site.replica))"
            )
        }
        if sharesReadersKeys {
            var opened = 0
            for site in sites {
                for box in site.mailboxes {
                    opened += try MailboxState(site.replica, mailbox: DirectoryTransport(root: mailboxes[box].folder).displayName)
                        .readersKeys().count
                }
            }
            if opened == 0 { throw FuzzFailure("no bundle went to a readers' key") }
        }
        let present = Set(try ids(of: sites[0].replica))
        let missing = inserted.subtracting(removed).subtracting(present)
        if !missing.isEmpty { throw FuzzFailure("rows inserted and never deleted are missing everywhere: \(missing.sorted())") }
        for site in sites {
            let held = try BundleExchange.heldBundles(of: site.replica)
            if !held.isEmpty { throw FuzzFailure("\(site.name) holds bundles: \(held)") }
            let withheld = try site.replica.withheldValues(cap: BundleLimits.maxValueBytes)
            if !withheld.isEmpty { throw FuzzFailure("\(site.name) still leaves values out: \(withheld)") }
        }
        for box in mailboxes.indices {
            let outbox = mailboxes[box].folder + "/sqsync/outbox"
            for sender in (try? FileManager.default.contentsOfDirectory(atPath: outbox)) ?? [] {
                let files = filesBelow(outbox + "/" + sender).filter { $0.hasSuffix(".sqsb") }
                if files.count > 2 { throw FuzzFailure("box\(box) keeps \(files.count) bundles of \(sender): \(files)") }
            }
            // Where many meet, the newest bundle supersedes the others'.
            let all = filesBelow(outbox).filter { $0.hasSuffix(".sqsb") }
            if mailboxes[box].members.count > 2 && all.count > 2 {
                throw FuzzFailure("box\(box), visited by \(mailboxes[box].members.count), keeps \(all.count) bundles: \(all)")
            }
        }
    }
}

private struct FuzzFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
