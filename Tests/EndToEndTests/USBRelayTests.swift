import Foundation
import TestSupport
import XCTest

/// USB sticks carried between disconnected sites. Each stick is a real FAT image made with
/// `mkfs.vfat` and read and written with mtools, so every name sqsync leaves on it goes through
/// a real FAT file system. Sites D, E and F: stick 1 travels D↔E, stick 2 travels E↔F, so D and F
/// only ever meet through E's relaying.
final class USBRelayTests: XCTestCase {
    private static let mkfs = "/usr/sbin/mkfs.vfat"
    private static let mcopy = "/usr/bin/mcopy"
    private static let mdir = "/usr/bin/mdir"
    private static let mdeltree = "/usr/bin/mdeltree"
    private static let mtoolsEnvironment = ["MTOOLS_SKIP_CHECK": "1"]

    private var h: Harness!
    private var d = "", e = "", f = "", reference = ""
    private var plugCount = 0

    private static let schema = """
        CREATE TABLE reading(id TEXT PRIMARY KEY, site TEXT, value REAL, raw BLOB);
        CREATE TABLE station(code TEXT PRIMARY KEY, label TEXT);
        """
    private static let seed = """
        INSERT INTO station VALUES ('D', 'depot'), ('E', 'east camp'), ('F', 'far field');
        INSERT INTO reading VALUES ('r0', 'D', 0.5, x'00');
        """

    override func setUpWithError() throws {
        try requireTools([Self.mkfs, Self.mcopy, Self.mdir, Self.mdeltree], install: "apt-get install dosfstools mtools")
        h = try Harness()
        d = try h.makeReplica("D", schema: Self.schema + Self.seed)
        e = try h.cloneReplica(d, as: "E")
        f = try h.cloneReplica(d, as: "F")
        reference = try h.makeReference("reference", schema: Self.schema + Self.seed)
    }

    override func tearDown() { h = nil }

    // MARK: - The stick

    @discardableResult
    private func mtools(
        _ tool: String, _ arguments: [String], allowFailure: Bool = false,
        file: StaticString = #filePath, line: UInt = #line
    ) throws -> ProcessResult {
        let result = try Harness.run(tool, arguments, environment: Self.mtoolsEnvironment)
        if !allowFailure {
            XCTAssertEqual(
                result.status, 0, "\(tool) \(arguments.joined(separator: " ")): \(result.stderr)", file: file, line: line)
        }
        return result
    }

    /// A fresh 8 MB FAT image.
    private func makeStick(_ name: String) throws -> String {
        let image = h.path("\(name).img")
        let result = try Harness.run(Self.mkfs, ["-C", image, "8192"])
        XCTAssertEqual(result.status, 0, "mkfs.vfat: \(result.stderr)")
        return image
    }

    /// Images whose root holds a `sqsync` folder (the tests write every image, so they know).
    private var withMailbox: Set<String> = []

    private func hasMailbox(_ image: String) -> Bool { withMailbox.contains(image) }

    /// Every path on the image, relative to its root (`mdir -/ -b`): files, and folders with a trailing `/`.
    private func listing(_ image: String) throws -> (files: [String], folders: [String]) {
        guard hasMailbox(image) else { return ([], []) }
        let result = try mtools(Self.mdir, ["-i", image, "-/", "-b", "::/sqsync"])
        var files: [String] = [], folders: [String] = []
        for raw in result.stdout.split(separator: "\n").map(String.init) where !raw.isEmpty {
            guard raw.hasPrefix("::/") else { XCTFail("unexpected mdir line: \(raw)"); continue }
            let path = String(raw.dropFirst(3))
            if path.hasSuffix("/") { folders.append(String(path.dropLast())) } else { files.append(path) }
        }
        return (files.sorted(), folders.sorted())
    }

    /// Plugging the stick in: its contents copied into a new folder.
    private func plugIn(_ image: String) throws -> String {
        plugCount += 1
        let folder = h.path("mount-\(plugCount)")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        if hasMailbox(image) {
            try mtools(Self.mcopy, ["-i", image, "-s", "-n", "::/sqsync", folder + "/"])
        }
        return folder
    }

