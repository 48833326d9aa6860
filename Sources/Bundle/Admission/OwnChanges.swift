import ChangeLog
import FoundationEssentials
import Glibc

extension BundleExchange {
    /// Checks each of `replica`'s own changes a bundle carries under its own key: each must be
    /// one it made, as it made it (``OwnChangeCheck``). A bundle of its own ID with as many
    /// changes as it made, but other ones, comes from a copy of its file; this throws
    /// `identityClash` then, naming the file and the fix.
    public static func checkOwnChanges(in reader: BundleReader, replica: Replica) throws {
        let me = replica.knowledgeID
        guard let ownKey = try KeyBinding.currentKey(of: me, replica: replica) else { return }
        try reader.readSegments(checkOrigin: { entry, signer in
            reader.envelope.sites[entry.site].id == me && signer == ownKey
        }) { segment in
            let check = try OwnChangeCheck(replica: replica, header: segment.header.changes, path: reader.path)
            try segment.forEachChange { try check.check($0) }
        }
    }
}
