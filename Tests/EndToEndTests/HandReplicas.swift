import Foundation
import TestSupport
import XCTest

// Replicas whose knowledge IDs are made from keys the test holds (``HandKey``), so that it can
// write their bundles by hand: for the attacks of OriginSignatureTests and MailboxAttackTests.

extension Harness {
    /// A key written where `--key` for `name` finds it, trusted unless `trusted` is false.
    func handKey(_ name: String, trusted: Bool = true) throws -> HandKey {
        let key = HandKey(name)
        try key.write(to: keyPath(name))
        if trusted { try trust(key.allowedSignersLine) }
        return key
    }

    /// Adds a line to the harness's allowed_signers.
    func trust(_ line: String) throws {
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: trustFile))
        handle.seekToEndOfFile()
        handle.write(Data((line + "\n").utf8))
        try handle.close()
    }

    /// `<name>.db` for each name, the first made with `schema` and every table tracked, the
    /// others cloned from it; each with a trusted hand key its knowledge ID is made from.
    func keyBoundReplicas(_ names: [String], schema: String) throws -> [String: HandKey] {
        var keys: [String: HandKey] = [:]
        for name in names { keys[name] = try handKey(name) }
        let first = path("\(names[0]).db")
        try sqlite(first, schema)
        try ok(["init", first, "--name", names[0]], key: names[0])
        try ok(["track", first, "--all"])
        for name in names.dropFirst() { try ok(["clone", first, path("\(name).db"), "--name", name], key: name) }
        for name in names { keys[name]!.birth = try birth(of: path("\(name).db")) }
        return keys
    }

    /// A replica's birth, as its own key chain records it (empty for an ID made from the key alone).
    func birth(of db: String) throws -> [UInt8] {
        let hex = try sqlite(
            db,
            #"SELECT hex(k."birth") FROM "_sqsync_keys" k JOIN "_sqsync_replica" r ON r."site" = k."site" WHERE k."birth" IS NOT NULL;"#
        ).trimmingCharacters(in: .whitespacesAndNewlines)
        return stride(from: 0, to: hex.count, by: 2).map { offset in
            let start = hex.index(hex.startIndex, offsetBy: offset)
            return UInt8(hex[start..<hex.index(start, offsetBy: 2)], radix: 16)!
        }
    }

    /// A replica's own sequence number and clock, once its pending writes are numbered.
    func clock(_ db: String) throws -> (seq: Int64, hlc: Int64) {
        try ok(["status", db])
        let fields = try sqlite(db, #"SELECT "seq", "hlc" FROM "_sqsync_replica";"#)
            .trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "|")
        return (Int64(fields[0])!, Int64(fields[1])!)
    }
}
