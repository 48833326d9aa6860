import FoundationEssentials
import Glibc
import SQLiteDatabase

/// Merges one origin's change set into a replica: causal length decides whether a row
/// lives, and each column keeps the value with the greatest (hybrid logical clock, knowledge
/// ID). The outcome does not depend on the order change sets arrive in.
///
/// The caller owns the transaction: create the merger, ``apply(_:)`` every row change, then
/// ``finish()``, all inside one transaction, so a failure leaves nothing half-applied. The
/// caller has checked the origin's signature: the merger takes every stamp as the origin's.
public final class ChangeMerger {
    struct LocalStamp: Equatable {
        var hlc: Int64
        var site: Int
        var seq: Int64
    }

    let replica: Replica
    let database: Database
    private let header: ChangeSetHeader
    /// The origin's local site number: every stamp of the set is its.
    let originSite: Int
    var siteIDs: [Int: String]
    /// What this replica held of the origin's changes when the merge began: every stamp a
    /// change set carries is its origin's, so no other site's is asked about.
    let originKnownBefore: Int64
    /// This replica's own sequence number when the merge began.
    private let ownSeqBefore: Int64
    /// What the origin held when it wrote the set, by local site.
    let senderKnows: [Int: Int64]
    private let targets: [Target]
    let learning: LearningEvent.ByWriter
    var highestClock: Int64
    let statements: Statements
    /// Rows (table, key) whose label a concurrent life changed in this merge: the caller
    /// starts new lives of them once the merge is done (``Replica/startNewLives(of:)``).
    public internal(set) var relabelled: [(table: String, key: [SQLValue])] = []
    /// Rows held here that a denied change wrote to, with the causal length it gave them
    /// (``ChangeMerger/isAllowed(_:in:by:)``): each gets a new life of this replica's above it.
    var undoneByNewLife: [(table: String, key: [SQLValue], above: Int64)] = []
    /// New rows a denied life made that are held nowhere here, with the causal length it gave
    /// them and its reach: each gets a deletion of this replica's above it
    /// (``Replica/endDeniedNewRows(_:)``).
    var deniedNewRows: [DeniedNewRow] = []
    /// Rows (table, key) that changes new here, made beyond their origin's word, wrote and
    /// that were allowed: their origin cut them for no scope, so a replica holding every row
    /// announces them as its own (a new life of a live row, a deletion of a deleted one) for
    /// readers with a scope (``Authorization/beyondItsWord``).
    var takenBeyondItsWord: [(table: String, key: [SQLValue])] = []
    /// The same rows, each as its table's name followed by its key.
    var takenBeyondItsWordKeys: Set<[SQLValue]> = []
    /// Deleted rows whose deletion this replica announces again as its own, to readers the
    /// deletion's origin did not reach (``settleReach(after:in:before:)``).
    public internal(set) var deletedAgain: [(table: String, key: [SQLValue])] = []
    /// Whether this replica announces what origins could not (it holds every row, and no
    /// grant restricts it).
    let announcesReach: Bool
    /// This replica's scope, when it has one and the merge touches a labelled table.
    private let ownScope: Set<String>?
    let reaches: ReachStatements
    /// Rows of labelled tables this merge touched, whose reach takes their label once merged.
    var reachTouched: [(target: Target, key: [SQLValue])] = []
    /// The rules the origin's changes are judged by, when its grants restrict it.
    let authorization: Authorization?
    /// True while the capture triggers are off on this merge's connection (turned off by this
    /// merge, or by the run of merges it is part of): what it writes then fires nothing.
    private(set) var triggersOff = false
    /// Whether this merge turned them off, and so turns them on again.
    private var turnedTriggersOff = false
    /// `PRAGMA foreign_keys` when the merge began: its actions (ON UPDATE CASCADE) run even
    /// with triggers off. `sqsync import` turns it off.
    let foreignKeysOn: Bool
    /// Rows new here, waiting to be inserted a batch at a time.
    var freshRows = FreshRows()
    /// The log as the fold left it: rows after this one come from the merge's own writes.
    private var lastLocalLogRow: Int64 = 0
    /// Which keys cannot have an entry yet, so their lookup is spared.
    var entryCeiling = EntryKeyCeiling()
    /// A record changed a life this replica has not seen begin: the set is merged, but this
    /// replica does not claim the origin's changes until the life arrives and the set comes again.
    var sawUnseenLife = false
    /// This replica holds at least what every change set it merged said its origin held, and
    /// purged nothing: each change it knows of left a trace here (``applyKept(_:to:)``).
    private let holdsWhatItWasTold: Bool
    /// The origin's numbering as this replica has seen it, checked stamp by stamp.
    var numbering: OriginNumbering

