import Bundle
import ChangeLog
import Crypto
import FoundationEssentials

/// A mailbox's readers' keys (docs/BUNDLE_FORMAT.md, "Readers' keys"), in
/// `sqsync/keys/<readers>-<key>.age`: with more readers than
/// ``BundleLimits/maxDirectRecipients``, a bundle is encrypted once, to a key its readers
/// share, and once to its writer's own SSH key, so its size stops growing with the number of
/// readers. Each replica removes only the key files it made.
///
/// Whoever can write to the folder can replace or remove a key file, never read one: a writer
/// uses a key only while the mailbox holds the very file it made or opened (else it makes
/// another, and its bundle's name changes with it), and a reader that cannot open a bundle's
/// key looks again whenever that file changes, never giving up on the bundle for good.
extension Mailbox {
    /// Key files a writer opens for the first time in one sync, so that files planted under
    /// its readers' name cost a bounded look: past them, it makes a key of its own.
    static let maxKeyFilesTried = 4
}

extension MailboxSync {

    /// The names of the regular files in `sqsync/keys/`, listed once per sync.
    func listedKeyFiles() throws -> Set<String> {
        if let listedKeys { return listedKeys }
        let listed = Set(try transport.listFiles(in: Mailbox.keys).filter(ReadersKey.isFileName))
        listedKeys = listed
        return listed
    }

    /// Copies key file `name` to `local`: its SHA-256, or nil when it cannot be read (gone,
    /// too large, unreadable): a key file is never worth failing a sync for.
    private func fetchKeyFile(_ name: String, to local: String) -> String? {
        guard (try? fetch(Mailbox.keys, name, to: local, maxBytes: ReadersKey.maxFileBytes)) == true,
            let bytes = try? Data(contentsOf: URL(fileURLWithPath: local))
        else { return nil }
        return hexString(Array(SHA256.hash(data: bytes)))
    }

    /// The key to encrypt a bundle for `recipients` (this replica's own key among them) to: one
    /// for exactly these readers, made by one of them, that the mailbox still holds as it was
    /// opened (the first by name, as every writer picks), else a new one, published before any
    /// bundle names it. A reader retired or untrusted is no longer among the recipients, so what
    /// is written after that goes to a new key the old reader does not hold.
    ///
    /// A writer cannot check the stanzas of a key file for other readers, so it adopts
    /// another's key only while it has never held one for these readers: once it made or opened
    /// one, it keeps to it, and when it loses it (a reader of the group said, in its signed
    /// acknowledgement, that it could not open it, or its file went) it makes its own. It never
    /// adopts another's over its own. So keys planted with one reader's stolen key, however
    /// many, cost each writer one key its readers report at most: no reader starves past a round.
    func readersKey(for recipients: [SSHPublicKey], readers: Set<String>) throws -> ReadersKey {
        let exact = ReadersKey.fullReadersDigest(recipients)
        let prefix = exact.prefix(16) + "-"
        let known = try state.readersKeys()
        let reported = Set(readers.flatMap { peers[$0]?.unopened ?? [] })
        let madeOwn = known.values.contains { $0.madeHere && $0.readersDigest == exact && !reported.contains($0.key.name) }
        let heldOne = known.values.contains { $0.readersDigest == exact }
        var tried = 0
        for name in try listedKeyFiles().filter({ $0.hasPrefix(prefix) }).sorted() where !reported.contains(name) {
            if madeOwn && known[name]?.madeHere != true { continue }
            if heldOne && known[name] == nil { continue }
            let opened = known[name].flatMap { $0.readersDigest == exact ? $0 : nil }
            if opened == nil {
                guard tried < Mailbox.maxKeyFilesTried else { continue }
                tried += 1
            }
            let local = scratch.path + "/readers-key"
            defer { try? FileManager.default.removeItem(atPath: local) }
            guard let hash = fetchKeyFile(name, to: local) else { continue }
            if let opened {
                // The very file it opened or made; a file replaced under that name is not used.
                if hash == opened.fileHash { return opened.key }
                continue
            }
            guard let key = try? ReadersKey.open(path: local, name: name, with: key, scratchDirectory: scratch.path),
                let maker = key.maker, recipients.contains(maker), key.readersFullDigest == exact
            else { continue }
            try state.rememberReadersKey(key, fileHash: hash, madeHere: false)
            return key
        }
        let local = scratch.path + "/new-readers-key"
        defer { try? FileManager.default.removeItem(atPath: local) }
        let made = try ReadersKey.make(readers: recipients, signingKey: key, writingTo: local, scratchDirectory: scratch.path)
        guard let bytes = try? Data(contentsOf: URL(fileURLWithPath: local)) else {
            throw TransportError(.io, "\(local): cannot read the readers' key just made")
        }
        try state.rememberReadersKey(made, fileHash: hexString(Array(SHA256.hash(data: bytes))), madeHere: true)
        try writing {
            try transport.makeDirectories(Mailbox.keys)
            try transport.writeFile(from: local, to: "\(Mailbox.keys)/\(made.name)")
        }
        listedKeys?.insert(made.name)
        return made
    }

