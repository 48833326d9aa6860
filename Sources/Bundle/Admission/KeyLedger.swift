import ChangeLog

/// The key pins as admission sees them: those the replica recorded, plus the first keys and
/// moves this import's admission has accepted but not written. Admission reads through it and
/// adds to it; ``write()`` records what was added, the one step where admission's conclusions
/// about keys reach the database (after the verdict that needed them). Not Sendable on purpose.
final class KeyLedger {
    private let pins: KeyPins
    /// Chains read or changed so far, by knowledge ID.
    private var chains: [String: [KeyPins.ChainKey]] = [:]
    /// Owners of keys bound or moved to here and not yet written.
    private var pendingOwners: [SSHPublicKey: [(id: String, name: String, movedAway: Bool)]] = [:]
    private var pendingMoves: [KeyMove] = []
    private enum Write {
        case bindFirst(SSHPublicKey, id: String, name: String?, birth: [UInt8])
        case move(KeyMove)
    }
    private var pending: [Write] = []

    init(_ replica: Replica) throws { pins = try KeyPins(replica) }

    var hasPendingWrites: Bool { !pending.isEmpty }

    /// A replica's keys, first to current, pending changes included.
    func chain(of knowledgeID: String) throws -> [KeyPins.ChainKey] {
        if let chain = chains[knowledgeID] { return chain }
        let chain = try pins.chain(of: knowledgeID)
        chains[knowledgeID] = chain
        return chain
    }

    func currentKey(of knowledgeID: String) throws -> SSHPublicKey? {
        try chain(of: knowledgeID).last { $0.untilSeq == nil }?.key
    }

    /// The replicas `key` belongs to, recorded or accepted (``KeyPins/owners(of:)``).
    func owners(of key: SSHPublicKey) throws -> [(id: String, name: String, movedAway: Bool)] {
        var owners = try pins.owners(of: key)
        for owner in pendingOwners[key] ?? [] where !owners.contains(where: { $0.id == owner.id }) { owners.append(owner) }
        // A move accepted here ends the key at its replica.
        for move in pendingMoves where move.from == key {
            for index in owners.indices where owners[index].id == move.replica { owners[index].movedAway = true }
        }
        return owners
    }

    /// Every move held or accepted, for following trust from a moved-away key.
    func moves() throws -> [KeyMove] { try pins.moves() + pendingMoves }

    /// `trust` plus every key a recorded or accepted move leads to (``KeyBinding/trust(_:replica:)``).
    func trust(_ trust: AllowedSigners) throws -> AllowedSigners {
        trust.following(try moves().map { ($0.from, $0.to) })
    }

    /// Accepts a replica's first key (and its birth, for an ID made from both).
    func bindFirst(_ key: SSHPublicKey, to knowledgeID: String, name: String?, birth: [UInt8] = []) throws {
        var chain = try chain(of: knowledgeID)
        chain.append(KeyPins.ChainKey(key: key, afterSeq: 0, untilSeq: nil, move: nil, birth: birth))
        chains[knowledgeID] = Self.ordered(chain)
        pendingOwners[key, default: []].append((knowledgeID, name ?? "", false))
        pending.append(.bindFirst(key, id: knowledgeID, name: name, birth: birth))
    }

    /// Accepts a verified move: the old key signs up to its `afterSeq`, the new one after it.
    func record(_ move: KeyMove) throws {
        var chain = try chain(of: move.replica)
        for index in chain.indices where chain[index].key == move.from && chain[index].untilSeq == nil {
            chain[index].untilSeq = move.afterSeq
        }
        chain.append(KeyPins.ChainKey(key: move.to, afterSeq: move.afterSeq, untilSeq: nil, move: move))
        chains[move.replica] = Self.ordered(chain)
        pendingOwners[move.to, default: []].append((move.replica, "", false))
        pendingMoves.append(move)
        pending.append(.move(move))
    }

    /// The order the store reads a chain in: keys that moved away first, by the change after
    /// which they sign, then the current one.
    private static func ordered(_ chain: [KeyPins.ChainKey]) -> [KeyPins.ChainKey] {
        chain.enumerated().sorted { a, b in
            let (x, y) = (a.element, b.element)
            if (x.untilSeq == nil) != (y.untilSeq == nil) { return y.untilSeq == nil }
            if x.afterSeq != y.afterSeq { return x.afterSeq < y.afterSeq }
            return a.offset < b.offset
        }.map(\.element)
    }

    /// Records every accepted first key and move, in the order they were accepted.
    func write() throws {
        for write in pending {
            switch write {
            case .bindFirst(let key, let id, let name, let birth): try pins.bindFirst(key, to: id, name: name, birth: birth)
            case .move(let move): try pins.record(move)
            }
        }
        pending = []
        pendingMoves = []
        pendingOwners = [:]
        chains = [:]
    }
}