    /// The statements every row change runs, prepared once per merge.
    struct Statements {
        let rowEntry: Statement
        let upsertRowEntry: Statement
        let updateRowEntry: Statement
        let deleteCounters: Statement
        let counterEntry: Statement
        let writeCounterEntry: Statement
        let sumOfCounter: Statement

        init(_ database: Database) throws {
            deleteCounters = try database.statement(CounterSQL.dropCountersOfRow)
            counterEntry = try database.statement(CounterSQL.entry)
            writeCounterEntry = try database.statement(CounterSQL.writeEntry)
            sumOfCounter = try database.statement(CounterSQL.sumOfCell)
            rowEntry = try database.statement(MergeSQL.rowEntry)
            upsertRowEntry = try database.statement(MergeSQL.upsertRowEntry)
            updateRowEntry = try database.statement(MergeSQL.updateRowEntry)
        }
    }

    /// Merging, at a replica that holds every row, a cut for a scope that another file of the
    /// origin's signed (``Replica/announceWritesAgain(of:from:through:)``): a life that comes
    /// with its label's columns only (its row left the cut's scope) is passed over, as its
    /// other values are not in the cut.
    public var wholeLivesOnly = false

    /// Merging a cut another file of the origin's signed, whose changes from this number on
    /// may differ from those held here under the same numbers: one of them that is denied is
    /// logged and undone though its number is not new here (``ChangeMerger/isAllowed(_:in:by:)``).
    public var anotherFileFrom: Int64?

    /// Prepares to merge a change set ``Replica/planMerge(of:authorization:)`` admitted.
    /// `learning`: when peers learned of this replica's changes (``LearningEvent``), if known.
    public init(replica: Replica, plan: MergePlan, learning: LearningEvent.ByWriter = [:]) throws {
        self.replica = replica
        self.learning = learning
        self.database = replica.database
        let header = plan.header
        self.header = header
        authorization = plan.authorization
        let database = replica.database
        targets = try plan.tables.map {
            try Target(info: $0.info, columns: $0.columns, key: $0.key, dropped: $0.dropped, database: database)
        }
        // The origin is registered here if new: a plan writes nothing.
        originSite = try replica.siteNumber(for: header.origin, name: header.originName)
        siteIDs = try replica.siteIDs()
        originKnownBefore = plan.originKnownBefore
        ownSeqBefore = plan.ownSeqBefore
        var originKnows: [Int: Int64] = [:]
        // Replicas heard of only here have no stamp in the set (every stamp is the origin's).
        let siteOf = try replica.siteNumbers()
        for (id, seq) in header.originKnowledge.seqs {
            if let site = siteOf[id] { originKnows[site] = seq }
        }
        originKnows[originSite] = max(originKnows[originSite] ?? 0, header.last)
        senderKnows = originKnows
        holdsWhatItWasTold = try database.int64(MergeSQL.holdsWhatItWasTold) == 1
        numbering = OriginNumbering(before: try replica.topStamp(of: originSite))
        highestClock = header.createdHLC
        statements = try Statements(database)
        reaches = try ReachStatements(database)
        if targets.contains(where: { $0.info.label != nil }) {
            let statements = try replica.adminStatements()
            let rules = AdminRules(acts: statements.map(\.act))
            announcesReach = rules.scope(of: replica.knowledgeID) == nil && !rules.isRestricted(replica.knowledgeID)
            ownScope = rules.scope(of: replica.knowledgeID).map(Set.init)
            let madeUnder = AdminRules(named: header.adminStatements, among: statements)
            for target in targets where target.info.label != nil {
                target.madeWithoutItsLabel = madeUnder?.labels[target.info.name] != target.info.label
            }
        } else {
            announcesReach = false
            ownScope = nil
        }
        foreignKeysOn = try database.int64("PRAGMA foreign_keys") != 0
        try database.execute(MergeSQL.startApplying)
        lastLocalLogRow = try database.int64(MergeSQL.lastLogRow)
        // The capture triggers need not run for a peer's changes: off, unless the app's own
        // triggers must fire; then the log rows they append are removed in finish(). Last,
        // so that nothing can throw between here and the deinit that turns them back on.
        // Left as they are when a run of merges turned them off (``Replica/mergingWithTriggersOff(_:)``).
        // Raised first: the generation's triggers are off with the others, and whatever
        // commits this merge's writes, even without finish(), commits the raise.
        try database.execute(GenerationSQL.raise)
        if database.triggersEnabled, try database.int64(MergeSQL.appTriggers) == 0 {
            try database.setTriggersEnabled(false)
            turnedTriggersOff = true
        }
        triggersOff = !database.triggersEnabled
    }

