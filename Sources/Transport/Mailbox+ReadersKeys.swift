import Bundle
import ChangeLog
import FoundationEssentials

/// A mailbox's readers' keys (docs/BUNDLE_FORMAT.md, "Readers' keys"), in
/// `sqsync/keys/<readers>-<key>.age`: with more readers than
/// ``BundleLimits/maxDirectRecipients``, a bundle is encrypted once, to a key its readers
/// share, and once to its writer's own SSH key, so its size stops growing with the number of
/// readers. Each replica removes only the key files it made.
extension Mailbox {
    static let keys = "\(folder)/keys"
    /// Candidate key files a writer opens in one sync, so that files planted under its readers'
    /// name cost a bounded look: past them, it makes a key of its own.
    static let maxKeyFilesTried = 4

    /// The key to encrypt a bundle for `recipients` (this replica's own key among them) to: one
    /// already opened or in the mailbox for exactly these readers, made by one of them (the
    /// first by name, as every writer picks), else a new one, published before any bundle
    /// names it. A reader retired or untrusted is no longer among the recipients, so what is
    /// written after that goes to a new key the old reader does not hold.
    func readersKey(for recipients: [SSHPublicKey], replica: Replica, key: SigningKey, scratch: ScratchDirectory) throws -> ReadersKey {
        let state = try state(replica)
        let digest = ReadersKey.readersDigest(recipients)
        let known = try state.readersKeys()
        let listed = try transport.listFiles(in: Self.keys).filter { ReadersKey.isFileName($0) && $0.hasPrefix(digest + "-") }.sorted()
        var tried = 0
        for name in listed {
            // Opened before: its readers are these (the name says so) and its maker one of them.
            if let opened = known[name] { return opened.key }
            guard tried < Self.maxKeyFilesTried else { break }
            tried += 1
            let local = scratch.path + "/readers-key"
            defer { try? FileManager.default.removeItem(atPath: local) }
            guard try fetch(Self.keys, name, to: local, maxBytes: ReadersKey.maxFileBytes),
                let opened = try? ReadersKey.open(path: local, name: name, with: key)
            else { continue }
            try state.rememberReadersKey(opened, madeHere: false)
            return opened
        }
        let local = scratch.path + "/new-readers-key"
        defer { try? FileManager.default.removeItem(atPath: local) }
        let made = try ReadersKey.make(readers: recipients, signingKey: key, writingTo: local)
        try state.rememberReadersKey(made, madeHere: true)
        try writing {
            try transport.makeDirectories(Self.keys)
            try transport.writeFile(from: local, to: "\(Self.keys)/\(made.name)")
        }
        return made
    }

    /// What a bundle's readers' key is to this replica.
    enum ReadersKeyLookup {
        /// The bundle names none: its own stanzas decide.
        case none
        case opened(ReadersKey)
        /// The key file opened, but not with this replica's key: the bundle is not for it.
        case notAReader
        /// The key file is not in the mailbox, or is not a key: the bundle waits until a file
        /// of that name is listed (a lost file put back, a key still being copied).
        case unavailable(name: String)
    }

    /// The readers' key the bundle fetched to `local` (listed as `bundle`) is encrypted to:
    /// opened once, then remembered.
    func readersKey(forBundleAt local: String, named bundle: String, replica: Replica, key: SigningKey, scratch: ScratchDirectory)
        throws -> ReadersKeyLookup
    {
        let state = try state(replica)
        let name = AgeFile.readersKeyName(ofFile: local)
        try state.noteBundleReadersKey(bundle: bundle, key: name)
        guard let name else { return .none }
        if let known = try state.readersKeys()[name] { return .opened(known.key) }
        let keyFile = scratch.path + "/readers-key"
        defer { try? FileManager.default.removeItem(atPath: keyFile) }
        guard try fetch(Self.keys, name, to: keyFile, maxBytes: ReadersKey.maxFileBytes) else { return .unavailable(name: name) }
        do {
            let opened = try ReadersKey.open(path: keyFile, name: name, with: key)
            try state.rememberReadersKey(opened, madeHere: false)
            return .opened(opened)
        } catch let error as BundleError where error.kind == .notAddressed {
            return .notAReader
        } catch is BundleError {
            return .unavailable(name: name)
        }
    }

    /// Bundles waiting for a readers' key that the mailbox now lists: read again.
    func bundlesWhoseKeyCameBack(replica: Replica) throws -> Set<String> {
        let state = try state(replica)
        let waiting = try state.bundlesWaitingForKeys()
        guard !waiting.isEmpty else { return [] }
        let noted = try state.bundleReadersKeys()
        let listed = Set(try transport.listFiles(in: Self.keys))
        return waiting.filter { noted[$0].map(listed.contains) ?? true }
    }

    /// Removes the key files this replica made that no bundle in the mailbox is encrypted to
    /// any more. `needing`: the bundles someone may still read (this replica's own as kept by
    /// this sync); `listed`: every bundle in the mailbox now. While any bundle in `needing` was
    /// never read here (it may name any key), nothing goes.
    func removeUnneededReadersKeys(needing bundles: [String], listed: [String], replica: Replica) throws {
        let state = try state(replica)
        let made = try state.readersKeys().filter(\.value.madeHere)
        let noted = try state.bundleReadersKeys()
        try state.forgetBundleReadersKeys(keeping: Set(listed))
        guard !made.isEmpty else { return }
        var needed: Set<String> = []
        for bundle in bundles {
            guard let key = noted[bundle] else { return }
            needed.insert(key)
        }
        let listed = Set(try transport.listFiles(in: Self.keys))
        for name in made.keys where !needed.contains(name) {
            if listed.contains(name) { try writing { try transport.removeFile("\(Self.keys)/\(name)") } }
            try state.forgetReadersKey(name)
        }
    }
}
