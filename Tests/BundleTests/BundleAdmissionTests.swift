import ChangeLog
import Foundation
import SQLiteDatabase
import TestSupport
import XCTest

@testable import Bundle

/// ``BundleAdmission``, the one place that says yes, no or not yet: each verdict reached by a
/// bundle written by hand (docs/BUNDLE_FORMAT.md), asserted without merging anything, and
/// admission itself writing nothing.
final class BundleAdmissionTests: XCTestCase {
    private var directory: String!
    private var receiver: Replica!
    private var receiverKey: SigningKey!
    private let r = HandKey("r"), o = HandKey("o"), m = HandKey("m")
    private var trust: AllowedSigners!
    private var now: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqsync-admission-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try r.write(to: directory + "/r.key")
        receiverKey = try SigningKey.load(path: directory + "/r.key")
        trust = try AllowedSigners(text: [r, o, m].map(\.allowedSignersLine).joined(separator: "\n") + "\n")
        receiver = try Replica.initialize(path: directory + "/r.db", name: "r", knowledgeID: r.replicaID).replica
        try receiver.database.execute("CREATE TABLE notes (id TEXT PRIMARY KEY, v INTEGER)")
        try receiver.track(["notes"], allowIntegerPrimaryKey: false)
    }

    override func tearDown() {
        receiver = nil
        if let directory { try? FileManager.default.removeItem(atPath: directory) }
    }

    // MARK: Bundles written by hand

    /// O's insert of `id`, numbered `seq`, in a segment of `table`'s columns.
    private func segment(
        seq: Int64 = 1, base: Int64 = 0, id: String = "n1", table: (String, [String], [Int]) = ("notes", ["id", "v"], [0]),
        created: Int64? = nil, signer: HandKey? = nil
    ) -> HandSegment {
        let clock = created ?? now
        return HandSegment(
            origin: o.replicaID, base: base, last: seq, created: clock, tables: [table],
            records: [
                HandRecord(
                    key: [.text(id)], rowStamp: HandStamp(hlc: clock, seq: seq),
                    columns: table.1.count > 1 ? (1..<table.1.count).map { ($0, .integer(7), nil) } : [])
            ], signer: signer ?? o)
    }

    /// A bundle O sends, carrying `segments`.
    private func bundle(_ segments: [HandSegment], senderHLC: Int64? = nil, signer: HandKey? = nil) -> HandBundle {
        let last = segments.map(\.last).max() ?? 0
        var bundle = HandBundle(
            sites: [HandSite(id: o.replicaID, name: "o", knowledge: last)], senderSeq: last, senderHLC: senderHLC ?? now,
            signer: signer ?? o)
        bundle.identities = [(0, o.identity)]
        bundle.segments = segments
        return bundle
    }

    /// Every verdict admission reaches on `bundle`, inside a transaction that rolls back: the
    /// bundle's, then each segment's (before its header is read, then after).
    private func verdicts(_ bundle: HandBundle) throws -> (
        bundle: BundleVerdict, signers: [SignerVerdict], segments: [SegmentVerdict]
    ) {
        let path = directory + "/bundle-\(UUID().uuidString.prefix(6)).sqsb"
        try bundle.write(to: path)
        let reader = try BundleReader(path: path, trust: trust)
        let before = try receiver.database.everyTable()
        var signers: [SignerVerdict] = [], segments: [SegmentVerdict] = []
        let verdict: BundleVerdict = try receiver.database.inTransaction(commit: false) {
            try BundleTables.ready(receiver)
            let admission = try BundleAdmission(reader: reader, replica: receiver, trust: trust)
            let verdict = try admission.admitBundle()
            guard case .accept(let admitted) = verdict else { return verdict }
            try admitted.record(into: receiver, envelope: reader.envelope, ledger: admission.ledger)
            let known = try receiver.knowledge(), retired = try receiver.retiredPeers()
            try reader.readSegments(checkOrigin: { entry, signer in
                let signerVerdict = try admission.admitSigner(of: entry, signer: signer, known: known, retired: retired)
                signers.append(signerVerdict)
                if case .read = signerVerdict { return true }
                return false
            }) { segment in
                try admission.ledger.write()
                segments.append(try admission.admitSegment(segment.header.changes))
            }
            return verdict
        }
        XCTAssertEqual(try receiver.database.everyTable(), before, "admission and its rolled-back records left the replica as it was")
        return (verdict, signers, segments)
    }

    /// Admission of the bundle alone writes nothing, whatever it decides.
    private func bundleVerdictWritesNothing(_ bundle: HandBundle) throws -> BundleVerdict {
        let path = directory + "/alone-\(UUID().uuidString.prefix(6)).sqsb"
        try bundle.write(to: path)
        let reader = try BundleReader(path: path, trust: trust)
        try BundleTables.ready(receiver)
        let before = try receiver.database.everyTable()
        let verdict = try BundleAdmission(reader: reader, replica: receiver, trust: trust).admitBundle()
        XCTAssertEqual(try receiver.database.everyTable(), before, "admitting a bundle writes nothing")
        return verdict
    }

    private func refusal(_ verdict: BundleVerdict) -> String? {
        if case .refuse(let error) = verdict { return "\(error)" }
        return nil
    }

    // MARK: The bundle

    func testAnHonestBundleIsAcceptedAndItsAdmissionWritesNothing() throws {
        guard case .accept(let admitted) = try bundleVerdictWritesNothing(bundle([segment()])) else {
            return XCTFail("an honest bundle is accepted")
        }
        XCTAssertFalse(admitted.superseded)
    }

    func testASenderClockFarAheadIsRefused() throws {
        let verdict = try bundleVerdictWritesNothing(bundle([segment()], senderHLC: now + 30 * 86_400_000))
        XCTAssertTrue(refusal(verdict)?.contains("ahead of this machine's clock") == true, "\(verdict)")
    }

    func testAnIdentityMadeFromAnotherKeyIsRefusedAsAForgery() throws {
        var forged = bundle([segment()])
        forged.identities = [(0, m.identity)]
        let verdict = try bundleVerdictWritesNothing(forged)
        XCTAssertTrue(refusal(verdict)?.contains("a forgery") == true, "\(verdict)")
    }

    func testABundleSignedByAnotherKeyThanItsSendersIsRefused() throws {
        let verdict = try bundleVerdictWritesNothing(bundle([segment()], signer: m))
        XCTAssertTrue(refusal(verdict)?.contains("but it is signed by m's key") == true, "\(verdict)")
    }

    func testABundleUnderThisReplicasOwnIDIsItsOwnOrACopysOrPlanted() throws {
        try KeyBinding.prepareToSign(replica: receiver, key: receiverKey)
        func own(seq: Int64, signer: HandKey) -> HandBundle {
            var own = HandBundle(
                sites: [HandSite(id: r.replicaID, name: "r", knowledge: seq)], senderSeq: seq, senderHLC: now, signer: signer)
            own.identities = [(0, r.identity)]
            return own
        }
        guard case .ownBundle = try bundleVerdictWritesNothing(own(seq: 0, signer: r)) else { return XCTFail("its own bundle") }
        XCTAssertTrue(refusal(try bundleVerdictWritesNothing(own(seq: 5, signer: r)))?.contains("another copy of this database") == true)
        XCTAssertTrue(refusal(try bundleVerdictWritesNothing(own(seq: 0, signer: m)))?.contains("not this replica's") == true)
    }

    // MARK: Each segment

    func testAnHonestSegmentIsMergedByAPlanOfItsTables() throws {
        let result = try verdicts(bundle([segment()]))
        guard case .read = result.signers.first, case .merge(let plan) = result.segments.first else {
            return XCTFail("\(result)")
        }
        XCTAssertEqual(plan.header.origin, o.replicaID)
    }

    func testASegmentSignedByAnotherKeyIsRefusedBeforeItsHeaderIsRead() throws {
        let result = try verdicts(bundle([segment(signer: m)]))
        guard case .refuse(let error) = result.signers.first else { return XCTFail("\(result)") }
        XCTAssertTrue("\(error)".contains("not that replica's key"), "\(error)")
        XCTAssertTrue(result.segments.isEmpty, "nothing of it was read")
    }

    func testARetiredOriginsSegmentIsPassedOverUnreadAndNamedWhenItReachesPast() throws {
        _ = try receiver.siteNumber(for: o.replicaID, name: "o")
        _ = try receiver.retire(peer: o.replicaID)
        let result = try verdicts(bundle([segment()]))
        guard case .refuse(let error) = result.bundle else { return XCTFail("a retired sender's bundle is refused: \(result)") }
        XCTAssertTrue("\(error)".contains("retired peer"), "\(error)")
        // Relayed by another replica, its segment is passed over unread, with a warning.
        var relayed = HandBundle(
            sites: [HandSite(id: m.replicaID, name: "m", knowledge: 0), HandSite(id: o.replicaID, name: "o", knowledge: 1)],
            senderSeq: 0, senderHLC: now, signer: m)
        relayed.identities = [(0, m.identity), (1, o.identity)]
        relayed.segments = [segment()]
        let viaRelay = try verdicts(relayed)
        guard case .retired(let warning) = viaRelay.signers.first else { return XCTFail("\(viaRelay)") }
        XCTAssertTrue(warning?.contains("after it was retired here") == true)
        XCTAssertTrue(viaRelay.segments.isEmpty)
    }

    func testASegmentClockFarAheadIsRefused() throws {
        let result = try verdicts(bundle([segment(created: now + 30 * 86_400_000)]))
        guard case .refuse(let error) = result.segments.first else { return XCTFail("\(result)") }
        XCTAssertTrue("\(error)".contains("ahead of this machine's clock"))
    }

    func testATableOrColumnThisReplicaLacksHoldsTheBundle() throws {
        let untracked = try verdicts(bundle([segment(table: ("other", ["id", "v"], [0]))]))
        guard case .hold(let reason) = untracked.segments.first else { return XCTFail("\(untracked)") }
        XCTAssertEqual(reason.kind, .tableNotTracked("other"))
        let newColumn = try verdicts(bundle([segment(table: ("notes", ["id", "v", "w"], [0]))]))
        guard case .hold(let column) = newColumn.segments.first else { return XCTFail("\(newColumn)") }
        XCTAssertEqual(column.kind, .columnMissing(table: "notes", column: "w"))
        let otherKey = try verdicts(bundle([segment(table: ("notes", ["id", "v"], [1]))]))
        guard case .hold(let key) = otherKey.segments.first else { return XCTFail("\(otherKey)") }
        XCTAssertEqual(key.kind, .differentKey("notes"))
    }

    /// A label statement naming a column this replica lacks holds the bundle at admission,
    /// by a query prepared and never run: nothing is written (``verdicts`` checks), and the
    /// same label over a column it has is taken.
    func testALabelNamingAColumnThisReplicaLacksHoldsTheBundleAtAdmission() throws {
        trust = try AllowedSigners(text: [r.allowedSignersLine, o.allowedSignersLine, m.adminSignersLine].joined(separator: "\n") + "\n")
        func carrying(label: String) -> HandBundle {
            var carrying = bundle([segment()])
            carrying.adminStatements = [
                m.adminStatement(json: #"{"label":{"table":"notes","expression":"\#(label)"}}"#, issued: now)
            ]
            return carrying
        }
        guard case .hold(let reason) = try bundleVerdictWritesNothing(carrying(label: "region")) else {
            return XCTFail("a label over a missing column holds the bundle")
        }
        XCTAssertEqual(reason.kind, .labelNotApplicable(table: "notes"))
        XCTAssertTrue(reason.message.contains("region"), reason.message)
        let applying = try verdicts(carrying(label: "v"))
        guard case .accept = applying.bundle, case .merge = applying.segments.first else { return XCTFail("\(applying)") }
    }

    /// A statement a segment names that neither the replica holds nor the bundle carries can
    /// never come with the file: refused once (remembered as the file's own fault), not held
    /// for good (issue 55, item 4).
    func testChangesNamingAStatementTheBundleDoesNotCarryAreRefusedNotHeld() throws {
        var unknown = segment()
        unknown.adminStatements = [[UInt8](repeating: 7, count: 16)]
        let result = try verdicts(bundle([unknown]))
        guard case .refuse(let error as BundleError) = result.segments.first else { return XCTFail("\(result)") }
        XCTAssertTrue(error.concernsTheFileAlone)
        XCTAssertTrue(error.description.contains("neither this replica holds nor the bundle carries"), error.description)
    }

    /// The same segment relayed by M: the relay is not at fault, so the segment is passed over
    /// (not merged, not kept to relay) and the rest of M's bundle stands.
    func testARelayedSegmentNamingAStatementTheBundleDoesNotCarryIsPassedOver() throws {
        var unknown = segment()
        unknown.adminStatements = [[UInt8](repeating: 7, count: 16)]
        unknown.scope = ["north"]
        var relayed = HandBundle(
            sites: [HandSite(id: m.replicaID, name: "m", knowledge: 0), HandSite(id: o.replicaID, name: "o", knowledge: 1)],
            senderSeq: 0, senderHLC: now, signer: m)
        relayed.identities = [(0, m.identity), (1, o.identity)]
        relayed.segments = [unknown]
        let result = try verdicts(relayed)
        guard case .passOver = result.segments.first else { return XCTFail("neither kept to relay nor refused: \(result)") }
    }

    func testASegmentCutForAScopeWithinThisReplicasIsKeptToRelayAndAnotherPassedOver() throws {
        var within = segment()
        within.scope = ["north"]
        let result = try verdicts(bundle([within]))
        guard case .relayOnly = result.segments.first else { return XCTFail("a replica with every row relays it: \(result)") }
    }

    func testThisReplicasOwnChangesRelayedBackAreCheckedNotMerged() throws {
        try receiver.database.execute("INSERT INTO notes VALUES ('mine', 1)")
        try KeyBinding.prepareToSign(replica: receiver, key: receiverKey)
        let own = try XCTUnwrap(receiver.knowledge()[receiver.knowledgeID] as Int64?)
        var relayed = HandBundle(
            sites: [HandSite(id: m.replicaID, name: "m", knowledge: 0), HandSite(id: r.replicaID, name: "r", knowledge: own)],
            senderSeq: 0, senderHLC: now, signer: m)
        relayed.identities = [(0, m.identity), (1, r.identity)]
        var mine = segment(seq: own)
        mine.origin = r.replicaID
        mine.signer = r
        relayed.segments = [mine]
        let result = try verdicts(relayed)
        guard case .ownCheck = result.segments.first else { return XCTFail("\(result)") }
        var beyond = mine
        beyond.last = own + 5
        relayed.segments = [beyond]
        let copied = try verdicts(relayed)
        guard case .signedAsThisReplica(let message) = copied.segments.first else { return XCTFail("\(copied)") }
        for words in ["another key or copy signed changes as this replica", "sqsync reidentify", "sqsync peers retire", "new key"] {
            XCTAssertTrue(message.contains(words), "\(words): \(message)")
        }
    }
}
