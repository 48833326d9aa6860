extension Replica {
    /// Records what another replica said it holds, in a signed acknowledgement left in a
    /// mailbox, as if it had come with one of its bundles: `status`, `export --for` and
    /// `purge` then see it, and a replica only heard of through a mailbox becomes a known
    /// peer (by name and knowledge ID). Acknowledgements only grow; this replica's own is ignored.
    public func recordAcknowledgement(of knowledgeID: String, name: String, knowledge: Knowledge) throws {
        guard knowledgeID != self.knowledgeID else { return }
        try database.inTransaction {
            let peer = try siteNumber(for: knowledgeID, name: name.isEmpty ? nil : name)
            var seqs: [Int: Int64] = [:]
            for (id, seq) in knowledge.seqs { seqs[try siteNumber(for: id, name: nil)] = seq }
            try recordAcknowledgement(peer: peer, seqs)
        }
    }
}
