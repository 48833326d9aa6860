import XCTest

@testable import ChangeLog

/// Where two files writing under one origin's identity part (``OriginNumbering``): one
/// history numbers its changes with rising clocks, so a number with two clocks, or a clock
/// later than a higher number's, shows two files, and the point where they part lies below it.
final class OriginNumberingTests: XCTestCase {
    func testStampsOfOneHistoryPutNoNumberInQuestion() {
        XCTAssertNil(OriginNumbering.firstNumberInQuestion([]))
        XCTAssertNil(OriginNumbering.firstNumberInQuestion([(3, 300), (1, 100), (2, 200), (2, 200), (5, 500)]))
        // Equal clocks under two numbers are let be (an older sqsync's migration numbered so).
        XCTAssertNil(OriginNumbering.firstNumberInQuestion([(1, 100), (2, 100), (3, 300)]))
    }

    func testANumberWithTwoClocksIsInQuestion() {
        XCTAssertEqual(OriginNumbering.firstNumberInQuestion([(1, 100), (2, 200), (2, 900), (3, 950)]), 2)
    }

    /// A file set back to its change 6 writes 7 and 8 after the other wrote 8 and 9: its 7,
    /// later than the other's 8, is the lowest number in question, below every number the two
    /// share with another clock.
    func testAClockLaterThanAHigherNumbersPutsTheLowerInQuestion() {
        let original: [(seq: Int64, hlc: Int64)] = [(6, 600), (8, 800), (9, 900)]
        let rewound: [(seq: Int64, hlc: Int64)] = [(7, 1_000), (8, 1_100)]
        XCTAssertEqual(OriginNumbering.firstNumberInQuestion(original + rewound), 7)
        XCTAssertEqual(OriginNumbering.firstNumberInQuestion(rewound + original), 7)
    }
}
