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

    func testKeepingDropsWhatACheckpointCovers() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("sqsync-store-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let replica = try Replica.initialize(path: folder + "/r.db", name: "r").replica
        let store = try SegmentStore(replica)
        let origin = "0b5e0000-0000-4000-8000-000000000001"
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
