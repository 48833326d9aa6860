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

extension Replica {
    /// The acknowledgement files a mailbox last showed, by replica: file name and text.
    public func cachedMailboxAcknowledgements(mailbox: String) throws -> [String: (file: String, text: String)] {
        var cached: [String: (file: String, text: String)] = [:]
        for row in try database.rows(
            #"SELECT "replica", "file", "text" FROM "_sqsync_mailbox_acks" WHERE "mailbox" = ?"#, .text(mailbox))
        {
            cached[row[0].stringValue ?? ""] = (row[1].stringValue ?? "", row[2].stringValue ?? "")
        }
        return cached
    }

    /// Remembers an acknowledgement file that was verified (or written) here.
    public func cacheMailboxAcknowledgement(mailbox: String, replica: String, file: String, text: String) throws {
        try database.run(
            #"INSERT OR REPLACE INTO "_sqsync_mailbox_acks" ("mailbox", "replica", "file", "text") VALUES (?, ?, ?, ?)"#,
            .text(mailbox), .text(replica), .text(file), .text(text))
    }

    /// Knowledge IDs of retired peers, without reading every acknowledgement.
    public func retiredPeerIDs() throws -> Set<String> {
        Set(try database.rows(#"SELECT "knowledge_id" FROM "_sqsync_sites" WHERE "retired" = 1"#).compactMap { $0[0].stringValue })
    }
}

extension Replica {
    /// Bundles this replica left in a mailbox's outbox: a file there with a matching name
    /// that it did not upload (planted by whoever can write to the folder) is never kept.
    public func uploadedBundles(mailbox: String) throws -> Set<String> {
        Set(
            try database.rows(#"SELECT "file" FROM "_sqsync_mailbox_uploads" WHERE "mailbox" = ?"#, .text(mailbox))
                .compactMap { $0[0].stringValue })
    }

    /// Records the bundles this replica now keeps in a mailbox's outbox, forgetting the rest.
    public func rememberUploads(mailbox: String, files: Set<String>) throws {
        try database.inTransaction {
            try database.run(#"DELETE FROM "_sqsync_mailbox_uploads" WHERE "mailbox" = ?"#, .text(mailbox))
            for file in files {
                try database.run(
                    #"INSERT INTO "_sqsync_mailbox_uploads" ("mailbox", "file") VALUES (?, ?)"#, .text(mailbox), .text(file))
            }
        }
    }
}

extension Replica {
    /// Everything in this replica that a mailbox sync's outcome depends on, as text: what it
    /// knows of each site and the keys pinned to them, its own clock, the bundles it holds
    /// back, key moves, acknowledgement statements and the schema. Two syncs through the
    /// same, unchanged mailbox that see the same text do the same thing.
    public func syncState() throws -> String {
        try database.rows(MailboxSQL.syncState).first?[0].stringValue ?? ""
    }

    /// The inputs of the last sync through `mailbox` that found nothing to do, and the wall
    /// clock (ms since 1970) when it saved them.
    public func lastQuietSync(mailbox: String) throws -> (inputs: String, savedAt: Int64)? {
        try database.rows(#"SELECT "inputs", "saved_at" FROM "_sqsync_quiet_syncs" WHERE "mailbox" = ?"#, .text(mailbox))
            .first.map { ($0[0].stringValue ?? "", $0[1].int64Value ?? .max) }
    }

    /// Records the inputs of a sync through `mailbox` that found nothing to do.
    public func rememberQuietSync(mailbox: String, inputs: String, at savedAt: Int64) throws {
        try database.run(
            #"INSERT OR REPLACE INTO "_sqsync_quiet_syncs" ("mailbox", "inputs", "saved_at") VALUES (?, ?, ?)"#,
            .text(mailbox), .text(inputs), .integer(savedAt))
    }

    /// Forgets the last quiet sync through `mailbox`, before a sync that may do something.
    public func forgetQuietSync(mailbox: String) throws {
        try database.run(#"DELETE FROM "_sqsync_quiet_syncs" WHERE "mailbox" = ?"#, .text(mailbox))
    }
}

enum MailboxSQL {
    /// One text for ``Replica/syncState()``; quote() keeps NULL apart from 'NULL'.
    static let syncState = """
        SELECT ifnull((SELECT group_concat("line", char(10)) FROM (
                   SELECT quote("site") || ' ' || quote("knowledge_id") || ' ' || quote("name") || ' '
                       || quote("known_seq") || ' ' || quote("forgotten_seq") || ' ' || quote("retired") || ' '
                       || quote("signing_key") || ' ' || quote("schema_version") || ' '
                       || quote("counters_folded") || ' ' || quote("counters_folded_at") AS "line"
                   FROM "_sqsync_sites" ORDER BY "site")), '')
            || char(10) || (SELECT quote("site") || ' ' || quote("seq") FROM "_sqsync_replica")
            || char(10) || (SELECT count(*) FROM "_sqsync_held")
            || char(10) || (SELECT count(*) || ' ' || total("counter") FROM "_sqsync_statements")
            || char(10) || ifnull((SELECT group_concat("from_key" || ' ' || "to_key", char(10)) FROM "_sqsync_key_moves"), '')
            || char(10) || (SELECT "schema_version" FROM pragma_schema_version())
        """
}
