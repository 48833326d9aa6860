import Foundation
import XCTest

/// docs/ARCHITECTURE.md is the map a newcomer reads first: these tests fail when the code
/// grows a table or a folder the map does not show.
final class ArchitectureMapTests: XCTestCase {
    private let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    private func architecture() throws -> String {
        try String(contentsOf: root.appendingPathComponent("docs/ARCHITECTURE.md"), encoding: .utf8)
    }

    /// Every `_sqsync_*` table any source file creates (a migration's rebuild, `_sqsync_log_8`
    /// renamed to `_sqsync_log`, counts as the table it becomes), named in backquotes.
    func testEveryTableSqsyncCreatesIsNamed() throws {
        let creation = try NSRegularExpression(
            pattern: #"CREATE\s+(?:TEMP\s+|TEMPORARY\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?"?(_sqsync_[a-z0-9_]+)"#)
        var tables: Set<String> = []
        let sources = root.appendingPathComponent("Sources")
        let files = FileManager.default.enumerator(atPath: sources.path)?.compactMap { $0 as? String } ?? []
        for file in files where file.hasSuffix(".swift") {
            let text = try String(contentsOf: sources.appendingPathComponent(file), encoding: .utf8)
            for match in creation.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
                guard let range = Range(match.range(at: 1), in: text) else { continue }
                tables.insert(String(text[range]).replacingOccurrences(of: #"_[0-9]+$"#, with: "", options: .regularExpression))
            }
        }
        XCTAssertGreaterThan(tables.count, 30, "the scan found the tables: \(tables.sorted())")
        let map = try architecture()
        let missing = tables.filter { !map.contains("`\($0)`") }.sorted()
        XCTAssertEqual(missing, [], "tables docs/ARCHITECTURE.md does not name")
    }

    /// Every module folder and every folder inside one, as `Sources/<Module>/<Folder>/`.
    func testEveryModuleFolderIsListed() throws {
        let sources = root.appendingPathComponent("Sources")
        let manager = FileManager.default
        var folders: [String] = []
        for module in try manager.contentsOfDirectory(atPath: sources.path) {
            var isFolder: ObjCBool = false
            guard manager.fileExists(atPath: sources.appendingPathComponent(module).path, isDirectory: &isFolder), isFolder.boolValue
            else { continue }
            folders.append("Sources/\(module)/")
            for inner in try manager.contentsOfDirectory(atPath: sources.appendingPathComponent(module).path) {
                let path = sources.appendingPathComponent(module).appendingPathComponent(inner).path
                if manager.fileExists(atPath: path, isDirectory: &isFolder), isFolder.boolValue {
                    folders.append("Sources/\(module)/\(inner)/")
                }
            }
        }
        XCTAssertTrue(folders.contains("Sources/Transport/Mailbox/"), "\(folders)")
        let map = try architecture()
        XCTAssertEqual(folders.filter { !map.contains("`\($0)`") }.sorted(), [], "folders docs/ARCHITECTURE.md does not list")
    }
}