    /// Unplugging: the stick is cleared and the folder written back, then every name is checked on the FAT side.
    private func unplug(_ image: String, _ folder: String, file: StaticString = #filePath, line: UInt = #line) throws {
        if hasMailbox(image) {
            try mtools(Self.mdeltree, ["-i", image, "::/sqsync"], file: file, line: line)
            withMailbox.remove(image)
        }
        let top = try FileManager.default.contentsOfDirectory(atPath: folder).sorted()
        XCTAssertTrue(
            top.allSatisfy { $0 == "sqsync" }, "sync left something beside sqsync/ at the stick's root: \(top)", file: file,
            line: line)
        for entry in top {
            try mtools(Self.mcopy, ["-i", image, "-s", "-n", folder + "/" + entry, "::/"], file: file, line: line)
            if entry == "sqsync" { withMailbox.insert(image) }
        }
        // Every name survived FAT unchanged (FAT refuses ':' and friends; mtools would mangle them).
        let onStick = try listing(image)
        XCTAssertEqual(
            onStick.files, filesBelow(folder).filter { $0.hasPrefix("sqsync/") }, "file names changed on the FAT stick",
            file: file, line: line)
        XCTAssertEqual(
            onStick.folders, foldersBelow(folder).filter { $0.hasPrefix("sqsync/") }, "folder names changed on the FAT stick",
            file: file, line: line)
        for name in onStick.files + onStick.folders {
            XCTAssertNil(
                name.rangeOfCharacter(from: CharacterSet(charactersIn: ":*?\"<>|\\")), "not a FAT name: \(name)", file: file,
                line: line)
        }
        try FileManager.default.removeItem(atPath: folder)
    }

    /// A site plugs the stick in, runs `sqsync sync` on it, and unplugs it.
    private func visit(
        _ site: (db: String, name: String), _ image: String, file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let folder = try plugIn(image)
        try h.syncOK(site.db, as: site.name, folder, file: file, line: line)
        try unplug(image, folder, file: file, line: line)
    }

    private func write(_ db: String, _ statements: String..., file: StaticString = #filePath, line: UInt = #line) throws {
        try h.write(db, reference: reference, statements, file: file, line: line)
    }

    private func content(_ db: String) throws -> String {
        try h.dump(db, table: "reading", orderBy: "id") + "--\n" + h.dump(db, table: "station", orderBy: "code")
    }

    /// The knowledge IDs that left acknowledgements on a stick.
    private func readers(_ image: String) throws -> Set<String> {
        Set(try listing(image).folders.filter { $0.hasPrefix("sqsync/acks/") }.map { String($0.dropFirst("sqsync/acks/".count)) })
    }

    // MARK: - Test

