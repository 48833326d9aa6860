import Foundation
import XCTest

/// The README is the first thing a new user runs: its commands are run here exactly as printed.
final class ReadmeTests: XCTestCase {
    /// The quickstart and USB walkthrough blocks, read from README.md, exactly as printed, in an
    /// empty home folder with the built `sqsync` first on PATH (the walkthrough makes its own
    /// folder for the stick).
    func testQuickstartAndUSBWalkthroughRunAsPrintedInAnEmptyHome() throws {
        let readme = try String(contentsOfFile: Repository.path("README.md"), encoding: .utf8)
        let blocks = Repository.shellBlocks(in: readme, underHeading: "## Quickstart")
        XCTAssertGreaterThanOrEqual(blocks.count, 2, "README.md lost its quickstart blocks")
        XCTAssertTrue(blocks.contains { $0.contains("sqsync sync") && $0.contains("mkdir -p stick") }, "no USB walkthrough")

        let harness = try Harness()
        let home = harness.path("home"), work = harness.path("work")
        for folder in [home, work] {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        }
        let binaries = URL(fileURLWithPath: Harness.binary).deletingLastPathComponent().path
        for block in blocks {
            let script = block
            let result = try Harness.run(
                "/usr/bin/env",
                ["-i", "HOME=\(home)", "PATH=\(binaries):/usr/bin:/bin", "/bin/bash", "-euo", "pipefail", "-c", script],
                currentDirectory: work)
            XCTAssertEqual(result.status, 0, "README block failed:\n\(block)\nstderr:\n\(result.stderr)")
        }

        // What the README says the walkthrough ends with: both sites hold HQ's new row and the field's edit.
        let expected = "'s1'|'North well'|4\n's2'|'Depot'|0\n"
        XCTAssertEqual(try harness.dump(work + "/hq.db", table: "sites", orderBy: "id"), expected)
        XCTAssertEqual(try harness.dump(work + "/field.db", table: "sites", orderBy: "id"), expected)
        let signers = try String(contentsOfFile: home + "/.config/sqsync/allowed_signers", encoding: .utf8)
        XCTAssertEqual(signers.split(separator: "\n").map { $0.split(separator: " ")[0] }, ["hq", "field"])
    }

    /// `keygen --trust-self` twice into the same file, with the file's folder missing at first and a
    /// last line without a newline in between: one line per key, each on its own line.
    func testKeygenTrustSelfCreatesTheFileAndAppendsOneLinePerKey() throws {
        let harness = try Harness()
        let trust = harness.path("new/folder/allowed_signers")
        let first = try Harness.run(
            Harness.binary, ["keygen", "--out", harness.path("a.key"), "--name", "a", "--trust-self", "--trust", trust])
        XCTAssertEqual(first.status, 0, first.stderr)
        XCTAssertTrue(first.stderr.contains(trust), first.stderr)
        let handle = try XCTUnwrap(FileHandle(forWritingAtPath: trust))
        handle.seekToEndOfFile()
        handle.write(Data("# kept".utf8))
        try handle.close()
        let second = try Harness.run(
            Harness.binary,
            ["keygen", "--out", harness.path("b.key"), "--name", "b", "--trust-self", "--trust", trust, "--json"])
        XCTAssertEqual(second.status, 0, second.stderr)
        XCTAssertEqual(harness.json(second)["trusted_in"] as? String, trust)

        let lines = try String(contentsOfFile: trust, encoding: .utf8).split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, 3, lines.joined(separator: "\n"))
        XCTAssertEqual(lines[0], first.stdout.trimmingCharacters(in: .newlines))
        XCTAssertEqual(lines[1], "# kept")
        XCTAssertTrue(lines[2].hasPrefix("b namespaces=\"sqsync\" ssh-ed25519 "), lines[2])

        // Both keys sign bundles the file now trusts.
        let db = harness.path("t.db")
        try harness.sqlite(db, "CREATE TABLE t (id TEXT PRIMARY KEY, v TEXT); INSERT INTO t VALUES ('x', 'y');")
        XCTAssertEqual(try Harness.run(Harness.binary, ["init", db]).status, 0)
        XCTAssertEqual(try Harness.run(Harness.binary, ["track", db, "--all"]).status, 0)
        let bundle = harness.path("x.sqsb")
        let export = try Harness.run(Harness.binary, ["export", db, "-o", bundle, "--key", harness.path("b.key")])
        XCTAssertEqual(export.status, 0, export.stderr)
        let inspect = try Harness.run(Harness.binary, ["inspect", bundle, "--trust", trust, "--json"])
        XCTAssertEqual(inspect.status, 0, inspect.stderr)
        XCTAssertEqual(harness.json(inspect)["verification"] as? String, "good signature by b")
    }

    /// README.md stands alone: every link in it, and in docs/, names a file or folder in the repository.
    func testReadmeAndDocsLinkOnlyToFilesInTheRepository() throws {
        let link = try NSRegularExpression(pattern: #"\]\(([^)\s]+)\)"#)
        var files = ["README.md"]
        files += try FileManager.default.contentsOfDirectory(atPath: Repository.path("docs"))
            .filter { $0.hasSuffix(".md") }.map { "docs/" + $0 }
        var checked = 0
        for file in files {
            let text = try String(contentsOfFile: Repository.path(file), encoding: .utf8)
            let folder = URL(fileURLWithPath: Repository.path(file)).deletingLastPathComponent()
            for match in link.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
                let target = String(text[Range(match.range(at: 1), in: text)!])
                if target.hasPrefix("http://") || target.hasPrefix("https://") || target.hasPrefix("#") { continue }
                let relative = String(target.split(separator: "#", maxSplits: 1)[0])
                let resolved = folder.appendingPathComponent(relative).standardized.path
                XCTAssertTrue(resolved.hasPrefix(Repository.root + "/"), "\(file): \(target) leaves the repository")
                XCTAssertTrue(FileManager.default.fileExists(atPath: resolved), "\(file): \(target) does not exist")
                checked += 1
            }
        }
        XCTAssertGreaterThan(checked, 3, "no links found: the pattern is broken")
        let readme = try String(contentsOfFile: Repository.path("README.md"), encoding: .utf8)
        // A newcomer reads it whole: what does not fit goes to docs/.
        XCTAssertLessThanOrEqual(readme.split(separator: "\n", omittingEmptySubsequences: false).count, 251, "README.md over 250 lines")
        for outside in ["SPEC", "../"] {
            XCTAssertFalse(readme.contains(outside), "README.md points outside the repository: \(outside)")
        }
    }
}
