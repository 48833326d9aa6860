import Foundation
import TestSupport

@testable import Bundle
@testable import ChangeLog

/// Replicas made as `sqsync init` and `clone --key` make them, for tests that exchange real
/// bundle files: the first, whose key is an admin's, made from `schema` and tracking `tables`;
/// the others its clones, each with the knowledge ID of a key of its own; one allowed_signers
/// trusting every key. Its folder holds the databases, the keys and `bundles/`.
struct ReplicaFamily {
    let directory: String
    var replicas: [String: Replica] = [:]
    var keys: [String: SigningKey] = [:]
    let trust: AllowedSigners

    init(_ names: [String], schema: String, tables: [String], folder: String) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("\(folder)-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory + "/bundles", withIntermediateDirectories: true)
        let hands = names.map { HandKey($0) }
        for hand in hands {
            try hand.write(to: directory + "/\(hand.name).key")
            keys[hand.name] = try SigningKey.load(path: directory + "/\(hand.name).key")
        }
        trust = try AllowedSigners(
            text: ([hands[0].adminSignersLine] + hands.dropFirst().map(\.allowedSignersLine)).joined(separator: "\n") + "\n")
        let first = try Replica.initialize(
            path: directory + "/\(names[0]).db", name: names[0], knowledgeID: ReplicaIdentity.knowledgeID(for: keys[names[0]]!.publicKey)
        ).replica
        try first.database.execute(schema)
        try first.track(tables, allowIntegerPrimaryKey: false)
        replicas[names[0]] = first
        for name in names.dropFirst() {
            replicas[name] = try first.clone(
                to: directory + "/\(name).db", name: name, knowledgeID: ReplicaIdentity.knowledgeID(for: keys[name]!.publicKey))
        }
    }

    func removeFiles() { try? FileManager.default.removeItem(atPath: directory) }
}
