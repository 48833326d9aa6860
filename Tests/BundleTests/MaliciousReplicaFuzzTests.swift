import Crypto
import Foundation
import SQLiteDatabase
import TestSupport
import XCTest

@testable import Bundle
@testable import ChangeLog

/// Property test with an insider: four replicas A, B, C and M, each with a knowledge ID made
/// from its own key (as `sqsync init`/`clone --key` make them) and every key trusted in one
/// allowed_signers. Random writes, and random exchanges through real bundle files
/// (``BundleExchange/export`` then ``BundleExchange/importBundle``), sometimes dropped,
/// delivered twice or late. M, besides its honest bundles, writes bundles by hand
/// (``HandBundle``), signed by its own trusted key, that try to speak for the others: each
/// import of one must be refused and leave its receiver exactly as it was (a bundle that only
/// claims knowledge may be taken, but must change nobody's knowledge). After an honest
/// exchange until quiet, every replica holds the same rows, and none holds a value M forged.
///
/// Runs 3 seeds; `SQSYNC_PROPERTY_SEEDS=N` runs N. `SQSYNC_PROPERTY_SEED=S` replays one seed.
final class MaliciousReplicaFuzzTests: XCTestCase {
    fileprivate static let steps = 300
    fileprivate static let schema = """
        CREATE TABLE notes (id TEXT PRIMARY KEY, title TEXT, n INTEGER, body);
        INSERT INTO notes VALUES ('k0', 'title 0000', 0, NULL), ('k1', 'title 0001', 1, x'01');
        """
    fileprivate static let table = ("notes", ["id", "title", "n", "body"], [0])
    fileprivate static let keys = (0..<8).map { "k\($0)" }
    /// Every value M forges starts with it; no honest write does.
    fileprivate static let forgedPrefix = "forged-"

    func testHonestReplicasConvergeWhateverAMaliciousReplicaSends() throws {
        let seeds = PropertyHistory.seeds(from: 0xBAD_5EED_0000)
        var checked: [Attack: Int] = [:]
        var failed = false
        for seed in seeds {
            let world = try World(seed: seed)
            defer { world.removeFiles() }
            do {
                try world.run()
                checked.merge(world.checked, uniquingKeysWith: +)
            } catch is World.Stop {
                failed = true
            } catch {
                failed = true
                XCTFail("seed \(seed) threw \(error)\nlast steps:\n\(world.history.tail)")
            }
        }
        // Each attack must have been tried, or the test proves less than it says.
        if seeds.count >= 3 && !failed {
            for attack in Attack.allCases {
                XCTAssertGreaterThan(checked[attack] ?? 0, 0, "\(attack.rawValue) was never delivered")
            }
        }
    }

    /// M's own change to a row, in the life numbered 2^62 − 1: a record the format allows
    /// (docs/BUNDLE_FORMAT.md bounds a causal length at 2^62), signed by its origin, that B
    /// takes. B then deletes the row and inserts it again, as any user may; B's next bundle
    /// must still reach A. A trusted replica must not be able to stop another's changes.
    func testACausalLengthAtTheTopOfTheRangeStopsNoHonestReplica() throws {
        let world = try World(seed: 0)
        defer { world.removeFiles() }
        try world.pushCausalLengthToTheTop()
    }
}

/// What M sends besides its honest bundles.
private enum Attack: String, CaseIterable {
    case foreignOrigin = "(a) a segment of another replica's, signed by M"
    case foreignIdentity = "(a) a segment of another replica's, with M's key given as its identity"
    case foreignStamp = "(b) another replica's stamp in M's own segment"
    case knowledgeClaim = "(c) far more knowledge of the honest replicas than M holds"
    case futureStamps = "(d) stamps far in the future"
    case alteredUnderOriginSignature = "(e) a genuine segment's record altered, its chunk line rewritten"
    case alteredAndSignedByM = "(e) a genuine segment's record altered, its header signed by M"
    case alteredChunk = "(e) a genuine segment's chunk altered"