    /// Plans and prepares a merge of one change set alone, folding pending local changes
    /// first: for callers that merge change sets themselves, outside a bundle. A set that
    /// must wait throws ``MergeHeld``.
    public convenience init(replica: Replica, header: ChangeSetHeader, learning: LearningEvent.ByWriter = [:]) throws {
        try replica.fold()
        switch try replica.planMerge(of: header) {
        case .merge(let plan): try self.init(replica: replica, plan: plan, learning: learning)
        case .hold(let reason): throw MergeHeld(reason)
        }
    }

    deinit {
        if turnedTriggersOff { try? database.setTriggersEnabled(true) }
    }

    // MARK: Applying

    /// Merges one row change. Rows new here may wait for others and be written with them
    /// (``FreshRows``): by the next change that needs the table as it is, or by ``finish()``,
    /// so an error of such a row (a NOT NULL or CHECK constraint) can surface from a later
    /// call, and the table shows the rows only once ``finish()`` returned.
    public func apply(_ change: RowChange) throws {
        if let rowStamp = change.rowStamp { numbering.see(rowStamp) }
        for column in change.columns { numbering.see(column.stamp) }
        for counter in change.counters { numbering.see(counter.stamp) }
        let target = targets[change.table]
        if wholeLivesOnly && change.causalLength % 2 == 1 && change.rowStamp != nil && target.info.label != nil
            && !target.carriesEveryColumn(change)
        {
            target.counts.unchanged += 1
            return
        }
        if let authorization, try !isAllowed(change, in: target, by: authorization) {
            try widenReach(byDenied: change, in: target)
            return
        }
        var kept = change
        if !target.dropped.isEmpty {
            kept.columns.removeAll { target.dropped.contains($0.column) }
            kept.counters.removeAll { target.dropped.contains($0.column) }
        }
        let unchangedBefore = target.counts.unchanged
        let reach = try reachBefore(kept, in: target)
        if target.info.label != nil { reachTouched.append((target, change.key)) }
        try applyKept(kept, to: target)
        noteIfTakenBeyondItsWord(change, in: target)
        if let reach { try settleReach(after: kept, in: target, before: reach) }
        if !kept.counters.isEmpty, try applyCounters(kept, to: target), target.counts.unchanged > unchangedBefore {
            target.counts.unchanged -= 1
            target.counts.updated += 1
        }
    }

    /// The clocks of the change's columns that differ from its row's.
    func columnClocks(of change: RowChange, in target: Target, differingFrom rowStamp: LocalStamp) -> [CellClock] {
        change.columns.compactMap { column in
            let columnStamp = local(column.stamp)
            return columnStamp == rowStamp ? nil : CellClock(cid: target.columns[column.column].cid, stamp: columnStamp)
        }
    }

