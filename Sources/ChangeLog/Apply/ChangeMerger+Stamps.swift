/// Stamps: an incoming change's stamp as this replica numbers its origin, which of two is
/// later, and who knows one.
extension ChangeMerger {
    func local(_ stamp: Stamp) -> LocalStamp {
        LocalStamp(hlc: stamp.hlc, site: originSite, seq: stamp.seq)
    }

    /// Later wins: greater clock, ties broken by knowledge ID.
    func isLater(_ a: LocalStamp, than b: LocalStamp) -> Bool {
        if a.hlc != b.hlc { return a.hlc > b.hlc }
        let idA = siteIDs[a.site] ?? "", idB = siteIDs[b.site] ?? ""
        if idA != idB { return idA > idB }
        return a.seq > b.seq
    }

    func knownHere(_ stamp: LocalStamp) -> Bool {
        assert(stamp.site == originSite, "a change set carries its origin's stamps only")
        return originKnownBefore >= stamp.seq
    }
    func knownToSender(_ stamp: LocalStamp) -> Bool { (senderKnows[stamp.site] ?? 0) >= stamp.seq }
}
