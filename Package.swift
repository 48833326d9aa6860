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
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
    ],
    targets: [
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CSSH", pkgConfig: "libssh", providers: [.apt(["libssh-dev"])]),
        .systemLibrary(name: "CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"])]),
        .target(name: "ChangeLog", dependencies: ["CSQLite"]),
        .target(
            name: "Bundle",
            dependencies: ["ChangeLog", "CZlib", .product(name: "Crypto", package: "swift-crypto")]),
        .target(name: "Transport", dependencies: ["CSSH", "Bundle"]),
        .executableTarget(
            name: "sqsync",
            dependencies: [
                "ChangeLog", "Bundle", "Transport", "CSQLite",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]),
        .executableTarget(
            name: "sqsync-bench", dependencies: ["ChangeLog", "Bundle", "Transport", "CSQLite"], path: "Benchmarks/sqsync-bench"),
        .target(name: "TestSupport", path: "Tests/TestSupport"),
        .testTarget(name: "ChangeLogTests", dependencies: ["ChangeLog", "CSQLite", "TestSupport"]),
        .testTarget(name: "BundleTests", dependencies: ["Bundle", "ChangeLog"]),
        .testTarget(name: "TransportTests", dependencies: ["Transport", "Bundle", "ChangeLog", "TestSupport"]),
        .testTarget(name: "EndToEndTests", dependencies: ["sqsync", "ChangeLog", "TestSupport"]),
    ]
)