    private func applyKept(_ change: RowChange, to target: Target) throws {
        let key = try metadataKey(change.key)
        if let rowStamp = change.rowStamp { highestClock = max(highestClock, rowStamp.hlc) }
        for column in change.columns { highestClock = max(highestClock, column.stamp.hlc) }

        let entry = try rowEntry(tid: target.info.tid, key: key)
        if entry == nil, try bufferFreshRow(change, target: target, key: key) { return }
        try flushFreshRows()
        if entry == nil, let rowStamp = change.rowStamp.map(local), knownHere(rowStamp) {
            // A life this replica holds the origin's changes past but has no trace of. Another
            // replica's change may have replaced it before the origin's snapshot, and be on its
            // way: old news. But a replica that holds all its senders held has that change
            // already: then this life was made by a second file under the origin's ID. That is
            // said, and the life merged as any: both files' writes are real, and every replica
            // that meets both holds both.
            if holdsWhatItWasTold && !change.isDelete {
                numbering.noteClash(at: rowStamp.seq)
            } else {
                target.counts.unchanged += 1
                return
            }
        }
        if let entry, let rowStamp = change.rowStamp.map(local), entry.stamp.site == rowStamp.site,
            entry.stamp.seq == rowStamp.seq, entry.stamp.hlc != rowStamp.hlc
        {
            // One replica stamps a row once per change: the same change with another clock
            // was made by a second file under the origin's identity. Said, and merged as any
            // change: every replica orders the two alike (``isLater(_:than:)``).
            numbering.noteClash(at: rowStamp.seq)
        }
        let localLength = entry?.cl ?? 0
        if change.causalLength < localLength {
            try recordStale(change, target: target, localIsDeleted: localLength % 2 == 0)
            target.counts.unchanged += 1
        } else if change.causalLength > localLength {
            guard let rowStamp = change.rowStamp.map(local) else {
                // Updates to a life this replica has not seen begin: the set comes again once
                // the change that began it is here (``sawUnseenLife``).
                sawUnseenLife = true
                target.counts.unchanged += 1
                return
            }
            if change.isDelete {
                try endLife(
                    change, target: target, key: key, stamp: rowStamp, liveHere: localLength % 2 == 1, localStamp: entry?.stamp,
                    localCells: entry?.cells ?? .null)
            } else {
                try startLife(
                    change, target: target, key: key, stamp: rowStamp, known: entry != nil,
                    liveHere: localLength % 2 == 1, localStamp: entry?.stamp, localCells: entry?.cells ?? .null)
            }
        } else if change.isDelete {
            target.counts.unchanged += 1
            if let incoming = change.rowStamp.map(local), let entry, isLater(incoming, than: entry.stamp) {
                try writeRowEntry(tid: target.info.tid, key: key, cl: change.causalLength, stamp: incoming, exists: true)
            }
        } else {
            try mergeColumns(change, target: target, key: key, rowStamp: entry?.stamp, cells: entry?.cells ?? .null)
        }
    }

    private static func values(named columns: [ColumnChange], in target: Target) -> [String: SQLValue] {
        Dictionary(columns.map { (target.columns[$0.column].name, $0.value) }) { _, last in last }
    }

    /// A new life for the row: insert it, or overwrite an older life that the sender saw end.
    func startLife(
        _ change: RowChange, target: Target, key: SQLValue, stamp: LocalStamp, known: Bool,
        liveHere: Bool, localStamp: LocalStamp?, localCells: SQLValue
    ) throws {
        if liveHere {
            try recordLocalLosses(
                target: target, values: change.key, kind: "update lost to delete", life: localStamp, cells: localCells)
        }
        // A life whose label is outside this replica's scope comes with the label's columns
        // only: its entry is kept, its row is not (docs/SCOPES.md).
        if target.info.label != nil && !target.carriesEveryColumn(change), try !holdsRow(target: target, keyValues: change.key) {
            try writeLiveRowEntry(
                target: target, key: key, keyValues: change.key, cl: change.causalLength, stamp: stamp,
                cells: columnClocks(of: change, in: target, differingFrom: stamp), checksum: nil)
            try database.run(ScopeSQL.markGhost, .integer(Int64(target.info.tid)), key)
            if known { try deleteCounters(of: target, key: key) }
            target.counts.unchanged += 1
            return
        }
        // The row's values when it was inserted whole and no trigger of the app's ran: they
        // are stored as given, or else ``Target/checksum(ofInserted:)`` declines.
        var insertedWhole = false
        var updatedChecksum: Int64?
        let written = try writeSettlingUniqueClashes(
            target: target, keyValues: change.key, writing: { Self.values(named: change.columns, in: target) },
            lifeStamp: stamp, cl: change.causalLength
        ) {
            insertedWhole = false
            updatedChecksum = nil
            // A row that left this replica's scope keeps its entry but not its row: a new
            // life brings it back whole (docs/SCOPES.md).
            if liveHere, try target.info.label == nil || self.holdsRow(target: target, keyValues: change.key) {
                updatedChecksum = try self.runUpdate(target: target, columns: change.columns, keyValues: change.key)
                return
            }
            if liveHere { try self.database.run(ScopeSQL.forgetGhost, .integer(Int64(target.info.tid)), key) }
            do {
                insertedWhole = try self.runInsert(target: target, change: change)
            } catch let error as SQLiteError where error.isPrimaryKeyConstraint {
                // The row is there but sqsync never saw it (written while untracked).
                updatedChecksum = try self.runUpdate(target: target, columns: change.columns, keyValues: change.key)
            }
        }
        guard written else { return }
        let checksum = updatedChecksum ?? (triggersOff && insertedWhole ? target.checksum(ofInserted: change) : nil)
        let cells = columnClocks(of: change, in: target, differingFrom: stamp)
        try writeLiveRowEntry(
            target: target, key: key, keyValues: change.key, cl: change.causalLength, stamp: stamp, cells: cells,
            checksum: checksum)
        if known { try deleteCounters(of: target, key: key) }
        try countChanged(change, target: target, inserted: !liveHere)
    }

