import ChangeLog
import Foundation
import SQLiteDatabase
import TestSupport
import XCTest

@testable import Bundle
@testable import Transport

/// Mailboxes with many readers (docs/BUNDLE_FORMAT.md, "Readers' keys"): a bundle is encrypted
/// once, to a key the readers share, so its size does not grow with them; a reader that is
/// retired or whose key leaves `allowed_signers` cannot read what is written after; a key file
/// goes once no bundle needs it.
final class ReadersKeyMailboxTests: XCTestCase {
    private var folder = ""
    private var box: String { folder + "/box" }
    private var mailbox: Mailbox!

    override func setUpWithError() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("sqsync-readers-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: box, withIntermediateDirectories: true)
        mailbox = Mailbox(transport: DirectoryTransport(root: box))
    }

    override func tearDown() {
        mailbox = nil
        unsetenv("SQSYNC_MAX_DIRECT_RECIPIENTS")
        try? FileManager.default.removeItem(atPath: folder)
    }

    private func replicas(_ names: [String]) throws -> [Replica] {
        let database = try Database(path: folder + "/\(names[0]).db")
        try database.execute("CREATE TABLE t (id TEXT PRIMARY KEY, v TEXT);")
        let first = try Replica.initialize(path: folder + "/\(names[0]).db", name: names[0]).replica
        try first.track(["t"], allowIntegerPrimaryKey: false)
        return [first] + (try names.dropFirst().map { try first.clone(to: folder + "/\($0).db", name: $0) })
    }

