import ChangeLog
import Foundation
import SQLiteDatabase
import TestSupport
import XCTest

@testable import Bundle

/// What a relay keeps of one origin (docs/BUNDLE_FORMAT.md, "What a relay keeps"): the fewest
/// segments that cover what any kept one covered, the newest of equal ranges, a checkpoint in
/// place of everything it covers; and what it sends a receiver that holds some of them.
final class SegmentStoreTests: XCTestCase {
    private func segment(_ id: Int64, _ base: Int64, _ last: Int64, created: Int64 = 0) -> SegmentStore.Stored {
        SegmentStore.Stored(rowid: id, origin: "o", base: base, last: last, createdHLC: created, records: 0, length: 0, scope: nil)
    }

    private func ranges(_ segments: [SegmentStore.Stored]) -> [String] { segments.map { "\($0.base)-\($0.last)" } }

    func testTheCoverKeepsTheFewestThatCoverEverything() {
        let kept = [segment(1, 0, 5), segment(2, 5, 10), segment(3, 3, 8), segment(4, 10, 12), segment(5, 8, 12)]
        XCTAssertEqual(ranges(SegmentStore.cover(of: kept, after: -1)), ["0-5", "5-10", "10-12"])
        // A checkpoint covers every older one.
        XCTAssertEqual(ranges(SegmentStore.cover(of: kept + [segment(6, 0, 12)], after: -1)), ["0-12"])
        // Past a gap, the longest that starts there.
        XCTAssertEqual(ranges(SegmentStore.cover(of: [segment(1, 0, 4), segment(2, 6, 7), segment(3, 6, 9)], after: -1)), ["0-4", "6-9"])
        // Of equal ranges, the newest.
        XCTAssertEqual(SegmentStore.cover(of: [segment(1, 0, 4, created: 5), segment(2, 0, 4, created: 9)], after: -1).map(\.rowid), [2])
    }

    func testAReceiverGetsTheFewestThatCarryWhatItLacks() {
        let kept = [segment(1, 0, 5), segment(2, 5, 10), segment(3, 10, 12)]
        XCTAssertEqual(ranges(SegmentStore.cover(of: kept, after: 7)), ["5-10", "10-12"])
        XCTAssertEqual(ranges(SegmentStore.cover(of: kept, after: 10)), ["10-12"])
        XCTAssertEqual(ranges(SegmentStore.cover(of: kept, after: 12)), [])
        // One beyond a gap the receiver has goes too: it keeps it until the gap is filled.
        XCTAssertEqual(ranges(SegmentStore.cover(of: [segment(1, 0, 2), segment(2, 6, 9)], after: 2)), ["6-9"])
    }

    func testWhatAReplicaCanServeStopsAtItsFirstGap() throws {
        XCTAssertEqual(try SegmentStore.reach(of: [segment(1, 0, 5), segment(2, 5, 10)], scope: nil), 10)
        XCTAssertEqual(try SegmentStore.reach(of: [segment(1, 0, 5), segment(2, 7, 10)], scope: nil), 5)
        XCTAssertEqual(try SegmentStore.reach(of: [segment(2, 7, 10)], scope: nil), 0, "a clone keeps none of its source's")
        XCTAssertEqual(try SegmentStore.reach(of: [segment(1, 0, 5)], scope: ["north"]), 0, "segments of another scope serve nothing")
    }

    /// `body` with the store of a new replica, in a folder of its own, and an origin's ID.
    private func withStore(_ body: (SegmentStore, String) throws -> Void) throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("sqsync-store-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let replica = try Replica.initialize(path: folder + "/r.db", name: "r").replica
        let store = try SegmentStore(replica)
        let origin = "0b5e0000-0000-4000-8000-000000000001"
        try body(store, origin)
    }

    func testKeepingDropsWhatACheckpointCovers() throws {
        try withStore { store, origin in
            func keep(_ base: Int64, _ last: Int64, created: Int64, bytes: Int = 10) throws {
                try store.keep(origin: origin, base: base, last: last, createdHLC: created, records: 1, length: bytes) {
                    try $0([UInt8](repeating: UInt8(last), count: bytes))
                }
            }
            try keep(0, 5, created: 1)
            try keep(5, 9, created: 2)
            try keep(9, 12, created: 3)
            XCTAssertEqual(ranges(try store.segments(of: origin)), ["0-5", "5-9", "9-12"])
            try keep(0, 12, created: 4, bytes: 20)
            XCTAssertEqual(ranges(try store.segments(of: origin)), ["0-12"], "a checkpoint replaces what it covers")
            try keep(0, 12, created: 3)
            XCTAssertEqual(try store.segments(of: origin).map(\.createdHLC), [4], "an older one of the same range is not kept")
            try keep(12, 15, created: 5)
            XCTAssertEqual(ranges(try store.segments(of: origin)), ["0-12", "12-15"])
            XCTAssertEqual(try store.keptBytes(), 30)
            // Past a gap, a few: not every one a stolen key could sign far ahead.
            for start in stride(from: Int64(100), to: 140, by: 2) { try keep(start, start + 1, created: 6) }
            let kept = try store.segments(of: origin)
            XCTAssertEqual(kept.count, 2 + SegmentStore.keptBeyondAGap)
            XCTAssertEqual(kept.last?.base, 100 + 2 * Int64(SegmentStore.keptBeyondAGap - 1), "the lowest are kept")
        }
    }

    /// Two segments of one origin covering a number in common name the same admin statements,
    /// unless two files signed them: a segment newly kept that names others than a kept one it
    /// overlaps reports the first number they share, once. Segments that only meet at an end,
    /// name the same statements (a cut for another scope), come again, or were kept before
    /// statements were recorded (NULL) report nothing.
    func testASegmentNamingOtherStatementsThanAKeptOneItOverlapsIsReported() throws {
        try withStore { store, origin in
            let word: [[UInt8]] = [[1, 2], [3, 4]], none: [[UInt8]] = []
            var reported: [Int64] = []
            func keep(_ base: Int64, _ last: Int64, _ statements: [[UInt8]]?, scope: [String]? = nil, created: Int64 = 1) throws {
                try store.keep(
                    origin: origin, base: base, last: last, createdHLC: created, records: 1, length: 4, scope: scope,
                    statements: statements, namedOtherwise: { reported.append($0) }
                ) { try $0([0, 0, 0, 0]) }
            }
            try keep(0, 3, nil)
            try keep(2, 5, none, scope: ["north"])
            XCTAssertEqual(reported, [], "a segment kept before statements were recorded says nothing")
            try keep(5, 8, word)
            try keep(5, 8, word.reversed(), scope: ["south"])
            try keep(8, 9, none, scope: ["north"])
            XCTAssertEqual(reported, [], "an epoch's cuts name its statements in any order; segments that meet at an end share no number")
            try keep(4, 7, none, scope: ["south"])
            XCTAssertEqual(reported, [6], "(4, 7] names none, (5, 8] its word: they share 6 and 7")
            try keep(4, 7, none, scope: ["south"])
            XCTAssertEqual(reported, [6], "the same segment again reports nothing more")
        }
    }
}
