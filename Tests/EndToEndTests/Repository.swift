import Foundation

/// The source tree these tests were built from: the Makefile, README.md and scripts they check.
enum Repository {
    static let root: String = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().standardized.path

    static func path(_ relative: String) -> String { root + "/" + relative }

    /// The version written in Sources/sqsync/Version.swift, the one place it is defined.
    static var version: String {
        let source = (try? String(contentsOfFile: path("Sources/sqsync/Version.swift"), encoding: .utf8)) ?? ""
        guard let line = source.split(separator: "\n").first(where: { $0.hasPrefix("let sqsyncVersion = ") }) else {
            return "?"
        }
        return line.split(separator: "\"").dropFirst().first.map(String.init) ?? "?"
    }

    /// Runs `make TARGET...` in the repository, as a user would. Make variables a parent `make test`
    /// exported are cleared, so the child reads only the Makefile and its arguments.
    static func make(_ arguments: [String]) throws -> ProcessResult {
        try Harness.run(
            "/usr/bin/make", ["-C", root, "--no-print-directory"] + arguments,
            environment: ["MAKEFLAGS": "", "MFLAGS": "", "MAKELEVEL": ""])
    }

    /// The fenced ```sh blocks of a Markdown text from the heading that starts with `heading` up to
    /// the next heading of the same level, each as the literal text between its fences.
    static func shellBlocks(in markdown: String, underHeading heading: String) -> [String] {
        let level = heading.prefix(while: { $0 == "#" }) + " "
        var blocks: [String] = []
        var inSection = false
        var current: [Substring]?
        for line in markdown.split(separator: "\n", omittingEmptySubsequences: false) {
            if var lines = current {
                if line.hasPrefix("```") {
                    blocks.append(lines.joined(separator: "\n") + "\n")
                    current = nil
                } else {
                    lines.append(line)
                    current = lines
                }
                continue
            }
            if line.hasPrefix(level) { inSection = line.hasPrefix(heading) }
            if inSection, line == "```sh" { current = [] }
        }
        return blocks
    }
}