    /// Counts a row this merge wrote; one whose label is now outside this replica's scope is
    /// counted as leaving it (it is removed once delivered: docs/SCOPES.md), not as changed.
    /// Only a change that wrote a column the label reads can move the row: no other costs a read.
    private func countChanged(_ change: RowChange, target: Target, inserted: Bool) throws {
        if let ownScope, target.info.label != nil, writesLabel(change, in: target),
            let label = try rowWithLabel(target: target, keyValues: change.key)?.label, !ownScope.contains(label)
        {
            target.counts.leftScope += 1
        } else if inserted {
            target.counts.inserted += 1
        } else {
            target.counts.updated += 1
        }
    }

    private func writesLabel(_ change: RowChange, in target: Target) -> Bool {
        change.columns.contains { target.labelColumnIDs.contains(target.columns[$0.column].cid) }
    }

    private func endLife(
        _ change: RowChange, target: Target, key: SQLValue, stamp: LocalStamp, liveHere: Bool, localStamp: LocalStamp?,
        localCells: SQLValue
    ) throws {
        let tid = target.info.tid
        if liveHere {
            try recordLocalLosses(
                target: target, values: change.key, kind: "update lost to delete", life: localStamp, cells: localCells)
        }
        // Delete even when sqsync saw no life here: a row written while untracked goes too.
        try target.deleteRow.bind(change.key)
        try target.deleteRow.run()
        if database.changes > 0 { target.counts.deleted += 1 } else { target.counts.unchanged += 1 }
        // The entry's new clock drops the column clocks (``MergeSQL/upsertRowEntry``).
        try writeRowEntry(tid: tid, key: key, cl: change.causalLength, stamp: stamp, exists: localStamp != nil)
        try deleteCounters(of: target, key: key)
        // A deleted row is nobody's elsewhere: its key is free to insert again here.
        try database.run(ScopeSQL.forgetGhost, .integer(Int64(tid)), key)
    }