    /// What a bundle's readers' key is to this replica.
    enum ReadersKeyLookup {
        /// The bundle names none: its own stanzas decide.
        case none
        case opened(ReadersKey)
        /// No key file of that name, a damaged one, or one not for this replica's key
        /// (`size`: the file's size, nil when there is none): the bundle waits until it changes.
        case unavailable(name: String, size: Int?)
    }

    /// The readers' key the bundle fetched to `local` (listed as `bundle`) is encrypted to:
    /// opened once, then remembered. Only a name the mailbox lists as a regular file is fetched.
    func readersKey(forBundleAt local: String, named bundle: String) throws -> ReadersKeyLookup {
        let name = AgeFile.readersKeyName(ofFile: local)
        try state.noteBundleReadersKey(bundle: bundle, key: name)
        guard let name else { return .none }
        if let known = try state.readersKeys()[name] { return .opened(known.key) }
        guard try listedKeyFiles().contains(name) else { return .unavailable(name: name, size: nil) }
        let size = try? transport.fileSize("\(Mailbox.keys)/\(name)")
        let keyFile = scratch.path + "/readers-key"
        defer { try? FileManager.default.removeItem(atPath: keyFile) }
        guard let hash = fetchKeyFile(name, to: keyFile),
            let opened = try? ReadersKey.open(path: keyFile, name: name, with: key, scratchDirectory: scratch.path)
        else { return .unavailable(name: name, size: size) }
        try state.rememberReadersKey(opened, fileHash: hash, madeHere: false)
        return .opened(opened)
    }

    /// Of the bundles `waiting` for a readers' key (with the key file size each saw), those
    /// whose file the mailbox now shows otherwise (it came, went or changed size): read again.
    func bundlesWhoseKeyChanged(_ waiting: [String: Int]) throws -> Set<String> {
        guard !waiting.isEmpty else { return [] }
        let noted = try state.bundleReadersKeys()
        let listed = try listedKeyFiles()
        var sizes: [String: Int] = [:]
        func size(_ name: String) throws -> Int {
            if let known = sizes[name] { return known }
            let size = listed.contains(name) ? (try transport.fileSize("\(Mailbox.keys)/\(name)")) ?? -1 : -1
            sizes[name] = size
            return size
        }
        return Set(try waiting.filter { bundle, seen in try noted[bundle].map { try size($0) != seen } ?? true }.keys)
    }

    /// Removes the key files this replica made that no bundle in the mailbox has named for two
    /// of its syncs in a row (the second so that a bundle another writer was uploading while
    /// the first looked is seen first), and forgets keys it opened that the mailbox no longer
    /// holds and no bundle names. `others`: the other replicas' bundles listed now; `kept`:
    /// this replica's own, as this sync left them. While any bundle was never read here (it may
    /// name any key), nothing goes; a retired sender's bundle, which nobody here reads, aside.
    func removeUnneededReadersKeys(others: [(sender: String, name: String)], kept: [String]) throws {
        let known = try state.readersKeys()
        let noted = try state.bundleReadersKeys()
        try state.forgetBundleReadersKeys(keeping: Set(others.map(\.name) + kept))
        guard !known.isEmpty else { return }
        var needed: Set<String> = []
        for bundle in others + kept.map({ (sender: "", name: $0) }) {
            if let key = noted[bundle.name] {
                needed.insert(key)
            } else if !retired.contains(bundle.sender) {
                return
            }
        }
        let listed = try listedKeyFiles()
        for (name, entry) in known {
            if needed.contains(name) {
                if entry.unneeded > 0 { try state.markReadersKey(name, unneeded: false) }
            } else if entry.madeHere && entry.unneeded == 0 {
                try state.markReadersKey(name, unneeded: true)
            } else if entry.madeHere {
                if listed.contains(name) { try writing { try transport.removeFile("\(Mailbox.keys)/\(name)") } }
                try state.forgetReadersKey(name)
            } else if !listed.contains(name) {
                try state.forgetReadersKey(name)
            }
        }
    }
}
