import Foundation
import XCTest

/// scripts/test-summary.sh, which writes the line CI reads at the end of `make test`, fed with
/// XCTest logs shaped like the real thing.
final class TestSummaryTests: XCTestCase {
    private func summarize(_ log: String, status: Int32 = 0) throws -> ProcessResult {
        let harness = try Harness()
        let file = harness.path("xctest.log")
        try log.write(toFile: file, atomically: true, encoding: .utf8)
        return try Harness.run("/bin/bash", [Repository.path("scripts/test-summary.sh"), file, String(status)])
    }

    private func testCase(_ name: String, _ verdict: String) -> String {
        "Test Case '\(name)' started at 2026-11-23 02:00:00.000\nTest Case '\(name)' \(verdict) (0.010 seconds)\n"
    }

    /// The run the issue describes: XCTest's last "Executed" line is one suite's, or speaks of the
    /// skipped test only; every test of the run is counted and the skipped one is named.
    func testCountsEveryTestOfTheRunAndNamesTheSkippedOne() throws {
        var log = "Test Suite 'All tests' started at 2026-11-23 02:00:00.000\n"
        for index in 1...160 { log += testCase("CaptureTests.test\(index)", "passed") }
        log += "/src/Tests/X.swift:9: CLITests.testNeedsSshd : Test skipped - sshd missing\n"
        log += testCase("CLITests.testNeedsSshd", "skipped")
        log += "Test Suite 'All tests' passed at 2026-11-23 02:01:00.000\n"
        log += "\t Executed 161 tests, with 1 test skipped and 0 failures (0 unexpected) in 60.0 (60.1) seconds\n"
        let result = try summarize(log)
        XCTAssertEqual(result.status, 0, result.stdout)
        let lines = result.stdout.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.last, "160 passed, 0 failed, 1 skipped")
        XCTAssertEqual(lines.dropLast(), ["skipped: CLITests.testNeedsSshd (sshd missing)"])
    }

    func testAFailedTestAndACrashedTestFailTheRun() throws {
        let log =
            testCase("A.testGood", "passed") + testCase("A.testBad", "failed")
            + "Test Case 'B.testCrashes' started at 2026-11-23 02:00:00.000\n"
        let result = try summarize(log, status: 1)
        XCTAssertEqual(result.status, 1)
        let lines = result.stdout.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.last, "1 passed, 2 failed, 0 skipped")
        XCTAssertTrue(lines.contains("failed: A.testBad"), result.stdout)
        XCTAssertTrue(lines.contains { $0.hasPrefix("failed: B.testCrashes ") }, result.stdout)
    }

    /// A non-zero `swift test` with every named test passed (a crash between tests, a build
    /// failure) still fails, and an empty run is not a success.
    func testAFailedRunWithoutAFailingTestOrWithNoTestFails() throws {
        let crashed = try summarize(testCase("A.testGood", "passed"), status: 134)
        XCTAssertEqual(crashed.status, 1)
        XCTAssertEqual(crashed.stdout.split(separator: "\n").last, "1 passed, 1 failed, 0 skipped")

        let empty = try summarize("", status: 0)
        XCTAssertEqual(empty.status, 1)
        XCTAssertEqual(empty.stdout.split(separator: "\n").last, "0 passed, 1 failed, 0 skipped")
    }
}