    private func files(in relative: String) -> [String] {
        let path = box + "/" + relative
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: path) else { return [] }
        return names.filter { !$0.hasPrefix(".") }.sorted().map { path + "/" + $0 }
    }

    private func outbox(of replica: Replica) -> [String] { files(in: "sqsync/outbox/\(replica.knowledgeID)") }

    private func rows(_ replica: Replica) throws -> [String] {
        try replica.database.rows(#"SELECT "id" || '=' || "v" AS "row" FROM "t" ORDER BY "id""#).map { try $0.string("row") }
    }

    private func size(_ path: String) throws -> Int { try FileManager.default.attributesOfItem(atPath: path)[.size] as! Int }

    /// 1,100 trusted keys that have no replica yet, A and B: A's first bundle is for all of
    /// them (whoever comes next reads it), 1,102 readers, past the old cliff of 1,024. It is
    /// encrypted once to a readers' key (three stanzas, whatever the number of readers); B
    /// imports it through the mailbox; readers across the list, keys only, open the key file and
    /// the bundle, whose sender's signature checks; a key not trusted opens neither.
    func testAThousandAndMoreReadersShareOneKeyAndEveryReaderReads() throws {
        let keyA = SigningKey.generate(comment: "a"), keyB = SigningKey.generate(comment: "b")
        let others = (0..<1_100).map { SigningKey.generate(comment: "site\($0)") }
        var lines = [AllowedSigners.line(principal: "A", key: keyA.publicKey), AllowedSigners.line(principal: "B", key: keyB.publicKey)]
        lines += others.enumerated().map { AllowedSigners.line(principal: "site\($0.offset)", key: $0.element.publicKey) }
        let trust = try AllowedSigners(text: lines.joined(separator: "\n"))
        let replicas = try self.replicas(["a", "b"])
        let (a, b) = (replicas[0], replicas[1])
        try a.database.execute("INSERT INTO t VALUES ('1', 'from A')")

        _ = try mailbox.sync(replica: a, key: keyA, trust: trust)
        let inMailbox = try XCTUnwrap(outbox(of: a).first)
        // B's sync removes it once every reader it knows holds it.
        let bundle = folder + "/a-bundle.sqsb"
        try FileManager.default.copyItem(atPath: inMailbox, toPath: bundle)
        let keyFiles = files(in: "sqsync/keys")
        XCTAssertEqual(keyFiles.count, 1, "\(keyFiles)")
        let keyName = URL(fileURLWithPath: keyFiles[0]).lastPathComponent
        XCTAssertEqual(AgeFile.readersKeyName(ofFile: bundle), keyName)
        let keyFile = folder + "/readers-key"
        try FileManager.default.copyItem(atPath: keyFiles[0], toPath: keyFile)
        XCTAssertEqual(try AgeFile.recipients(ofFile: bundle).count, 3, "A's own key, the readers' key and its name")
        XCTAssertLessThan(try size(bundle), 8_000, "no stanza per reader")
        XCTAssertEqual(try AgeFile.recipients(ofFile: keyFiles[0]).count, 1_102, "the key file has one per reader")

        _ = try mailbox.sync(replica: b, key: keyB, trust: trust)
        XCTAssertEqual(try rows(b), ["1=from A"])

        for index in [0, 250, 549, 800, 1_099] {
            let key = try ReadersKey.open(path: keyFile, name: keyName, with: others[index])
            let reader = try BundleReader(path: bundle, trust: trust, decryptingWith: others[index], readersKeys: [key])
            XCTAssertEqual(reader.envelope.sender.id, a.knowledgeID, "site \(index)")
            XCTAssertEqual(reader.principal, "A")
        }
        let outsider = SigningKey.generate(comment: "outsider")
        XCTAssertThrowsError(try ReadersKey.open(path: keyFile, name: keyName, with: outsider))
        XCTAssertThrowsError(try BundleReader(path: bundle, trust: trust, decryptingWith: outsider)) {
            XCTAssertEqual(($0 as? BundleError)?.kind, .notAddressed, "\($0)")
        }
    }

    /// With the readers' key taken from two readers up, A, B and C converge through it. C's
    /// key then leaves A's and B's `allowed_signers`: what A writes next goes to a new key that
    /// neither C's SSH key nor the readers' keys C holds open; A, B and D (a reader that joins
    /// later) converge without C; once no bundle names the old keys, their makers remove them.
    func testAReaderWhoseKeyLeavesTrustCannotReadWhatFollows() throws {
        setenv("SQSYNC_MAX_DIRECT_RECIPIENTS", "1", 1)
        let keys = ["A", "B", "C", "D"].map { SigningKey.generate(comment: $0) }
        func trust(_ names: [Int]) throws -> AllowedSigners {
            try AllowedSigners(
                text: names.map { AllowedSigners.line(principal: ["A", "B", "C", "D"][$0], key: keys[$0].publicKey) }.joined(separator: "\n"))
        }
        let everyone = try trust([0, 1, 2])
        let replicas = try self.replicas(["a", "b", "c", "d"])
        // C only reads: once its key is not trusted, its own changes would be refused anyway.
        for (index, replica) in replicas.prefix(2).enumerated() {
            try replica.database.execute("INSERT INTO t VALUES ('\(index)', 'from \(replica.name)')")
        }
        var oldKeys: Set<String> = []
        for _ in 0..<3 {
            for index in 0..<3 {
                _ = try mailbox.sync(replica: replicas[index], key: keys[index], trust: everyone)
                for bundle in outbox(of: replicas[index]) { XCTAssertNotNil(AgeFile.readersKeyName(ofFile: bundle), bundle) }
                oldKeys.formUnion(files(in: "sqsync/keys"))
            }
        }
        for replica in replicas.prefix(3) { XCTAssertEqual(try rows(replica), ["0=from a", "1=from b"]) }
        XCTAssertFalse(oldKeys.isEmpty)

        // C's key leaves A's and B's trust; D joins, trusted by A and B. A's next bundle is
        // for a key C's key does not open.
        let withoutC = try trust([0, 1, 3])
        try replicas[0].database.execute("INSERT INTO t VALUES ('3', 'after C left')")
        _ = try mailbox.sync(replica: replicas[0], key: keys[0], trust: withoutC)
        let fromA = try XCTUnwrap(outbox(of: replicas[0]).first)
        let name = try XCTUnwrap(AgeFile.readersKeyName(ofFile: fromA))
        XCTAssertFalse(oldKeys.contains(box + "/sqsync/keys/" + name))
        XCTAssertThrowsError(try ReadersKey.open(path: box + "/sqsync/keys/" + name, name: name, with: keys[2])) {
            XCTAssertEqual(($0 as? BundleError)?.kind, .notAddressed, "\($0)")
        }
        let heldByC = try MailboxState(replicas[2], mailbox: mailbox.transport.displayName).readersKeys().values.map(\.key)
        XCTAssertFalse(heldByC.isEmpty)
        XCTAssertThrowsError(try BundleReader(path: fromA, trust: nil, decryptingWith: keys[2], readersKeys: heldByC)) {
            XCTAssertEqual(($0 as? BundleError)?.kind, .notAddressed, "\($0)")
        }
        for _ in 0..<3 {
            for index in [1, 3, 0] {
                let report = try mailbox.sync(replica: replicas[index], key: keys[index], trust: withoutC)
                XCTAssertTrue(report.rejected.isEmpty && report.refused.isEmpty, "\(report.rejected) \(report.refused)")
            }
        }
        XCTAssertEqual(try rows(replicas[3]), ["0=from a", "1=from b", "3=after C left"])
        XCTAssertEqual(try rows(replicas[1]), try rows(replicas[3]))
        _ = try mailbox.sync(replica: replicas[2], key: keys[2], trust: everyone)
        XCTAssertEqual(try rows(replicas[2]), ["0=from a", "1=from b"], "C read what was written after its key left")
        // The keys made for A, B and C: no bundle names them any more, so their makers removed them.
        XCTAssertTrue(Set(files(in: "sqsync/keys")).isDisjoint(with: oldKeys), "\(files(in: "sqsync/keys"))")
    }

    /// Whoever can write to the folder replaces the key file A's bundle names: first with an
    /// age file for the attacker's own key, then with a FIFO. Neither stops anyone for good nor
    /// hangs a sync: A sees the file is not the one it made and moves to a new key (its bundle
    /// gets a new name); D, which never opened the first key, waits, then reads A's new bundle
    /// (the second it had opened already, and reads with what it keeps).
    func testAReplacedKeyFileMovesTheWriterToANewKey() throws {
        setenv("SQSYNC_MAX_DIRECT_RECIPIENTS", "1", 1)
        let keys = ["A", "B", "D"].map { SigningKey.generate(comment: $0) }
        let attacker = SigningKey.generate(comment: "attacker")
        let trust = try AllowedSigners(
            text: zip(["A", "B", "D"], keys).map { AllowedSigners.line(principal: $0.0, key: $0.1.publicKey) }.joined(separator: "\n"))
        let replicas = try self.replicas(["a", "b", "d"])
        let (a, b, d) = (replicas[0], replicas[1], replicas[2])
        for _ in 0..<2 {
            _ = try mailbox.sync(replica: a, key: keys[0], trust: trust)
            _ = try mailbox.sync(replica: b, key: keys[1], trust: trust)
        }
        for (round, replacement) in ["an age file for the attacker", "a FIFO"].enumerated() {
            try a.database.execute("INSERT INTO t VALUES ('r\(round)', '\(replacement)')")
            _ = try mailbox.sync(replica: a, key: keys[0], trust: trust)
            let bundle = try XCTUnwrap(outbox(of: a).first)
            let name = try XCTUnwrap(AgeFile.readersKeyName(ofFile: bundle))
            let keyFile = box + "/sqsync/keys/" + name
            try FileManager.default.removeItem(atPath: keyFile)
            if round == 0 {
                // A key file of the attacker's own, for the attacker alone, under the name.
                _ = try ReadersKey.make(readers: [attacker.publicKey], signingKey: attacker, writingTo: keyFile)
            } else {
                XCTAssertEqual(mkfifo(keyFile, 0o644), 0, String(cString: strerror(errno)))
            }
            let waiting = try mailbox.sync(replica: d, key: keys[2], trust: trust)
            if round == 0 {
                XCTAssertFalse(try rows(d).contains("r\(round)=\(replacement)"))
                XCTAssertTrue(waiting.notes.contains { $0.contains("cannot open") }, "\(waiting.notes)")
            }
            _ = try mailbox.sync(replica: a, key: keys[0], trust: trust)
            let next = try XCTUnwrap(outbox(of: a).first)
            XCTAssertNotEqual(next, bundle, "A's bundle keeps its name over a replaced key")
            XCTAssertNotEqual(AgeFile.readersKeyName(ofFile: next), name)
            _ = try mailbox.sync(replica: d, key: keys[2], trust: trust)
            _ = try mailbox.sync(replica: b, key: keys[1], trust: trust)
            let atD = try rows(d), atB = try rows(b)
            XCTAssertTrue(atD.contains("r\(round)=\(replacement)"), "\(atD)")
            XCTAssertTrue(atB.contains("r\(round)=\(replacement)"), "\(atB)")
        }
    }

    /// A readers' key for exactly `readers`, made and signed by `maker` (a reader's key, here
    /// a stolen one), planted in the mailbox under its name.
    private func plantKey(readers: [SigningKey], maker: SigningKey) throws -> String {
        try FileManager.default.createDirectory(atPath: box + "/sqsync/keys", withIntermediateDirectories: true)
        let staged = folder + "/staged-\(UUID().uuidString).age"
        let key = try ReadersKey.make(readers: readers.map(\.publicKey), signingKey: maker, writingTo: staged)
        try FileManager.default.moveItem(atPath: staged, toPath: box + "/sqsync/keys/" + key.name)
        return key.name
    }

    private func plantPoisonedKey(
        readers: [SigningKey], maker: SigningKey, victim: SigningKey, inMailbox mailboxFolder: String? = nil
    ) throws -> String {
        try PoisonedReadersKey.plant(readers: readers, maker: maker, victim: victim, inMailbox: mailboxFolder ?? box, scratch: folder)
    }

    private func readersKeyOfBundle(_ replica: Replica) throws -> String {
        try XCTUnwrap(AgeFile.readersKeyName(ofFile: try XCTUnwrap(outbox(of: replica).first)))
    }

    /// Issue 55, item 2: a key file planted with f7's stolen key starves no reader.
    /// - A reader that cannot open a readers' key says so in its signed acknowledgement.
    /// - A writer leaves a key any reader of its group said it could not open, within one round
    ///   (here north's word is written with north's key by hand: a writer cannot check the
    ///   other readers' stanzas, so it goes by that word).
    /// - A writer that made a key for its readers never takes another's over it: with its own
    ///   file removed and f7's planted, it makes a new one.
    func testAPlantedReadersKeyStarvesNoReader() throws {
        let keys = ["hq", "north", "f7"].map { SigningKey.generate(comment: $0) }
        let trust = try AllowedSigners(
            text: zip(["hq", "north", "f7"], keys).map { AllowedSigners.line(principal: $0.0, key: $0.1.publicKey) }.joined(separator: "\n"))
        let replicas = try self.replicas(["hq", "north", "f7"])
        let (hq, north) = (replicas[0], replicas[1])
        func sync(_ index: Int) throws -> SyncReport { try mailbox.sync(replica: replicas[index], key: keys[index], trust: trust) }
        for _ in 0..<2 { for index in 0..<3 { _ = try sync(index) } }
        setenv("SQSYNC_MAX_DIRECT_RECIPIENTS", "1", 1)

        // f7 plants a key before hq made one: hq takes it (the first by name).
        let planted = try plantKey(readers: keys, maker: keys[2])
        try hq.database.execute("INSERT INTO t VALUES ('h1', 'first')")
        _ = try sync(0)
        XCTAssertEqual(try readersKeyOfBundle(hq), planted, "hq took the key f7 made")
        // north says, signed, that it cannot open it: hq leaves it at its next sync.
        let said = MailboxAcknowledgement(
            replica: north.knowledgeID, name: "north", knowledge: try north.knowledge(), birth: try KeyBinding.birth(of: north),
            unopened: [planted])
        try Data(try said.signedText(key: keys[1]).utf8).write(
            to: URL(fileURLWithPath: box + "/sqsync/acks/\(north.knowledgeID)/99999999999999999999_00000000.ack"))
        _ = try sync(0)
        let own = try readersKeyOfBundle(hq)
        XCTAssertNotEqual(own, planted, "hq left the key north could not open")
        XCTAssertEqual(files(in: "sqsync/acks/\(north.knowledgeID)").count, 2)
        _ = try sync(1)
        XCTAssertTrue(try rows(north).contains("h1=first"))

        // A key file north cannot open (damaged) is reported in north's own acknowledgement.
        try Data("not a key".utf8).write(to: URL(fileURLWithPath: box + "/sqsync/keys/" + own))
        try hq.database.execute("INSERT INTO t VALUES ('h2', 'second')")
        try FileManager.default.removeItem(atPath: box + "/sqsync/keys/" + own)
        _ = try sync(0)
        let next = try readersKeyOfBundle(hq)
        try Data("not a key".utf8).write(to: URL(fileURLWithPath: box + "/sqsync/keys/" + next))
        let waiting = try sync(1)
        XCTAssertEqual(waiting.waitingForKey, 1, "\(waiting.notes)")
        let acknowledgement = try XCTUnwrap(files(in: "sqsync/acks/\(north.knowledgeID)").last)
        XCTAssertTrue(try String(contentsOfFile: acknowledgement, encoding: .utf8).contains("unopened \(next)"))

        // hq made keys for these readers: with its file gone and f7's planted, it makes another.
        try FileManager.default.removeItem(atPath: box + "/sqsync/keys/" + next)
        let again = try plantKey(readers: keys, maker: keys[2])
        _ = try sync(0)
        let made = try readersKeyOfBundle(hq)
        XCTAssertNotEqual(made, again, "never another's key over its own")
        XCTAssertEqual(try MailboxState(hq, mailbox: mailbox.transport.displayName).readersKeys()[made]?.madeHere, true)
        _ = try sync(1)
        let atNorth = try rows(north)
        XCTAssertTrue(atNorth.contains("h2=second"), "\(atNorth)")
    }

    /// A key whose stanza for one reader wraps another (``PoisonedReadersKey``, end to end in
    /// `MailboxAttackTests`), planted over and over by the last replica's stolen key, in random
    /// networks and orders: 3 to 5 replicas share a mailbox, all encrypting to readers' keys;
    /// they write and sync in random order while f7 plants keys poisoned for a random reader
    /// (before and after writers made their own) and removes key files. Once it stops, a few
    /// rounds later every replica holds every row written anywhere: no reader starves.
    /// 3 seeds; `SQSYNC_PROPERTY_SEEDS=N` runs N.
    func testPoisonedReadersKeysStarveNoReaderInAnyOrder() throws {
        setenv("SQSYNC_MAX_DIRECT_RECIPIENTS", "1", 1)
        for seed in PropertyHistory.seeds(from: 0x9015_0000, default: 3) {
            var history = PropertyHistory(seed: seed)
            let network = folder + "/seed-\(seed)", shared = network + "/box"
            try FileManager.default.createDirectory(atPath: shared, withIntermediateDirectories: true)
            let names = (0..<(3 + history.below(3))).map { "r\($0)" }
            let keys = names.map { SigningKey.generate(comment: $0) }
            let thief = keys.count - 1
            let trust = try AllowedSigners(
                text: zip(names, keys).map { AllowedSigners.line(principal: $0.0, key: $0.1.publicKey) }.joined(separator: "\n"))
            try Database(path: network + "/r0.db").execute("CREATE TABLE t (id TEXT PRIMARY KEY, v TEXT);")
            let first = try Replica.initialize(path: network + "/r0.db", name: "r0").replica
            try first.track(["t"], allowIntegerPrimaryKey: false)
            let replicas = [first] + (try names.dropFirst().map { try first.clone(to: network + "/\($0).db", name: $0) })
            let box = Mailbox(transport: DirectoryTransport(root: shared))
            var written: Set<String> = []
            func sync(_ index: Int) throws {
                _ = try box.sync(replica: replicas[index], key: keys[index], trust: trust)
                history.note("\(names[index]) syncs")
            }
            do {
                for step in 0..<40 {
                    switch history.below(10) {
                    case 0..<3:
                        let writer = history.below(replicas.count)
                        let id = "\(names[writer])-\(step)"
                        try replicas[writer].database.run("INSERT INTO t VALUES (?, 'x')", .text(id))
                        written.insert(id)
                        history.note("\(names[writer]) writes \(id)")
                    case 3..<8:
                        try sync(history.below(replicas.count))
                    case 8:
                        let victim = history.below(thief)
                        let name = try plantPoisonedKey(readers: keys, maker: keys[thief], victim: keys[victim], inMailbox: shared)
                        history.note("the thief plants \(name), poisoned for \(names[victim])")
                    default:
                        for file in (try? FileManager.default.contentsOfDirectory(atPath: shared + "/sqsync/keys")) ?? []
                        where history.chance(50) {
                            try FileManager.default.removeItem(atPath: shared + "/sqsync/keys/" + file)
                            history.note("the thief removes key \(file)")
                        }
                    }
                }
                for _ in 0..<4 { for index in replicas.indices { try sync(index) } }
                for (index, replica) in replicas.enumerated() {
                    let held = Set(try rows(replica).map { String($0.prefix { $0 != "=" }) })
                    let missing = written.subtracting(held)
                    if !missing.isEmpty { throw FuzzStop("\(names[index]) never received \(missing.sorted())") }
                }
            } catch {
                XCTFail("seed \(seed): \(error)\n\(history.tail)")
            }
        }
    }

    /// A, B and C share a readers' key; A and B retire C (its key still trusted, every reader's
    /// key pinned): A's next bundle goes to a new key that neither C's SSH key nor the keys C
    /// holds open, and B still reads it.
    func testARetiredReaderCannotReadWhatFollows() throws {
        setenv("SQSYNC_MAX_DIRECT_RECIPIENTS", "1", 1)
        let keys = ["A", "B", "C"].map { SigningKey.generate(comment: $0) }
        let trust = try AllowedSigners(
            text: zip(["A", "B", "C"], keys).map { AllowedSigners.line(principal: $0.0, key: $0.1.publicKey) }.joined(separator: "\n"))
        let replicas = try self.replicas(["a", "b", "c"])
        var heldByC: [ReadersKey] = []
        try replicas[0].database.execute("INSERT INTO t VALUES ('before', 'from A')")
        try replicas[1].database.execute("INSERT INTO t VALUES ('also', 'from B')")
        for _ in 0..<2 {
            for index in 0..<3 {
                _ = try mailbox.sync(replica: replicas[index], key: keys[index], trust: trust)
                heldByC += try MailboxState(replicas[2], mailbox: mailbox.transport.displayName).readersKeys().values.map(\.key)
            }
        }
        for index in [0, 1] { _ = try replicas[index].retire(peer: "c") }
        try replicas[0].database.execute("INSERT INTO t VALUES ('after', 'C was retired')")
        _ = try mailbox.sync(replica: replicas[0], key: keys[0], trust: trust)
        let fromA = try XCTUnwrap(outbox(of: replicas[0]).first)
        let name = try XCTUnwrap(AgeFile.readersKeyName(ofFile: fromA))
        XCTAssertThrowsError(try ReadersKey.open(path: box + "/sqsync/keys/" + name, name: name, with: keys[2]))
        XCTAssertFalse(heldByC.isEmpty)
        XCTAssertThrowsError(try BundleReader(path: fromA, trust: nil, decryptingWith: keys[2], readersKeys: heldByC)) {
            XCTAssertEqual(($0 as? BundleError)?.kind, .notAddressed, "\($0)")
        }
        _ = try mailbox.sync(replica: replicas[1], key: keys[1], trust: trust)
        XCTAssertTrue(try rows(replicas[1]).contains("after=C was retired"))
    }
}

private struct FuzzStop: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