    /// What the refusal must say (one of these).
    var refusal: [String] {
        switch self {
        case .foreignOrigin: return ["not that replica's key", "without a key this replica can check"]
        case .foreignIdentity: return ["a forgery"]
        case .foreignStamp: return ["carry a stamp of another replica"]
        case .knowledgeClaim: return []
        case .futureStamps: return ["ahead of this machine's clock"]
        case .alteredUnderOriginSignature: return ["do not carry a valid signature"]
        case .alteredAndSignedByM: return ["not that replica's key"]
        case .alteredChunk: return ["altered after their origin signed them"]
        }
    }
}

/// One replica, its key as the exporter takes it and as a hand-written bundle signs with it.
private struct Member {
    let name: String
    let replica: Replica
    let key: SigningKey
    let hand: HandKey
    var id: String { replica.knowledgeID }
}

/// A bundle file on its way.
private struct Delivery {
    var file: String
    var from: Int
    var to: Int
    var label: String
    var attack: Attack?
}


/// One seed's replicas, keys and bundles in a folder of their own.
private final class World {
    /// Thrown once a failure is reported: the seed stops there.
    struct Stop: Error {}

    let directory: String
    let members: [Member]
    let trust: AllowedSigners
    var history: PropertyHistory
    var late: [Delivery] = []
    /// Genuine bundles of honest replicas M imported: what M alters in attack (e).
    var receivedByM: [String] = []
    /// Attacks delivered and checked, by kind.
    var checked: [Attack: Int] = [:]
    private var forgeries = 0
    private static let m = 3