    /// Same life on both sides: each column keeps its later value.
    private func mergeColumns(
        _ change: RowChange, target: Target, key: SQLValue, rowStamp: LocalStamp?, cells packed: SQLValue
    ) throws {
        guard let rowStamp else { return }
        // A few clocks at most, in column order: found by a scan, not hashed.
        var clocks = try replica.cellClocks(packed, of: rowStamp.rowClock)
        var winners: [(change: ColumnChange, column: ColumnInfo, stamp: LocalStamp)] = []
        var losers: [(column: ColumnInfo, value: SQLValue, stamp: LocalStamp, winner: LocalStamp)] = []
        var displaced: [(column: ColumnInfo, stamp: LocalStamp, winner: LocalStamp, value: SQLValue)] = []
        var extremes: [Int: SQLValue]?
        for incoming in change.columns {
            let column = target.columns[incoming.column]
            let theirs = local(incoming.stamp)
            let ours = clocks.first { $0.cid == column.cid }?.stamp ?? rowStamp
            if theirs == ours { continue }
            if column.policy.isExtremum {
                // The value decides, not the clock: the greatest (least) written wins.
                if extremes == nil { extremes = try extremeValues(target: target, keyValues: change.key) }
                let current = extremes?[column.cid] ?? .null
                let order = Self.extremumOrder(incoming.value, over: current, policy: column.policy)
                if order > 0 {
                    winners.append((incoming, column, theirs))
                    if (!knownToSender(ours) || overwritesConcurrentOwnValue(ours, with: theirs)) && !knownHere(theirs) {
                        displaced.append((column, ours, theirs, incoming.value))
                    }
                } else if order < 0 && !knownHere(theirs) {
                    losers.append((column, incoming.value, theirs, ours))
                }
                continue
            }
            if theirs.site == ours.site {
                // One replica's own history: its later change supersedes, nothing conflicts.
                // A sequence number names one change, so the same number with another clock
                // comes from a second file under that identity (a copy, a restored backup):
                // said. The later clock wins, as between replicas (one file's numbers and
                // clocks rise together), so that every replica keeps the same value whatever
                // order the two histories and others' writes arrive in. (A later change this
                // replica claims to hold may still be missing here: its origin left it out of a
                // later set because another replica's write superseded it, which comes on its own.)
                if theirs.seq == ours.seq && theirs.hlc != ours.hlc { numbering.noteClash(at: theirs.seq) }
                if isLater(theirs, than: ours) { winners.append((incoming, column, theirs)) }
                continue
            }
            if isLater(theirs, than: ours) {
                winners.append((incoming, column, theirs))
                // A counter's base is replaced, never lost: its deltas still add up.
                if column.policy == .counter { continue }
                if (!knownToSender(ours) || overwritesConcurrentOwnValue(ours, with: theirs)) && !knownHere(theirs) {
                    displaced.append((column, ours, theirs, incoming.value))
                }
            } else if !knownHere(theirs) && column.policy != .counter {
                losers.append((column, incoming.value, theirs, ours))
            }
        }
        try recordColumnConflicts(change, target: target, losers: losers, displaced: displaced)
        guard !winners.isEmpty else {
            target.counts.unchanged += 1
            return
        }
        let changes = try winners.map { winner in
            try winner.column.policy == .counter ? counterValue(winner.change, target: target, key: key) : winner.change
        }
        // A concurrent life that wins a column of the label may move the row to another label;
        // so may an update made where the label was not known yet (a writer that knows it
        // starts a new life instead).
        var labelBefore: String??
        if target.info.label != nil {
            if winners.contains(where: { target.labelColumnIDs.contains($0.column.cid) }) {
                labelBefore = .some(try rowWithLabel(target: target, keyValues: change.key)?.label)
            }
        }
        var updatedChecksum: Int64?
        let written = try writeSettlingUniqueClashes(
            target: target, keyValues: change.key, writing: { Self.values(named: changes, in: target) },
            lifeStamp: rowStamp, cl: change.causalLength
        ) {
            // A whole life of a row whose entry stayed when it left this replica's scope,
            // that wins: the row comes back.
            if target.info.label != nil, change.rowStamp != nil, target.carriesEveryColumn(change),
                try !self.holdsRow(target: target, keyValues: change.key)
            {
                _ = try self.runInsert(target: target, change: change)
                try self.database.run(ScopeSQL.forgetGhost, .integer(Int64(target.info.tid)), key)
                return
            }
            updatedChecksum = try self.runUpdate(target: target, columns: changes, keyValues: change.key)
        }
        guard written else { return }
        // A concurrent life of the row changed its label here: the row may now belong to
        // readers who lack columns written in the life that lost. It starts a new life of this
        // replica's after the merge, which carries it whole (docs/SCOPES.md).
        if let labelBefore, let after = try rowWithLabel(target: target, keyValues: change.key), after.label != labelBefore {
            relabelled.append((target.info.name, change.key))
        }
        for winner in winners {
            let clock = CellClock(cid: winner.column.cid, stamp: winner.stamp)
            if let index = clocks.firstIndex(where: { $0.cid == clock.cid }) {
                clocks[index] = clock
            } else {
                clocks.append(clock)
            }
        }
        let statement = updatedChecksum == nil ? target.writeCellsAndChecksum : target.writeCellsAndNotedChecksum
        try statement.bind(key, at: 1)
        try statement.bind(CellClocks.stored(clocks, relativeTo: rowStamp.rowClock), at: 2)
        if let updatedChecksum {
            try statement.bind(.integer(updatedChecksum), at: 3)
        } else {
            try statement.bind(change.key, from: 3)
        }
        try statement.run()
        try countChanged(change, target: target, inserted: false)
    }

