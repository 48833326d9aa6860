// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "sqsync",
    platforms: [.macOS(.v13)],
    products: [
        .executable(name: "sqsync", targets: ["sqsync"]),
        .library(name: "ChangeLog", targets: ["ChangeLog"]),
        .library(name: "Bundle", targets: ["Bundle"]),
        .library(name: "Transport", targets: ["Transport"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.0.0"),
    ],
    targets: [
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CSSH", pkgConfig: "libssh", providers: [.apt(["libssh-dev"])]),
        .systemLibrary(name: "CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"])]),
        // The database layer: the only module that imports CSQLite.
        .target(name: "SQLiteDatabase", dependencies: ["CSQLite"]),
        .target(name: "ChangeLog", dependencies: ["SQLiteDatabase"]),
        .target(
            name: "Bundle",
            dependencies: ["ChangeLog", "SQLiteDatabase", "CZlib", .product(name: "Crypto", package: "swift-crypto")]),
        .target(
            name: "Transport",
            dependencies: ["CSSH", "Bundle", "ChangeLog", "SQLiteDatabase", .product(name: "Crypto", package: "swift-crypto")]),
        .executableTarget(
            name: "sqsync",
            dependencies: [
                "ChangeLog", "Bundle", "Transport", "SQLiteDatabase",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]),
        // The bench drives SQLite's session extension from C, as the yardstick it measures against.
        .executableTarget(
            name: "sqsync-bench", dependencies: ["ChangeLog", "Bundle", "Transport", "SQLiteDatabase", "CSQLite", "SampleData"],
            path: "Benchmarks/sqsync-bench"),
        // Sample data made in SQL, for the tests and the bench alike (no XCTest in it).
        .target(name: "SampleData", path: "Tests/SampleData"),
        .target(
            name: "TestSupport", dependencies: ["SQLiteDatabase", "Bundle", .product(name: "Crypto", package: "swift-crypto")],
            path: "Tests/TestSupport"),
        .testTarget(name: "SQLiteDatabaseTests", dependencies: ["SQLiteDatabase", "CSQLite"]),
        .testTarget(name: "ChangeLogTests", dependencies: ["ChangeLog", "SQLiteDatabase", "TestSupport"]),
        .testTarget(
            name: "BundleTests",
            dependencies: [
                "Bundle", "ChangeLog", "SQLiteDatabase", "TestSupport", .product(name: "Crypto", package: "swift-crypto"),
            ]),
        .testTarget(
            name: "TransportTests",
            dependencies: ["Transport", "Bundle", "ChangeLog", "SQLiteDatabase", "TestSupport"]),
        .testTarget(name: "EndToEndTests", dependencies: ["sqsync", "Bundle", "SQLiteDatabase", "TestSupport", "SampleData"]),
    ]
)