    init(seed: UInt64) throws {
        history = PropertyHistory(seed: seed)
        directory =
            FileManager.default.temporaryDirectory.appendingPathComponent("sqsync-malicious-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory + "/bundles", withIntermediateDirectories: true)
        let hands = ["A", "B", "C", "M"].map(HandKey.init)
        var keys: [SigningKey] = []
        for hand in hands {
            try hand.write(to: directory + "/\(hand.name).key")
            keys.append(try SigningKey.load(path: directory + "/\(hand.name).key"))
        }
        trust = try AllowedSigners(text: hands.map(\.allowedSignersLine).joined(separator: "\n") + "\n")
        let first = try Replica.initialize(
            path: directory + "/A.db", name: "A", knowledgeID: ReplicaIdentity.knowledgeID(for: keys[0].publicKey)
        ).replica
        try first.database.execute(MaliciousReplicaFuzzTests.schema)
        try first.track(["notes"], allowIntegerPrimaryKey: false)
        var members = [Member(name: "A", replica: first, key: keys[0], hand: hands[0])]
        for index in 1..<hands.count {
            let clone = try first.clone(
                to: directory + "/\(hands[index].name).db", name: hands[index].name,
                knowledgeID: ReplicaIdentity.knowledgeID(for: keys[index].publicKey))
            members.append(Member(name: hands[index].name, replica: clone, key: keys[index], hand: hands[index]))
        }
        for member in members where member.id != member.hand.replicaID {
            XCTFail("\(member.name): the knowledge ID is not the one its key makes")
        }
        self.members = members
    }

    func removeFiles() { try? FileManager.default.removeItem(atPath: directory) }

    private var honest: [Int] { [0, 1, 2] }
    private var malicious: Member { members[Self.m] }

    /// Reports a failure with the seed and the last steps, and stops this seed.
    private func fail(_ message: String) -> Stop {
        XCTFail("seed \(history.seed): \(message)\nlast steps:\n\(history.tail)")
        return Stop()
    }

    func run() throws {
        for step in 0..<MaliciousReplicaFuzzTests.steps {
            let roll = history.below(100)
            if roll < 40 {
                try write(on: history.below(members.count), step: step)
            } else if roll < 72 {
                try honestExchange(step: step)
            } else if roll < 92 {
                try attack(step: step)
            } else if !late.isEmpty {
                let delivery = late.remove(at: history.below(late.count))
                history.note("step \(step): late delivery of [\(delivery.label)]")
                try deliver(delivery)
            }
        }
        while !late.isEmpty {
            let delivery = late.remove(at: history.below(late.count))
            history.note("end: late delivery of [\(delivery.label)]")
            try deliver(delivery)
        }
        history.note("end: exchanging honestly until quiet")
        try exchangeUntilQuiet()
        try checkOutcome()
    }

    // MARK: Writes

    private func write(on index: Int, step: Int) throws {
        let member = members[index]
        let database = member.replica.database
        if history.chance(4) {
            // A clock running up to 5 s fast; a hybrid clock only ever moves forward.
            let ahead = ClockBound.now + Int64(history.below(5000))
            try database.run(#"UPDATE "_sqsync_replica" SET "hlc" = max("hlc", ?)"#, .integer(ahead))
            history.note("step \(step): \(member.name)'s clock jumps ahead")
        }
        // Drawn before the write, and the same title wherever the write uses one.
        let title = String(format: "title %04d", history.below(10_000))
        try history.writeNote(in: database, keys: MaliciousReplicaFuzzTests.keys, who: "step \(step): \(member.name)", valueKinds: 5) { _ in title }
    }

    // MARK: Honest exchanges

    /// What `source` sends `destination` as `sqsync export --for` would: what it last heard
    /// the destination acknowledge (everything, now and then).
    private func honestExchange(step: Int) throws {
        let source = history.below(members.count)
        var destination = history.below(members.count - 1)
        if destination >= source { destination += 1 }
        let full = history.chance(10)
        let sender = members[source], receiver = members[destination]
        let base = full ? Knowledge() : ((try? sender.replica.peer(named: receiver.id))?.acknowledged ?? Knowledge())
        let exported = try BundleExchange.export(
            replica: sender.replica, since: base, key: sender.key, to: directory + "/bundles", intoDirectory: true,
            receiver: receiver.id)
        let label = "step \(step): \(sender.name) → \(receiver.name)\(full ? " (full)" : "") \(exported.rows) rows"
        try post(Delivery(file: exported.path, from: source, to: destination, label: label, attack: nil))
    }

    /// What a mailbox or a stick does with a bundle: drops it, holds it back for later,
    /// delivers an honest one twice, or delivers it.
    private func post(_ delivery: Delivery) throws {
        switch history.below(10) {
        case 0:
            history.note(delivery.label + " dropped")
        case 1, 2:
            history.note(delivery.label + " held back")
            late.append(delivery)
        case 3 where delivery.attack == nil:
            history.note(delivery.label + " delivered twice")
            try deliver(delivery)
            try deliver(delivery)
        default:
            if delivery.attack == nil { history.note(delivery.label) }
            try deliver(delivery)
        }
    }

    private func deliver(_ delivery: Delivery) throws {
        if let attack = delivery.attack { return try check(attack, delivery) }
        let receiver = members[delivery.to]
        do {
            _ = try BundleExchange.importBundle(path: delivery.file, into: receiver.replica, trust: trust)
        } catch {
            throw fail("\(delivery.label): an honest bundle was refused: \(error)")
        }
        if delivery.to == Self.m && delivery.from != Self.m { receivedByM.append(delivery.file) }
    }

    /// Every ordered pair exchanges what the receiver lacks, M included (its honest bundles
    /// relay the others' signed segments), until a round changes nothing and every replica
    /// holds the same knowledge.
    private func exchangeUntilQuiet() throws {
        for round in 0..<10 {
            var changed = 0
            for sender in members {
                for receiver in members where receiver.id != sender.id {
                    let exported = try BundleExchange.export(
                        replica: sender.replica, since: try receiver.replica.knowledge(), key: sender.key,
                        to: directory + "/bundles", intoDirectory: true, receiver: receiver.id)
                    do {
                        changed += try BundleExchange.importBundle(path: exported.path, into: receiver.replica, trust: trust)
                            .summary.changes
                    } catch {
                        throw fail("end, round \(round): \(sender.name) → \(receiver.name) was refused: \(error)")
                    }
                }
            }
            let knowledges = try members.map { try $0.replica.knowledge() }
            if changed == 0 && knowledges.allSatisfy({ $0 == knowledges[0] }) { return }
        }
        throw fail("the replicas did not become quiet after 10 rounds")
    }

    private func checkOutcome() throws {
        let expected = try rows(members[0])
        for member in members.dropFirst() {
            let actual = try rows(member)
            if actual != expected {
                throw fail("\(member.name) holds \(actual)\nbut A holds \(expected)")
            }
        }
        for member in members {
            let forged = try forgedCells(member.replica)
            if !forged.isEmpty { throw fail("\(member.name) holds values M forged: \(forged)") }
            let problems = try member.replica.doctor()
            if !problems.isEmpty { throw fail("doctor on \(member.name): \(problems)") }
        }
    }

    private func rows(_ member: Member) throws -> [[SQLValue]] {
        try member.replica.database.valueRows("SELECT * FROM notes ORDER BY id")
    }

    /// Every table and column (sqsync's own included) holding a forged value, byte for byte.
    private func forgedCells(_ replica: Replica) throws -> [String] {
        var found: [String] = []
        let tables = try replica.database.valueRows("SELECT name FROM sqlite_schema WHERE type = 'table'").compactMap {
            $0[0].stringValue
        }
        for table in tables {
            let columns = try replica.database.valueRows("SELECT name FROM pragma_table_info(?)", .text(table)).compactMap {
                $0[0].stringValue
            }
            for column in columns {
                let holds = "instr(CAST(\(quoteIdentifier(column)) AS BLOB), CAST(? AS BLOB)) > 0"
                let count = try replica.database.int64(
                    "SELECT count(*) FROM \(quoteIdentifier(table)) WHERE \(holds)", .text(MaliciousReplicaFuzzTests.forgedPrefix)
                )
                if count > 0 { found.append("\(table).\(column): \(count)") }
            }
        }
        return found
    }

    // MARK: One attack, deterministic

    /// M's own insert of k0 in its life 2^62 − 1, taken by B; then B deletes (the top) and
    /// re-inserts k0 and sends A what A lacks, twice.
    func pushCausalLengthToTheTop() throws {
        let a = members[0], b = members[1]
        let (seq, hlc) = try clock(of: malicious.replica)
        let created = max(hlc, ClockBound.now) + 1
        var segment = HandSegment(
            origin: malicious.id, base: seq, last: seq + 1, created: created, tables: [MaliciousReplicaFuzzTests.table],
            records: [
                HandRecord(
                    key: [.text("k0")], causalLength: (1 << 62) - 1, rowStamp: HandStamp(hlc: created, seq: seq + 1),
                    columns: [(1, .text("title 9999"), nil), (2, .integer(9), nil), (3, .null, nil)])
            ], signer: malicious.hand)
        segment.originName = malicious.name
        var bundle = try envelope()
        bundle.segments = [segment]
        let file = directory + "/bundles/top.sqsb"
        try bundle.write(to: file)
        _ = try BundleExchange.importBundle(path: file, into: b.replica, trust: trust)
        XCTAssertEqual(try b.replica.database.valueRows("SELECT title FROM notes WHERE id = 'k0'"), [[.text("title 9999")]])

        try b.replica.database.execute(
            "DELETE FROM notes WHERE id = 'k0'; INSERT INTO notes VALUES ('k0', 'title 0042', 42, 'from B');")
        try send(b, to: a)
        // B's delete took k0 to the top; there is no life above it, so B's re-insert is
        // undone at B (and said in its conflict log), and both hold the row deleted.
        XCTAssertEqual(try a.replica.database.valueRows("SELECT * FROM notes WHERE id = 'k0'"), [], "B's delete reached A")
        XCTAssertEqual(try b.replica.database.valueRows("SELECT * FROM notes WHERE id = 'k0'"), [], "no life above the top")
        XCTAssertEqual(
            try b.replica.database.int64(
                "SELECT count(*) FROM _sqsync_conflicts WHERE kind = 'insert at the top causal length'"), 1)
        // B's later changes, to other rows, travel in the same segment as that one.
        try b.replica.database.execute("INSERT INTO notes VALUES ('k7', 'title 0007', 7, 'later, from B')")
        try send(b, to: a)
        XCTAssertEqual(
            try a.replica.database.valueRows("SELECT title FROM notes WHERE id = 'k7'"), [[.text("title 0007")]],
            "B's later change reached A")
    }

    /// What `sender` sends `receiver` of what the receiver lacks; a refusal is reported, not
    /// thrown, so the assertions after it still run.
    private func send(_ sender: Member, to receiver: Member) throws {
        let exported = try BundleExchange.export(
            replica: sender.replica, since: try receiver.replica.knowledge(), key: sender.key, to: directory + "/bundles",
            intoDirectory: true, receiver: receiver.id)
        do {
            _ = try BundleExchange.importBundle(path: exported.path, into: receiver.replica, trust: trust)
        } catch {
            XCTFail("\(sender.name)'s honest bundle is refused at \(receiver.name): \(error)")
        }
    }

    // MARK: Attacks

    private func attack(step: Int) throws {
        let target = history.pick(honest)
        var attack = history.pick(Attack.allCases)
        var bundle: HandBundle
        switch attack {
        case .foreignOrigin, .foreignIdentity:
            bundle = try foreignOrigin(target: target, claimingIdentity: attack == .foreignIdentity)
        case .foreignStamp:
            bundle = try foreignStamp()
        case .knowledgeClaim:
            bundle = try envelope(claiming: 1000 + Int64(history.below(1_000_000)))
        case .futureStamps:
            bundle = try futureStamps()
        case .alteredUnderOriginSignature, .alteredAndSignedByM, .alteredChunk:
            if let altered = try alteredGenuineSegment(target: target, variant: &attack) {
                bundle = altered
            } else {
                attack = .foreignOrigin
                bundle = try foreignOrigin(target: target, claimingIdentity: false)
            }
        }
        let file = directory + "/bundles/attack-\(step).sqsb"
        try bundle.write(to: file)
        let label = "step \(step): M → \(members[target].name): \(attack.rawValue)"
        try post(Delivery(file: file, from: Self.m, to: target, label: label, attack: attack))
    }

    /// The import of an attack: refused for the reason it should be, the receiver unchanged
    /// in every table; a knowledge claim may be taken, but changes no knowledge and no row.
    private func check(_ attack: Attack, _ delivery: Delivery) throws {
        let receiver = members[delivery.to].replica
        let before = try receiver.database.everyTable()
        let knowledge = try receiver.knowledge()
        let rows = try self.rows(members[delivery.to])
        do {
            let result = try BundleExchange.importBundle(path: delivery.file, into: receiver, trust: trust)
            guard attack == .knowledgeClaim else {
                throw fail("\(delivery.label): accepted (\(result.outcome), \(result.summary.changes) rows)")
            }
            if try receiver.knowledge() != knowledge {
                throw fail("\(delivery.label): knowledge went from \(knowledge) to \(try receiver.knowledge())")
            }
            if try self.rows(members[delivery.to]) != rows { throw fail("\(delivery.label): changed rows") }
            history.note(delivery.label + ": taken, no knowledge changed")
            checked[attack, default: 0] += 1
            return
        } catch let error as BundleError {
            if !attack.refusal.isEmpty && !attack.refusal.contains(where: error.description.contains) {
                throw fail("\(delivery.label): refused for another reason: \(error)")
            }
        } catch let error as ChangeLogError where error.kind == .identityClash && error.description.contains(malicious.id) {
            // Delivered late, after M made real changes under the numbers it forged: M signed
            // two different changes under one number, which the receiver calls out as two
            // databases under M's ID. Refused all the same.
        } catch let stop as Stop {
            throw stop
        } catch {
            throw fail("\(delivery.label): refused with \(type(of: error)), not a BundleError: \(error)")
        }
        if try receiver.database.everyTable() != before { throw fail("\(delivery.label): the refused import changed the receiver") }
        history.note(delivery.label + ": refused")
        checked[attack, default: 0] += 1
    }

    /// M's own sequence number and clock, as its honest bundles state them.
    private func clock(of replica: Replica) throws -> (seq: Int64, hlc: Int64) {
        try replica.fold()
        let row = try replica.database.valueRows(#"SELECT "seq", "hlc" FROM "_sqsync_replica""#)[0]
        return (row[0].int64Value ?? -1, row[1].int64Value ?? -1)
    }

    /// An envelope M signs: itself first, with its own sequence number and clock (or
    /// `senderHLC`) as its honest bundles give them, so that only what the attack changes is
    /// refused; then A, B and C with what M holds of them plus `claiming`, and every replica's
    /// true key.
    private func envelope(claiming extra: Int64 = 0, senderHLC: Int64? = nil) throws -> HandBundle {
        let (seq, hlc) = try clock(of: malicious.replica)
        let knowledge = try malicious.replica.knowledge()
        var sites = [HandSite(id: malicious.id, name: malicious.name, knowledge: seq)]
        for index in honest {
            sites.append(
                HandSite(id: members[index].id, name: members[index].name, knowledge: knowledge[members[index].id] + extra))
        }
        var bundle = HandBundle(sites: sites, senderSeq: seq, senderHLC: senderHLC ?? hlc, signer: malicious.hand)
        bundle.identities = [(0, malicious.hand.identity)] + honest.map { ($0 + 1, members[$0].hand.identity) }
        return bundle
    }

    /// Inserts of forged rows and forged values over existing ones, numbered `seqs`, stamped
    /// at `hlc` and after; `site` gives each record's stamp site (0: the segment's origin).
    private func forgedRecords(seqs: ClosedRange<Int64>, hlc: Int64, site: (Int) -> UInt64 = { _ in 0 }) -> [HandRecord] {
        seqs.enumerated().map { index, seq in
            forgeries += 1
            let key =
                history.chance(50)
                ? history.pick(MaliciousReplicaFuzzTests.keys) : "\(MaliciousReplicaFuzzTests.forgedPrefix)k\(forgeries)"
            let forged = "\(MaliciousReplicaFuzzTests.forgedPrefix)\(forgeries)"
            return HandRecord(
                key: [.text(key)], causalLength: Int64(2 * history.below(3) + 1),
                rowStamp: HandStamp(hlc: hlc + Int64(index), seq: seq, site: site(index)),
                columns: [(1, .text(forged), nil), (2, .integer(Int64(forgeries)), nil), (3, .text(forged), nil)])
        }
    }

    /// (a) New changes of another honest replica's (numbered after what the target holds of
    /// it), in a segment M signs, with that replica's true key in the envelope, or M's key
    /// claimed as its identity.
    private func foreignOrigin(target: Int, claimingIdentity: Bool) throws -> HandBundle {
        let victim = members[history.pick(honest.filter { $0 != target })]
        let base = try members[target].replica.knowledge()[victim.id]
        let count = Int64(1 + history.below(3))
        let now = ClockBound.now
        var segment = HandSegment(
            origin: victim.id, base: base, last: base + count, created: now, tables: [MaliciousReplicaFuzzTests.table],
            records: forgedRecords(seqs: (base + 1)...(base + count), hlc: now - 10), signer: malicious.hand)
        segment.originName = victim.name
        var bundle = try envelope()
        if claimingIdentity {
            let site = bundle.sites.firstIndex { $0.id == victim.id }!
            bundle.identities = bundle.identities.map { $0.0 == site ? (site, malicious.hand.identity) : $0 }
        } else if history.chance(30) {
            bundle.identities = [(0, malicious.hand.identity)]
        }
        bundle.segments = [segment]
        return bundle
    }

    /// (b) M's next changes in its own segment, one of them stamped as another replica's.
    private func foreignStamp() throws -> HandBundle {
        let (seq, hlc) = try clock(of: malicious.replica)
        let created = max(hlc, ClockBound.now) + 10
        let foreign = history.below(2)
        let site = UInt64(1 + history.below(honest.count))
        var segment = HandSegment(
            origin: malicious.id, base: seq, last: seq + 2, created: created, tables: [MaliciousReplicaFuzzTests.table],
            records: forgedRecords(seqs: (seq + 1)...(seq + 2), hlc: created - 5) { $0 == foreign ? site : 0 },
            signer: malicious.hand)
        segment.originName = malicious.name
        var bundle = try envelope()
        bundle.segments = [segment]
        return bundle
    }

    /// (d) M's next change stamped days past the bound on clocks, the envelope's clock with it
    /// or not.
    private func futureStamps() throws -> HandBundle {
        let (seq, hlc) = try clock(of: malicious.replica)
        let far = ClockBound.now + ClockBound.milliseconds + 86_400_000 * Int64(1 + history.below(30))
        var segment = HandSegment(
            origin: malicious.id, base: seq, last: seq + 1, created: far, tables: [MaliciousReplicaFuzzTests.table],
            records: forgedRecords(seqs: (seq + 1)...(seq + 1), hlc: far - 1), signer: malicious.hand)
        segment.originName = malicious.name
        var bundle = try envelope(senderHLC: history.chance(50) ? far : hlc)
        bundle.segments = [segment]
        return bundle
    }

    /// (e) A segment of another honest replica's, from a genuine bundle M received, sent on
    /// in M's own bundle with one title rewritten as a forged value (the chunk line rewritten
    /// under the origin's signature, or the header signed by M), or with one byte of a chunk
    /// changed. Never one of the target's own segments: a replica does not read its own
    /// changes back, so their chunks are not its to check. Nil when M holds no such segment;
    /// `variant` becomes the one written.
    private func alteredGenuineSegment(target: Int, variant: inout Attack) throws -> HandBundle? {
        let excluded: Set<String> = [malicious.id, members[target].id]
        var candidates: [(file: String, entry: BundleEnvelope.SegmentEntry, origin: String)] = []
        for file in receivedByM {
            let reader = try BundleReader(path: file, trust: trust)
            for entry in reader.envelope.segments where !excluded.contains(reader.envelope.sites[entry.site].id) {
                candidates.append((file, entry, reader.envelope.sites[entry.site].id))
            }
        }
        // A segment may hold no records (changes since overwritten in place): one with a chunk.
        var found:
            (
                file: String, entry: BundleEnvelope.SegmentEntry, origin: String, segment: [UInt8], position: Int,
                header: SegmentHeader
            )?
        while found == nil && !candidates.isEmpty {
            let candidate = candidates.remove(at: history.below(candidates.count))
            let all = Array(try Data(contentsOf: URL(fileURLWithPath: candidate.file)))
            let segment = Array(all[candidate.entry.offset..<(candidate.entry.offset + candidate.entry.length)])
            var headerLength = 0, position = 0
            repeat {
                headerLength |= Int(segment[position] & 0x7f) << (7 * position)
                position += 1
            } while segment[position - 1] & 0x80 != 0
            let decoded = try SegmentHeader.decode(Array(segment[position..<(position + headerLength)]), path: candidate.file)
            guard !decoded.chunks.isEmpty else { continue }
            found = (candidate.file, candidate.entry, candidate.origin, segment, position, decoded)
        }
        guard let (file, entry, origin, segment, position, header) = found else { return nil }
        let headerBytes = try header.encoded()
        let headerLength = headerBytes.count
        guard Array(segment[position..<(position + headerLength)]) == headerBytes else {
            throw fail("a genuine segment header does not encode back to its bytes")
        }
        let signed = Array(segment[(position + headerLength)..<(position + headerLength + 96)])
        let chunks = Array(segment[(position + headerLength + 96)...])
        let first = header.chunks[0]
        var raw: [UInt8] = []
        try BlockCompression.inflate(
            Array(chunks.prefix(first.compressedLength)), rawLength: first.rawLength, into: &raw, path: file)
        let pattern = [BundleCodec.ValueTag.text.rawValue, 10] + Array("title ".utf8)
        let title = (0..<max(0, raw.count - pattern.count - 3)).first { Array(raw[$0..<($0 + pattern.count)]) == pattern }
        if title == nil { variant = .alteredChunk }

        var bytes: [UInt8]
        if variant == .alteredChunk {
            var altered = chunks
            altered[first.compressedLength / 2] ^= 0x10
            bytes = Array(segment[..<(position + headerLength + 96)]) + altered
        } else {
            // "title 1234" becomes "forged-234": the same length, so nothing else moves.
            let digits = title! + pattern.count
            raw.replaceSubrange(
                (digits - 6)..<(digits + 4),
                with: Array(MaliciousReplicaFuzzTests.forgedPrefix.utf8) + raw[(digits + 1)..<(digits + 4)])
            let recompressed = try BlockCompression.compress(raw)
            var changed = header
            changed.chunks[0].compressedLength = recompressed.count
            changed.chunks[0].digest = Array(SHA256.hash(data: recompressed))
            let encoded = try changed.encoded()
            let signature =
                variant == .alteredAndSignedByM ? malicious.hand.publicKey + malicious.hand.sign(encoded) : signed
            bytes = []
            BundleCodec.appendVarint(encoded.count, to: &bytes)
            bytes += encoded + signature + recompressed + chunks.dropFirst(first.compressedLength)
        }
        var bundle = try envelope()
        bundle.rawSegments = [HandRawSegment(origin: origin, base: entry.base, last: entry.last, bytes: bytes)]
        return bundle
    }
}