    func testTwoSticksRelayBetweenSitesThatNeverShareOne() throws {
        let stick1 = try makeStick("stick1"), stick2 = try makeStick("stick2")
        let D = (d, "D"), E = (e, "E"), F = (f, "F")

        // Trip 1: D's news goes to E on stick 1; E has nothing of its own yet.
        try write(d, "INSERT INTO reading VALUES ('d1', 'D', 1.25, x'd1')")
        try visit(D, stick1)
        try visit(E, stick1)
        XCTAssertEqual(try content(e), try content(reference), "E has D's reading after trip 1")

        // Trip 2: E writes and takes stick 2 to F; F gets D's reading through E.
        try write(
            e, "INSERT INTO reading VALUES ('e1', 'E', 2.5, NULL)",
            "UPDATE station SET label = 'east camp (moved)' WHERE code = 'E'")
        try visit(E, stick2)
        try visit(F, stick2)
        XCTAssertEqual(try content(f), try content(reference), "F has D's and E's data after trip 2")

        // Trip 3: F writes (an update of D's row too); back to E on stick 2, then E to D on stick 1.
        try write(f, "INSERT INTO reading VALUES ('f1', 'F', -3.0, x'ff00')", "UPDATE reading SET value = 1.5 WHERE id = 'd1'")
        try visit(F, stick2)
        try visit(E, stick2)
        try visit(E, stick1)
        try visit(D, stick1)
        XCTAssertEqual(try content(d), try content(reference), "D has F's data after trip 3, through E")

        // Trip 4: D writes and deletes; the news travels D → E → F.
        try write(d, "INSERT INTO reading VALUES ('d2', 'D', 4.0, NULL)", "DELETE FROM reading WHERE id = 'r0'")
        try visit(D, stick1)
        try visit(E, stick1)
        try visit(E, stick2)
        try visit(F, stick2)
        XCTAssertEqual(try content(f), try content(reference), "F has D's trip-4 writes, through E")

        // Trip 5: both ends write at once; both sticks reach E together, who syncs stick 1,
        // stick 2, then stick 1 again so each stick carries the other end's news back.
        try write(d, "UPDATE station SET label = 'depot 2' WHERE code = 'D'")
        try write(f, "INSERT INTO reading VALUES ('f2', 'F', 5.5, x'f2')")
        try visit(D, stick1)
        try visit(F, stick2)
        try visit(E, stick1)
        try visit(E, stick2)
        try visit(E, stick1)
        try visit(F, stick2)
        try visit(D, stick1)

        let expected = try content(reference)
        XCTAssertEqual(try content(d), expected, "D")
        XCTAssertEqual(try content(e), expected, "E")
        XCTAssertEqual(try content(f), expected, "F")
        XCTAssertEqual(try content(d), try content(f), "D and F hold the same data though they never shared a stick")

        // Neither end ever touched the other's stick: stick 1 was read by D and E only, stick 2 by E and F only.
        let (dID, eID, fID) = (try h.knowledgeID(d), try h.knowledgeID(e), try h.knowledgeID(f))
        XCTAssertEqual(try readers(stick1), [dID, eID])
        XCTAssertEqual(try readers(stick2), [eID, fID])
        for image in [stick1, stick2] {
            let bundles = try listing(image).files.filter { $0.hasSuffix(".sqsb") }
            let perOutbox = Dictionary(grouping: bundles) { ($0 as NSString).deletingLastPathComponent }
            XCTAssertTrue(perOutbox.values.allSatisfy { $0.count <= 1 }, "more than one bundle in an outbox: \(bundles)")
        }
    }

    /// Sites made apart (each with `init`, rows of its own), the sticks visited as a field
    /// network grows: E meets F before it ever meets D, and carries news both ways on every
    /// later visit. No visit is refused for a name taken, and D and F end with each other's rows.
    func testSitesMadeApartRelayWhicheverStickTheyMeetFirst() throws {
        let stick1 = try makeStick("apart1"), stick2 = try makeStick("apart2")
        let d = try h.makeReplica("D2", schema: Self.schema + "INSERT INTO station VALUES ('D', 'depot');")
        let e = try h.makeReplica("E2", schema: Self.schema)
        let f = try h.makeReplica("F2", schema: Self.schema + "INSERT INTO station VALUES ('F', 'far field');")
        let D = (d, "D2"), E = (e, "E2"), F = (f, "F2")
        try visit(E, stick2)
        try visit(F, stick2)
        try h.sqlite(d, "INSERT INTO reading VALUES ('d1', 'D', 1.0, x'01');")
        try visit(D, stick1)
        try visit(E, stick1)
        try visit(E, stick2)
        try h.sqlite(f, "INSERT INTO reading VALUES ('f1', 'F', 2.0, NULL);")
        for _ in 0..<3 {
            try visit(F, stick2)
            try visit(E, stick2)
            try visit(E, stick1)
            try visit(D, stick1)
        }
        let atD = try content(d)
        XCTAssertEqual(try content(f), atD, "D and F hold the same rows through E")
        XCTAssertEqual(try content(e), atD)
        for row in ["'d1'", "'f1'", "'depot'", "'far field'"] { XCTAssertTrue(atD.contains(row), "\(row) missing: \(atD)") }
    }
}