    // MARK: Finishing

    /// Ends the merge and records what it implies, so that every caller (an import, a kept
    /// segment merged again, a library merging change sets itself) leaves the replica alike:
    /// new lives of rows whose label a concurrent life changed, deletions announced again,
    /// the origin's admin claim, and the statements and knowledge its signed header shows it
    /// held (AdminEvidence.swift).
    public func finish() throws -> ApplySummary {
        let merged = try finishRows()
        try replica.recordNumbering(numbering, site: originSite, origin: header.origin)
        try replica.startNewLives(of: relabelled + takenBeyondItsWord(besides: relabelled))
        try replica.announceDeletions(of: deletedAgain + takenBeyondItsWord)
        try replica.startNewLives(undoing: undoneByNewLife)
        try replica.endDeniedNewRows(deniedNewRows)
        let claim = try replica.adminClaim(of: header.origin)?.last ?? 0
        if merged.knowledgeAdvanced && header.last > claim {
            try replica.recordAdminClaim(of: header.origin, last: header.last, ids: header.adminStatements)
        }
        // What the origin signed binds its later changes to the statements it held then.
        try replica.recordStatementsNamed(header.adminStatements, by: header.origin, from: header.base + 1)
        try replica.recordAdminEvidence(
            of: header.origin, knowledge: header.originKnowledge, ownSeq: header.originKnowledge[header.origin])
        return merged
    }

    /// Advances this replica's knowledge of the origin (only of the origin: no one else's
    /// changes are in the set) when it held the origin's changes through the set's base and
    /// every record found its life, and pushes the clock past every value seen.
    private func finishRows() throws -> ApplySummary {
        try flushFreshRows()
        try addCurrentLabelsToReach()
        let before = originKnownBefore
        let covered = before >= header.base && !sawUnseenLife
        if covered && header.last > before {
            try database.run(MergeSQL.advanceKnowledge, .integer(header.last), .integer(Int64(originSite)))
            try database.run(
                MergeSQL.recordLearning, .integer(Int64(originSite)), .integer(before), .integer(header.last),
                .integer(ownSeqBefore))
        }
        for (site, seq) in senderKnows where site != replica.site {
            try database.run(MergeSQL.raiseNeeded, .integer(Int64(site)), .integer(seq))
        }
        var summary = ApplySummary()
        for target in targets { summary.tables[target.info.name] = target.counts }
        summary.knowledgeAdvanced = covered
        try replica.observeClock(highestClock)
        try database.execute(MergeSQL.stopApplying)
        try database.run(MergeSQL.forgetImportLogRows, .integer(lastLocalLogRow))
        if turnedTriggersOff {
            try database.setTriggersEnabled(true)
            turnedTriggersOff = false
        }
        triggersOff = false
        // The generation's triggers were off with the others.
        try database.execute(GenerationSQL.raise)
        return summary
    }
}

extension Replica {
    /// Runs `body`, a run of merges (a bundle's segments), with this connection's triggers off
    /// once for all of them, where no app trigger must fire: each ``ChangeMerger`` then leaves
    /// them as they are. Turning them off and on makes SQLite prepare every statement again
    /// at its next step, which cost a catch-up of a thousand segments a third of its time.
    /// The generation's triggers are off too: it is raised before `body`, in one transaction
    /// with it (a savepoint inside the caller's), so whatever commits what `body` wrote
    /// commits the raise; and again after, for what reads it inside the transaction.
    public func mergingWithTriggersOff<T>(_ body: () throws -> T) throws -> T {
        guard database.triggersEnabled, try database.int64(MergeSQL.appTriggers) == 0 else { return try body() }
        return try database.inTransaction {
            try database.execute(GenerationSQL.raise)
            try database.setTriggersEnabled(false)
            let result: T
            do {
                result = try body()
            } catch {
                try? database.setTriggersEnabled(true)
                throw error
            }
            try database.setTriggersEnabled(true)
            try database.execute(GenerationSQL.raise)
            return result
        }
    }
}
