import Foundation
import XCTest

/// `make install` and `make deb` as a site machine gets them: the installed binary runs with no
/// Swift toolchain in sight. They package the static release build (`make dist`), so they run
/// in `make test-install` (which .ci/run runs after `make test`), not in `make test`.
final class InstallTests: XCTestCase {
    /// Libraries that only a Swift toolchain provides; none may be loaded by the installed binary.
    private static let toolchainLibraries = ["swift", "Foundation", "dispatch", "BlocksRuntime", "icu", "XCTest"]

    /// A clean environment: no LD_LIBRARY_PATH, PATH without the toolchain, an empty home.
    private func clean(_ home: String) -> [String] {
        ["-i", "PATH=/usr/bin:/bin", "HOME=\(home)"]
    }

    func testInstalledBinaryRunsWithoutTheToolchainAndBringsManPageAndCompletions() throws {
        try requireTools(["/usr/bin/make", "/usr/bin/ldd"], install: "apt-get install make libc-bin")
        let harness = try Harness()
        let root = harness.path("root"), home = harness.path("home")
        let make = try Repository.make(["install", "DESTDIR=\(root)", "PREFIX=/usr"])
        XCTAssertEqual(make.status, 0, "make install failed: \(make.stderr)")
        let binary = root + "/usr/bin/sqsync"
        // Only FoundationEssentials is linked: the full Foundation would bring ICU's data,
        // some 40 MB, onto every stick and field laptop.
        let size = (try FileManager.default.attributesOfItem(atPath: binary)[.size] as? NSNumber)?.intValue ?? 0
        XCTAssertLessThanOrEqual(size, 32 << 20, "the installed binary is \(size) bytes, over 32 MiB")

        let ldd = try Harness.run("/usr/bin/env", clean(home) + ["/usr/bin/ldd", binary])
        XCTAssertEqual(ldd.status, 0, ldd.stderr)
        XCTAssertTrue(ldd.stdout.contains("libsqlite3.so.0") && ldd.stdout.contains("libssh.so.4"), ldd.stdout)
        for line in ldd.stdout.split(separator: "\n") {
            XCTAssertFalse(line.contains("not found"), "unresolved library: \(line)")
            for library in Self.toolchainLibraries {
                XCTAssertFalse(line.localizedCaseInsensitiveContains(library), "linked from the toolchain: \(line)")
            }
        }

        let help = try Harness.run("/usr/bin/env", clean(home) + [binary, "--help"])
        XCTAssertEqual(help.status, 0, help.stderr)
        XCTAssertTrue(help.stdout.contains("USAGE: sqsync"), help.stdout)
        let version = try Harness.run("/usr/bin/env", clean(home) + [binary, "--version"])
        XCTAssertEqual(version.stdout.trimmingCharacters(in: .whitespacesAndNewlines), Repository.version)

        // Real work through FoundationEssentials, swift-crypto, SQLite: a key, a replica, a signed bundle.
        let db = harness.path("site.db")
        try harness.sqlite(db, "CREATE TABLE t (id TEXT PRIMARY KEY, v TEXT); INSERT INTO t VALUES ('a', 'é');")
        for arguments in [
            ["keygen", "--name", "site", "--trust-self"], ["init", db], ["track", db, "--all"],
            ["export", db, "-o", harness.path("b.sqsb")], ["inspect", harness.path("b.sqsb")],
        ] {
            let result = try Harness.run("/usr/bin/env", clean(home) + [binary] + arguments)
            XCTAssertEqual(result.status, 0, "installed sqsync \(arguments.joined(separator: " ")): \(result.stderr)")
        }

        let man = try installedText(root + "/usr/share/man/man1/sqsync.1")
        XCTAssertTrue(man.contains(".Dt SQSYNC 1"), "not a generated man page")
        for command in [
            "keygen", "sync", "clone", "why", "Fl -trust-self", "Fl -create", ".Sh ENVIRONMENT", "Ev SQSYNC_KEY", "Ev SQSYNC_TRUST",
            ".Sh FILES", "~/.config/sqsync/allowed_signers",
        ] {
            XCTAssertTrue(man.contains(command), "the man page does not mention \(command)")
        }
        XCTAssertTrue(try installedText(root + "/usr/share/bash-completion/completions/sqsync").contains("sqsync"))
        XCTAssertTrue(try installedText(root + "/usr/share/zsh/site-functions/_sqsync").hasPrefix("#compdef sqsync"))
        XCTAssertTrue(
            try installedText(root + "/usr/share/fish/vendor_completions.d/sqsync.fish").contains("complete -c 'sqsync'"))
        let service = try installedText(root + "/usr/share/doc/sqsync/examples/sqsync.service")
        XCTAssertTrue(service.contains("ExecStart=/usr/bin/sqsync sync "), service)
        XCTAssertTrue(try installedText(root + "/usr/share/doc/sqsync/examples/sqsync.timer").contains("[Timer]"))
    }

