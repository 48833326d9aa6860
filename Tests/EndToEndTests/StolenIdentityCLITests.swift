import Foundation
import TestSupport
import XCTest

/// A key in other hands, or a copy of the file, signs changes as replica S1; a relay carries
/// them with everything else (issue 54, case 3). S1 refuses those changes alone, takes the
/// rest, and says so, with both fixes and exit 3, on every sync until the operator acts.
final class StolenIdentityCLITests: XCTestCase {
    private var h: Harness!
    private var hq = "", s1 = "", relay = ""

    private static let schema = """
        CREATE TABLE t(id TEXT PRIMARY KEY, v TEXT);
        INSERT INTO t VALUES ('1', 'one');
        """

    override func setUpWithError() throws {
        h = try Harness()
        hq = try h.makeReplica("HQ", schema: Self.schema)
        s1 = try h.cloneReplica(hq, as: "S1")
        relay = try h.cloneReplica(hq, as: "R")
    }

    override func tearDown() { h = nil }

    private func value(_ db: String, _ id: String) throws -> String {
        try h.sqlite(db, "SELECT coalesce((SELECT v FROM t WHERE id = '\(id)'), '-');").trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// S1, HQ and the thief each meet only the relay, in its own folder; the thief is a copy of
    /// S1's file with S1's key (`cp`, then `sqsync init` takes it as moved: the README's own
    /// commands). The relay's bundle carries the thief's change and HQ's together. Tried with
    /// the thief's change reaching the relay before HQ's and after.
    func testChangesSignedAsThisReplicaAreRefusedAloneAndSaidEveryRun() throws {
        for thiefFirst in [true, false] {
            try setUpWithError()
            let boxS = try h.folder("box-s1"), boxH = try h.folder("box-hq"), boxT = try h.folder("box-thief")
            for (db, name, box) in [(s1, "S1", boxS), (hq, "HQ", boxH), (relay, "R", boxS), (relay, "R", boxH), (s1, "S1", boxS)] {
                try h.syncOK(db, as: name, box)
            }
            let thief = try h.copyTakenForMoved(s1, to: "thief-\(thiefFirst).db")
            try h.sqlite(thief, "INSERT INTO t VALUES ('t', 'thief'); UPDATE t SET v = 'stolen' WHERE id = '1';")
            try h.sqlite(hq, "INSERT INTO t VALUES ('h', 'from hq');")
            let steps: [(String, String, String)] =
                thiefFirst
                ? [(thief, "S1", boxT), (relay, "R", boxT), (hq, "HQ", boxH), (relay, "R", boxH)]
                : [(hq, "HQ", boxH), (relay, "R", boxH), (thief, "S1", boxT), (relay, "R", boxT)]
            for (db, name, box) in steps { try h.syncOK(db, as: name, box) }
            XCTAssertEqual(try value(relay, "t"), "thief", "the relay took the thief's change as S1's")
            try h.syncOK(relay, as: "R", boxS)

            for run in 1...2 {
                let result = try h.sync(s1, as: "S1", boxS)
                XCTAssertEqual(result.status, 3, "run \(run): \(result.stderr)")
                let said = result.stderrLines.filter { $0.contains("another key or copy signed changes as this replica") }
                XCTAssertEqual(said.count, 1, "run \(run), once: \(result.stderr)")
                for fix in ["sqsync reidentify", "sqsync peers retire", "allowed_signers", "conflicts \(s1) --clear"] {
                    XCTAssertTrue(said.first?.contains(fix) == true, "run \(run): \(fix): \(result.stderr)")
                }
                XCTAssertEqual(try value(s1, "h"), "from hq", "run \(run): the rest of the bundle was taken")
                XCTAssertEqual(try value(s1, "t"), "-", "run \(run): the thief's insert was not")
                XCTAssertEqual(try value(s1, "1"), "one", "run \(run): nor its update")
            }
            // The operator acts (here: the copy was found and removed) and clears the log.
            try h.ok(["conflicts", s1, "--clear"])
            let after = try h.sync(s1, as: "S1", boxS)
            XCTAssertEqual(after.status, 0, after.stderr)
            XCTAssertFalse(after.stderr.contains("signed changes as this replica"), after.stderr)
        }
    }
}
