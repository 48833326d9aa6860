import Bundle
import ChangeLog
import Foundation
import Transport

/// Many replicas, one folder mailbox: every replica writes two rows, then all sync in turn,
/// round after round, until every one holds every row; then two rounds with nothing new.
/// What one `sync` costs grows with the number of replicas; what a bundle carries beyond its
/// changes (the envelope: sites, keys, statements) must stay O(replicas).
enum Scale {
    struct Round {
        var seconds: [Double] = []
        var mean: Double { seconds.reduce(0, +) / Double(max(1, seconds.count)) }
        var median: Double { seconds.isEmpty ? 0 : seconds.sorted()[seconds.count / 2] }
    }

    struct Measured {
        var replicas: Int
        /// The first round: each replica leaves its two rows and takes what is there so far.
        var busy = Round()
        /// The second round: each replica takes every bundle it has not seen.
        var catchUp = Round()
        /// The second of two rounds after all agree: a full sync that finds nothing to do.
        var quiet = Round()
        /// Then one replica, opened anew with a mailbox of its own each time, as a cron job
        /// runs it: the mailbox has settled, so each sync stops at the mailbox's mark.
        var settled = Round()
        /// The same replica synced again through the same mailbox, in one program.
        var again = Round()
        /// The same replica opened anew, comparing every replica's folder (as every tenth
        /// minute, or where a writer does not mark the mailbox).
        var compared = Round()
        var rounds = 0
        /// The replica the settled syncs above ran on, to run them again beside a larger scale's.
        var settledSource: SettledSource?
        /// Rounds until every replica held every row.
        var roundsToAgree = 0
        /// The largest envelope a replica left mid-way through the first round, per replica it names.
        var envelopeBytesPerSite = 0.0
        /// The same for a bundle written with `export -o` (statements and keys of every replica).
        var exportEnvelopeBytesPerSite = 0.0
        var largestBundle = 0
        var mailboxBytes = 0
    }

    static func run(folder: String) throws {
        print("Scale: N replicas share one folder mailbox; each writes 2 rows, all sync until they agree, then twice more")
        print(
            "  replicas   busy sync   catch-up sync   quiet sync   settled sync   again       compared    rounds   envelope bytes/replica (sync, export)   largest bundle   mailbox")
        var results: [Measured] = []
        // SQSYNC_BENCH_SCALE=10,100,300 to try other sizes.
        let counts =
            ProcessInfo.processInfo.environment["SQSYNC_BENCH_SCALE"].map { $0.split(separator: ",").compactMap { Int($0) } }
            ?? [10, 100, 1_000]
        let fullRoundsUpTo = ProcessInfo.processInfo.environment["SQSYNC_BENCH_FULL_ROUNDS_UP_TO"].flatMap { Int($0) } ?? 100
        for count in counts.filter({ $0 <= fullRoundsUpTo }) {
            let measured = try measure(folder: folder + "/scale-\(count)", replicas: count)
            results.append(measured)
            print(
                String(
                    format: "  %8d   %7.4f s   %11.4f s   %8.4f s   %10.5f s   %.5f s   %.5f s   %6d   %24.1f, %5.1f   %10d B   %5.1f MB",
                    count, measured.busy.mean, measured.catchUp.mean, measured.quiet.mean, measured.settled.mean, measured.again.mean,
                    measured.compared.mean, measured.roundsToAgree,
                    measured.envelopeBytesPerSite, measured.exportEnvelopeBytesPerSite, measured.largestBundle, Double(measured.mailboxBytes) / 1e6))
        }
        if let small = results.first, let large = results.last {
            print(
                String(
                    format: "  100 / 10 replicas: quiet sync %.2fx, settled sync %.2fx, again %.2fx, compared %.2fx (library calls; the command a cron job runs: Quiet sync above)",
                    large.quiet.mean / small.quiet.mean, large.settled.mean / small.settled.mean, large.again.mean / small.again.mean,
                    large.compared.mean / small.compared.mean))
        }
        for count in counts where count > fullRoundsUpTo {
            let many = try sampledRounds(folder: folder + "/scale-\(count)", replicas: count, baseline: results.first?.settledSource)
            print(
                String(
                    format: "  %8d   catch-up sync %.3f s (mean of %d; at most %d bundles and %d files read), settled %.5f s, again %.5f s, compared %.5f s; largest bundle %d B; mailbox %.1f MB; first collection %.1f s (%d bundles)",
                    many.replicas, many.catchUp.mean, many.catchUp.seconds.count, many.mostBundlesRead, many.mostFilesRead,
                    many.settled.mean, many.again.mean, many.compared.mean, many.largestBundle, Double(many.mailboxBytes) / 1e6, many.first,
                    many.firstImported))
            if let small = results.first {
                print(
                    String(
                        format:
                            "  %d / %d replicas, medians of %d taken in turns: settled sync %.5f / %.5f s = %.2fx, again %.5f / %.5f s = %.2fx, compared %.5f / %.5f s = %.2fx",
                        count, small.replicas, many.settled.seconds.count, many.settled.median, many.baselineSettled.median,
                        many.settled.median / many.baselineSettled.median, many.again.median, many.baselineAgain.median,
                        many.again.median / many.baselineAgain.median, many.compared.median, many.baselineCompared.median,
                        many.compared.median / many.baselineCompared.median))
            }
            print(
                "  (past \(fullRoundsUpTo) on 2 cores: each replica leaves its bundle and acknowledgement through a folder of its own; the folders are merged into one mailbox, where the first replica collects them all; then \(many.catchUp.seconds.count) others sync in turn, each reading the newest bundle; then one syncs until it has read every acknowledgement (64 new ones a sync), then three times after the mailbox settles, each opening the replica and a mailbox anew as a cron job does, three more through one mailbox in one program, and three comparing every folder)\n"
            )
        }
    }