    func testDebCarriesTheFilesAndDependsOnItsLibraries() throws {
        try requireTools(["/usr/bin/make", "/usr/bin/dpkg-deb"], install: "apt-get install make dpkg")
        let harness = try Harness()
        let make = try Repository.make(["deb", "OUT=\(harness.directory.path)"])
        XCTAssertEqual(make.status, 0, "make deb failed: \(make.stderr)")
        let arch = try Harness.run("/usr/bin/dpkg", ["--print-architecture"]).stdout
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let deb = harness.path("sqsync_\(Repository.version)_\(arch).deb")
        XCTAssertTrue(FileManager.default.fileExists(atPath: deb), "no \(deb): \(make.stdout)")

        let listing = try Harness.run("/usr/bin/dpkg-deb", ["-c", deb])
        XCTAssertEqual(listing.status, 0, listing.stderr)
        for file in [
            "./usr/bin/sqsync", "./usr/share/man/man1/sqsync.1.gz", "./usr/share/bash-completion/completions/sqsync",
            "./usr/share/zsh/site-functions/_sqsync", "./usr/share/fish/vendor_completions.d/sqsync.fish",
            "./usr/share/doc/sqsync/examples/sqsync.service", "./usr/share/doc/sqsync/examples/sqsync.timer",
            "./usr/share/doc/sqsync/copyright",
        ] {
            let line = listing.stdout.split(separator: "\n").first { $0.hasSuffix(" " + file) }
            XCTAssertNotNil(line, "\(file) missing from the package:\n\(listing.stdout)")
            if let line { XCTAssertTrue(line.contains("root/root"), "\(file) not owned by root: \(line)") }
        }

        func field(_ name: String) throws -> String {
            try Harness.run("/usr/bin/dpkg-deb", ["-f", deb, name]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        XCTAssertEqual(try field("Package"), "sqsync")
        XCTAssertEqual(try field("Version"), Repository.version)
        XCTAssertEqual(try field("Architecture"), arch)
        let depends = Set(try field("Depends").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
        XCTAssertTrue(depends.isSuperset(of: ["libc6", "libsqlite3-0", "libssh-4"]), "Depends: \(depends)")
        XCTAssertFalse(depends.contains { $0.contains("swift") }, "Depends: \(depends)")

        // What is inside runs on its own too.
        let extracted = harness.path("x")
        XCTAssertEqual(try Harness.run("/usr/bin/dpkg-deb", ["-x", deb, extracted]).status, 0)
        let version = try Harness.run("/usr/bin/env", clean(harness.path("home")) + [extracted + "/usr/bin/sqsync", "--version"])
        XCTAssertEqual(version.stdout.trimmingCharacters(in: .whitespacesAndNewlines), Repository.version, version.stderr)
    }

    /// The tarball README tells a site to unpack into /usr/local holds the same files, laid out for it.
    func testTarballUnpacksIntoUsrLocal() throws {
        try requireTools(["/usr/bin/make", "/usr/bin/tar"], install: "apt-get install make tar")
        let harness = try Harness()
        let make = try Repository.make(["tarball", "OUT=\(harness.directory.path)"])
        XCTAssertEqual(make.status, 0, "make tarball failed: \(make.stderr)")
        let arch = try Harness.run("/usr/bin/dpkg", ["--print-architecture"]).stdout
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let tarball = harness.path("sqsync-\(Repository.version)-linux-\(arch).tar.gz")
        let local = harness.path("usr/local")
        try FileManager.default.createDirectory(atPath: local, withIntermediateDirectories: true)
        let untar = try Harness.run("/usr/bin/tar", ["-xzf", tarball, "-C", local])
        XCTAssertEqual(untar.status, 0, untar.stderr)
        for file in [
            "bin/sqsync", "share/man/man1/sqsync.1", "share/bash-completion/completions/sqsync",
            "share/zsh/site-functions/_sqsync", "share/fish/vendor_completions.d/sqsync.fish",
        ] {
            XCTAssertFalse(try installedText(local + "/" + file, binary: file.hasPrefix("bin/")).isEmpty)
        }
        let service = try installedText(local + "/share/doc/sqsync/examples/sqsync.service")
        XCTAssertTrue(service.contains("ExecStart=/usr/local/bin/sqsync sync "), service)
        let version = try Harness.run("/usr/bin/env", clean(harness.path("home")) + [local + "/bin/sqsync", "--version"])
        XCTAssertEqual(version.stdout.trimmingCharacters(in: .whitespacesAndNewlines), Repository.version, version.stderr)
    }

    /// README's install lines name the package and tarball this version builds.
    func testReadmeInstallLinesNameThisVersion() throws {
        let readme = try String(contentsOfFile: Repository.path("README.md"), encoding: .utf8)
        let version = Repository.version
        XCTAssertTrue(readme.contains("sqsync_\(version)_amd64.deb"), "README names another .deb than \(version)")
        XCTAssertTrue(readme.contains("sqsync-\(version)-linux-amd64.tar.gz"), "README names another tarball")
    }

    /// A file's text (or, for a binary, its bytes as Latin-1), failing the test when it is empty.
    private func installedText(
        _ path: String, binary: Bool = false, file: StaticString = #filePath, line: UInt = #line
    ) throws -> String {
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        XCTAssertFalse(data.isEmpty, "\(path) is empty", file: file, line: line)
        if binary { return String(decoding: data.prefix(4), as: UTF8.self) }
        return String(decoding: data, as: UTF8.self)
    }
}
