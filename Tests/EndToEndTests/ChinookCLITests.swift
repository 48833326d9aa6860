import Foundation
import XCTest

/// sqsync on a real schema: the Chinook sample (integer keys, a composite key, foreign keys
/// everywhere), copied from ../shared/data beside the repository.
final class ChinookCLITests: XCTestCase {
    static let tables = [
        "Album", "Artist", "Customer", "Employee", "Genre", "Invoice", "InvoiceLine", "MediaType", "Playlist",
        "PlaylistTrack", "Track",
    ]

    static var sample: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("shared/data/chinook.sqlite").path
    }

    func testChinookReplicasConvergeWithParentsAndChildrenInOneBundle() throws {
        guard FileManager.default.fileExists(atPath: Self.sample) else {
            if ProcessInfo.processInfo.environment["CI"] != nil { return XCTFail("missing \(Self.sample)") }
            throw XCTSkip("no Chinook sample at \(Self.sample)")
        }
        let h = try Harness()
        let a = h.path("A.db")
        try FileManager.default.copyItem(atPath: Self.sample, toPath: a)
        try h.makeKey("A")
        try h.ok(["init", a, "--name", "A"])
        let refused = try h.sqsync(["track", a, "--all"])
        XCTAssertEqual(refused.status, 1)
        XCTAssertTrue(refused.stderr.contains("--allow-integer-pk"), refused.stderr)
        let tracked = try h.okJSON(["track", a, "--all", "--allow-integer-pk"])["tracked"] as? [[String: Any]] ?? []
        XCTAssertEqual(tracked.count, Self.tables.count, "\(tracked)")
        let b = try h.cloneReplica(a, as: "B")

        // A adds an artist, an album, a track and puts it on a playlist: parents and children
        // in one bundle. B renames a track, drops a playlist entry (composite key) and edits a
        // customer. Keys are picked far apart, as --allow-integer-pk requires.
        try h.sqlite(
            a,
            """
            INSERT INTO Artist VALUES (900001, 'Sqsync Ensemble');
            INSERT INTO Album VALUES (900001, 'Offline First', 900001);
            INSERT INTO Track VALUES (900001, 'Converge', 900001, 1, 1, 'A. Replica', 215000, 4000000, 0.99);
            INSERT INTO PlaylistTrack VALUES (1, 900001);
            UPDATE Customer SET Company = 'Field Office' WHERE CustomerId = 1;
            """)
        try h.sqlite(
            b,
            """
            UPDATE Track SET Name = 'Balls to the Wall (remastered)' WHERE TrackId = 2;
            DELETE FROM PlaylistTrack WHERE PlaylistId = 1 AND TrackId = 3402;
            UPDATE Customer SET Phone = '+1 555 0100' WHERE CustomerId = 1;
            """)
        try h.send((a, "A"), to: (b, "B"))
        try h.send((b, "B"), to: (a, "A"))

        for table in Self.tables {
            XCTAssertEqual(try h.dump(a, table: table, orderBy: "1"), try h.dump(b, table: table, orderBy: "1"), table)
        }
        for db in [a, b] {
            XCTAssertEqual(
                try h.sqlite(db, "SELECT Company, Phone FROM Customer WHERE CustomerId = 1;"), "Field Office|+1 555 0100\n")
            XCTAssertEqual(
                try h.sqlite(db, "SELECT count(*) FROM PlaylistTrack WHERE TrackId IN (900001, 3402) AND PlaylistId = 1;"), "1\n")
            XCTAssertEqual(try h.sqlite(db, "PRAGMA foreign_key_check;"), "", "no orphans")
            try h.ok(["doctor", db])
        }
    }
}