    /// A mailbox's readers' key for 1,000 readers: what making it and a reader's first opening
    /// of it cost (a catch-up sync opens it when it first meets it). Median of five.
    static func readersKeyCost(folder: String, readers count: Int = 1_000) throws {
        let keys = (0..<count).map { SigningKey.generate(comment: "r\($0)") }
        let path = folder + "/readers-key", scratch = folder + "/readers-key-scratch"
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        var made: ReadersKey!
        var making: [Double] = [], opening: [Double] = []
        for _ in 0..<5 {
            try? FileManager.default.removeItem(atPath: path)
            making.append(
                try Bench.time {
                    made = try ReadersKey.make(
                        readers: keys.map(\.publicKey), signingKey: keys[0], writingTo: path, scratchDirectory: scratch)
                })
        }
        let repeats = ProcessInfo.processInfo.environment["SQSYNC_BENCH_READERS_REPEAT"].flatMap { Int($0) } ?? 5
        for index in 0..<repeats {
            var opened: ReadersKey!
            opening.append(
                try Bench.time {
                    opened = try ReadersKey.open(path: path, name: made.name, with: keys[count - 1 - index % count], scratchDirectory: scratch)
                })
            guard opened.name == made.name else { throw BenchError("the readers' key opened is not the one made") }
        }
        let median = { (values: [Double]) in values.sorted()[values.count / 2] }
        let bytes = (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
        print(
            String(
                format: "Readers' key for %d readers (%d bytes): made in %.4f s, a reader's first opening %.4f s (medians of 5)", count, bytes,
                median(making), median(opening)))
    }

    struct Sampled {
        var replicas: Int
        var busy = Round(), catchUp = Round(), settled = Round(), again = Round(), compared = Round()
        /// The smallest scale's settled syncs, taken in turns with these.
        var baselineSettled = Round(), baselineAgain = Round(), baselineCompared = Round()
        var first = 0.0, firstImported = 0
        var mostFilesRead = 0, mostBundlesRead = 0, largestBundle = 0, mailboxBytes = 0
    }

    /// `count` replicas each write two rows and sync once through a folder of their own (so
    /// each leaves what it would have left in the shared mailbox had it been the first there);
    /// the folders become one mailbox, and the first replica collects them all (one import per
    /// replica, once: `first` below); its bundle then carries every replica's rows. Then
    /// `sample` others sync in turn, each having missed the others' syncs: the catch-up sync of
    /// steady state, which reads the newest bundle and a bounded number of acknowledgements.
    /// A full round at 1,000 replicas, every sync importing the newest bundle of up to a
    /// thousand origins, would take over an hour on 2 cores.
    static func sampledRounds(folder: String, replicas count: Int, sample: Int = 20, baseline: SettledSource?) throws -> Sampled {
        var measured = Sampled(replicas: count)
        // Returns once every replica it opened is closed: a cron job's process has one open.
        let reader = try collectAndCatchUp(folder: folder, replicas: count, sample: sample, into: &measured)
        let source = SettledSource(path: reader.path, key: reader.key, trust: reader.trust, mailbox: folder + "/mailbox")
        // Taken in turns with the smallest scale's, so that the host's drift over minutes does
        // not move the ratio between them.
        for _ in 0..<3 {
            if let baseline {
                let (settled, again, compared) = try settledSyncs(baseline)
                measured.baselineSettled.seconds += settled.seconds
                measured.baselineAgain.seconds += again.seconds
                measured.baselineCompared.seconds += compared.seconds
            }
            let (settled, again, compared) = try settledSyncs(source, profiled: true)
            measured.settled.seconds += settled.seconds
            measured.again.seconds += again.seconds
            measured.compared.seconds += compared.seconds
        }
        measured.mailboxBytes = try folderBytes(folder + "/mailbox")
        return measured
    }

    /// The busy syncs, the first collection and the sampled catch-ups of ``sampledRounds``;
    /// then the last sampled replica reads every acknowledgement. Returns that replica's path.
    static func collectAndCatchUp(folder: String, replicas count: Int, sample: Int, into measured: inout Sampled) throws -> (
        path: String, key: SigningKey, trust: AllowedSigners
    ) {
        let shared = folder + "/mailbox"
        try FileManager.default.createDirectory(atPath: shared + "/sqsync", withIntermediateDirectories: true)
        let (keys, trust, ids, origin) = try firstReplica(folder: folder, replicas: count)
        var replicas = [origin]
        for index in 1..<count {
            replicas.append(try origin.clone(to: folder + "/r\(index).db", name: "r\(index)", knowledgeID: ids[index]))
        }
        let manager = FileManager.default
        for (index, replica) in replicas.enumerated() {
            try Bench.insertAll(replica.database, keys: [UUID().uuidString, UUID().uuidString])
            let own = folder + "/own-\(index)"
            try manager.createDirectory(atPath: own + "/sqsync", withIntermediateDirectories: true)
            if index > 0 { try manager.copyItem(atPath: shared + "/sqsync/keys", toPath: own + "/sqsync/keys") }
            measured.busy.seconds.append(
                try Bench.time { _ = try Mailbox(transport: DirectoryTransport(root: own)).sync(replica: replica, key: keys[index], trust: trust) })
            for part in ["outbox", "acks"] {
                try manager.createDirectory(atPath: shared + "/sqsync/\(part)", withIntermediateDirectories: true)
                try manager.moveItem(atPath: own + "/sqsync/\(part)/\(ids[index])", toPath: shared + "/sqsync/\(part)/\(ids[index])")
            }
            if index == 0 { try manager.moveItem(atPath: own + "/sqsync/keys", toPath: shared + "/sqsync/keys") }
            try manager.removeItem(atPath: own)
        }
        let mailbox = Mailbox(transport: DirectoryTransport(root: shared))
        var report: SyncReport!
        measured.first = try Bench.time { report = try mailbox.sync(replica: origin, key: keys[0], trust: trust) }
        measured.firstImported = report.imported.count
        for index in 1..<min(sample + 1, count) {
            measured.catchUp.seconds.append(
                try Bench.profiled { try Bench.time { report = try mailbox.sync(replica: replicas[index], key: keys[index], trust: trust) } })
            measured.mostFilesRead = max(measured.mostFilesRead, report.filesRead)
            measured.mostBundlesRead = max(measured.mostBundlesRead, report.imported.count)
            measured.largestBundle = max(measured.largestBundle, report.exported?.bytes ?? 0)
            guard try replicas[index].database.int64(#"SELECT count(*) FROM "items""#) == Int64(2 * count) else {
                throw BenchError("r\(index)'s catch-up sync did not take every replica's rows")
            }
        }
        let reader = replicas[min(sample, count - 1)], key = keys[min(sample, count - 1)]
        // Until it has read every replica's acknowledgement (64 new ones a sync).
        for _ in 0..<(count / 64 + 2) {
            if try mailbox.sync(replica: reader, key: key, trust: trust).filesRead == 0 { break }
        }
        return (reader.path, key, trust)
    }

    /// `count` keys, all trusted, their knowledge IDs, and the first replica (`r0.db`).
    static func firstReplica(folder: String, replicas count: Int) throws -> (
        keys: [SigningKey], trust: AllowedSigners, ids: [String], origin: Replica
    ) {
        let keys = (0..<count).map { SigningKey.generate(comment: "r\($0)") }
        let trust = try AllowedSigners(
            text: keys.enumerated().map { AllowedSigners.line(principal: "r\($0.offset)", key: $0.element.publicKey) }
                .joined(separator: "\n"))
        let ids = keys.map { ReplicaIdentity.knowledgeID(for: $0.publicKey) }
        _ = try Bench.openDatabase(folder + "/r0.db")
        let origin = try Replica.initialize(path: folder + "/r0.db", name: "r0", knowledgeID: ids[0]).replica
        try origin.track(["items"], allowIntegerPrimaryKey: false)
        return (keys, trust, ids, origin)
    }

    static func measure(folder: String, replicas count: Int) throws -> Measured {
        try FileManager.default.createDirectory(atPath: folder + "/mailbox", withIntermediateDirectories: true)
        let (keys, trust, ids, origin) = try firstReplica(folder: folder, replicas: count)
        var replicas = [origin]
        for index in 1..<count {
            replicas.append(try origin.clone(to: folder + "/r\(index).db", name: "r\(index)", knowledgeID: ids[index]))
        }
        let mailbox = Mailbox(transport: DirectoryTransport(root: folder + "/mailbox"))
        var measured = Measured(replicas: count)
        for replica in replicas { try Bench.insertAll(replica.database, keys: [UUID().uuidString, UUID().uuidString]) }

        func round(_ record: inout Round, mid: Bool = false) throws {
            for (index, replica) in replicas.enumerated() {
                var report: SyncReport!
                record.seconds.append(try Bench.time { report = try mailbox.sync(replica: replica, key: keys[index], trust: trust) })
                if let exported = report.exported {
                    measured.largestBundle = max(measured.largestBundle, exported.bytes)
                    if mid && index == count / 2 {
                        // The file as the mailbox holds it (the export's own path was a scratch file).
                        let name = URL(fileURLWithPath: exported.path).lastPathComponent
                        let file = folder + "/mailbox/sqsync/outbox/\(replica.knowledgeID)/\(name)"
                        measured.envelopeBytesPerSite =
                            Double(try envelopeLength(file, key: keys[index])) / Double(exported.envelope.sites.count)
                    }
                }
            }
            measured.rounds += 1
        }
        try round(&measured.busy, mid: true)
        try round(&measured.catchUp)
        measured.mailboxBytes = try folderBytes(folder + "/mailbox")
        var extra = Round()
        while try !agree(replicas) {
            guard measured.rounds < 10 else { throw BenchError("\(count) replicas did not agree after 10 rounds") }
            try round(&extra)
        }
        measured.roundsToAgree = measured.rounds
        // Once everyone agrees, a round still carries acknowledgements and removes bundles every
        // reader holds; the second finds nothing new, but the folders changed since each
        // replica's last sync, so it reads them all; the third stops at the folder stamps.
        try round(&extra)
        usleep(200_000)  // folder stamps settle, as minutes between cron runs would let them
        try round(&measured.quiet)
        usleep(200_000)
        measured.settledSource = SettledSource(path: replicas[0].path, key: keys[0], trust: trust, mailbox: folder + "/mailbox")
        (measured.settled, measured.again, measured.compared) = try settledSyncs(measured.settledSource!)
        let exported = try BundleExchange.export(
            replica: replicas[count / 2], since: Knowledge(), key: keys[count / 2], to: folder + "/export.sqsb", intoDirectory: false)
        measured.exportEnvelopeBytesPerSite =
            Double(try envelopeLength(exported.path, key: keys[count / 2])) / Double(exported.envelope.sites.count)
        return measured
    }

    /// Three syncs of the replica at `path`, each opening it and a mailbox anew (as each run of
    /// `sqsync sync` does, less starting the process and reading the files it names); then
    /// three through one mailbox, in one program; then three that open it anew and compare
    /// every replica's folder, as one does every ten minutes. Each finds nothing to do.
    /// A replica whose mailbox has settled, with what its syncs need.
    struct SettledSource {
        var path: String, key: SigningKey, trust: AllowedSigners, mailbox: String
    }

    static func settledSyncs(_ source: SettledSource, profiled: Bool = false) throws -> (Round, Round, Round) {
        let (path, key, trust, folder) = (source.path, source.key, source.trust, source.mailbox)
        var settled = Round(), again = Round(), compared = Round()
        func fresh() throws -> SyncReport {
            try Mailbox(transport: DirectoryTransport(root: folder)).sync(replica: try Replica(path: path), key: key, trust: trust)
        }
        // SQSYNC_BENCH_SETTLED_REPEAT=300 to profile these syncs.
        let repeats = ProcessInfo.processInfo.environment["SQSYNC_BENCH_SETTLED_REPEAT"].flatMap { Int($0) } ?? 3
        func threeQuiet(_ round: inout Round, _ sync: () throws -> SyncReport) throws {
            for _ in 0..<repeats {
                var report: SyncReport!
                round.seconds.append(try Bench.time { report = try sync() })
                guard report.unchanged else { throw BenchError("\(path): a settled sync did something") }
            }
        }
        // Until a sync stops at the mark: the last round's acknowledgements are read 64 a sync.
        for attempt in 0... {
            usleep(200_000)
            if try fresh().unchanged { break }
            guard attempt < 20 else { throw BenchError("\(path): no sync found nothing to do") }
        }
        if profiled { try Bench.profiled { try threeQuiet(&settled, fresh) } } else { try threeQuiet(&settled, fresh) }
        let replica = try Replica(path: path), mailbox = Mailbox(transport: DirectoryTransport(root: folder))
        _ = try mailbox.sync(replica: replica, key: key, trust: trust)
        try threeQuiet(&again) { try mailbox.sync(replica: replica, key: key, trust: trust) }
        let trustedFor = Mailbox.markTrustedFor
        Mailbox.markTrustedFor = 0
        defer { Mailbox.markTrustedFor = trustedFor }
        try threeQuiet(&compared, fresh)
        return (settled, again, compared)
    }

    static func agree(_ replicas: [Replica]) throws -> Bool {
        let counts = try replicas.map { try $0.database.int64(#"SELECT count(*) FROM "items""#) }
        return counts.allSatisfy { $0 == Int64(2 * replicas.count) }
    }

    /// The envelope's length (docs/BUNDLE_FORMAT.md), decrypting the file with `key` when the
    /// mailbox holds it encrypted.
    static func envelopeLength(_ path: String, key: SigningKey) throws -> Int {
        try BundleReader(path: path, trust: nil, decryptingWith: key).envelopeSize
    }

    static func folderBytes(_ path: String) throws -> Int {
        var total = 0
        let enumerator = FileManager.default.enumerator(atPath: path)
        while let name = enumerator?.nextObject() as? String {
            let attributes = try FileManager.default.attributesOfItem(atPath: path + "/" + name)
            if attributes[.type] as? FileAttributeType == .typeRegular { total += (attributes[.size] as? Int) ?? 0 }
        }
        return total
    }
}
