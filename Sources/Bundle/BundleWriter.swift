import ChangeLog
import SQLiteDatabase
import Crypto
import Foundation

/// Streams a change set into a signed bundle file (docs/BUNDLE_FORMAT.md).
///
/// The file is written under a temporary name beside its destination and renamed into
/// place only once signed and flushed, so a killed export never leaves a file that looks
/// like a bundle. Not Sendable on purpose.
public final class BundleWriter {
    public let destination: String
    private let output: HashingFileOutput
    private let records: DeflatingOutput
    private let tables: [TableSchema]
    private let siteCount: Int
    private var previousHLC: Int64 = 0
    private var previousSeq: Int64 = 0
    private var previousTable = -1
    private let nonKeyColumns: [[Int]]
    private var record: [UInt8] = []
    public private(set) var recordCount = 0
    private var finished = false

    public init(destination: String, header: ChangeSetHeader, createdAt: Int64) throws {
        self.destination = destination
        let directory = URL(fileURLWithPath: destination).deletingLastPathComponent().path
        let temporary = directory + "/.tmp-" + String(UInt64.random(in: 0...UInt64.max), radix: 16) + ".sqsb"
        output = try HashingFileOutput(creating: temporary)
        records = DeflatingOutput(output)
        tables = header.tables
        siteCount = header.sites.count
        nonKeyColumns = header.tables.map(BundleCodec.nonKeyColumns)
        var bytes = BundleCodec.magic
        bytes.append(BundleCodec.version)
        let capabilities = header.tables.contains(where: \.hasPolicies) ? [BundleCodec.mergePolicies] : []
        BundleCodec.appendVarint(capabilities.count, to: &bytes)
        for capability in capabilities { BundleCodec.appendString(capability, to: &bytes) }
        let encodedHeader = Self.encode(header, createdAt: createdAt)
        BundleCodec.appendVarint(encodedHeader.count, to: &bytes)
        bytes.append(contentsOf: encodedHeader)
        try output.write(bytes)
        record.reserveCapacity(1024)
    }

    deinit {
        if !finished { unlink(output.path) }
    }

    static func encode(_ header: ChangeSetHeader, createdAt: Int64) -> [UInt8] {
        var bytes: [UInt8] = []
        BundleCodec.appendVarint(header.sites.count, to: &bytes)
        for index in header.sites.indices {
            BundleCodec.appendString(header.sites[index], to: &bytes)
            BundleCodec.appendString(header.siteNames[index], to: &bytes)
            BundleCodec.appendVarint(header.knowledge[index], to: &bytes)
            BundleCodec.appendVarint(header.base[index], to: &bytes)
            BundleCodec.appendVarint(header.forgotten[index], to: &bytes)
        }
        BundleCodec.appendVarint(header.senderSeq, to: &bytes)
        BundleCodec.appendVarint(header.senderHLC, to: &bytes)
        BundleCodec.appendVarint(createdAt, to: &bytes)
        BundleCodec.appendVarint(header.acknowledgements.count, to: &bytes)
        for acknowledgement in header.acknowledgements {
            BundleCodec.appendVarint(acknowledgement.peer, to: &bytes)
            for seq in acknowledgement.seqs { BundleCodec.appendVarint(seq, to: &bytes) }
        }
        BundleCodec.appendVarint(header.tables.count, to: &bytes)
        for table in header.tables {
            BundleCodec.appendString(table.name, to: &bytes)
            BundleCodec.appendVarint(table.columns.count, to: &bytes)
            for column in table.columns { BundleCodec.appendString(column, to: &bytes) }
            BundleCodec.appendVarint(table.primaryKey.count, to: &bytes)
            for index in table.primaryKey { BundleCodec.appendVarint(index, to: &bytes) }
        }
        BundleCodec.appendVarint(header.senderLearned.count, to: &bytes)
        for (site, event) in header.senderLearned.sorted(by: { $0.key < $1.key }) {
            BundleCodec.appendVarint(site, to: &bytes)
            BundleCodec.appendVarint(event.previous, to: &bytes)
            BundleCodec.appendVarint(event.reached, to: &bytes)
            BundleCodec.appendVarint(event.ownSeq, to: &bytes)
        }
        BundleCodec.appendZigzag(header.schemaVersion ?? 0, to: &bytes)
        BundleCodec.appendVarint(header.statements.count, to: &bytes)
        for statement in header.statements {
            BundleCodec.appendVarint(statement.count, to: &bytes)
            bytes.append(contentsOf: statement)
        }
        if header.tables.contains(where: \.hasPolicies) {
            let policies = header.tables.enumerated().flatMap { table in
                table.element.policies.enumerated().filter { $0.element != .lww }.map { (table.offset, $0.offset, $0.element) }
            }
            BundleCodec.appendVarint(policies.count, to: &bytes)
            for (table, column, policy) in policies {
                BundleCodec.appendVarint(table, to: &bytes)
                BundleCodec.appendVarint(column, to: &bytes)
                bytes.append(policy.code)
            }
        }
        return bytes
    }

    private func appendStamp(_ stamp: Stamp) {
        BundleCodec.appendZigzag(stamp.hlc &- previousHLC, to: &record)
        BundleCodec.appendVarint(stamp.site, to: &record)
        BundleCodec.appendZigzag(stamp.seq &- previousSeq, to: &record)
        previousHLC = stamp.hlc
        previousSeq = stamp.seq
    }

    public func write(_ change: RowChange) throws {
        record.removeAll(keepingCapacity: true)
        var flags: BundleCodec.RowFlags = .row
        if change.rowStamp != nil { flags.insert(.hasRowStamp) }
        if change.table == previousTable { flags.insert(.sameTable) }
        let allInOrder =
            change.columns.count == nonKeyColumns[change.table].count
            && change.columns.map(\.column) == nonKeyColumns[change.table]
        if allInOrder { flags.insert(.allColumnsInOrder) }
        let shareRowStamp = change.rowStamp != nil && change.columns.allSatisfy { $0.stamp == change.rowStamp }
        if shareRowStamp { flags.insert(.columnsShareRowStamp) }
        if !change.counters.isEmpty { flags.insert(.hasCounters) }
        record.append(flags.rawValue)
        if !flags.contains(.sameTable) { BundleCodec.appendVarint(change.table, to: &record) }
        previousTable = change.table
        BundleCodec.appendVarint(change.causalLength, to: &record)
        if let rowStamp = change.rowStamp { appendStamp(rowStamp) }
        for value in change.key { BundleCodec.appendValue(value, to: &record) }
        if !allInOrder { BundleCodec.appendVarint(change.columns.count, to: &record) }
        for column in change.columns {
            if !allInOrder { BundleCodec.appendVarint(column.column, to: &record) }
            BundleCodec.appendValue(column.value, to: &record)
            if shareRowStamp { continue }
            if column.stamp == change.rowStamp {
                record.append(0)
            } else {
                record.append(1)
                appendStamp(column.stamp)
            }
        }
        if !change.counters.isEmpty {
            BundleCodec.appendVarint(change.counters.count, to: &record)
            for counter in change.counters {
                BundleCodec.appendVarint(counter.column, to: &record)
                appendStamp(counter.stamp)
                BundleCodec.appendVarint(counter.folded, to: &record)
                BundleCodec.appendValue(counter.total, to: &record)
            }
        }
        try records.write(record)
        recordCount += 1
    }

    /// Ends the payload, signs it, flushes the file and renames it into place.
    /// Returns the size of the finished file in bytes.
    @discardableResult
    public func finish(signingKey: SigningKey) throws -> Int {
        var end: [UInt8] = [BundleCodec.endRecord]
        BundleCodec.appendVarint(recordCount, to: &end)
        try records.write(end)
        try records.finish()
        let digest = try output.digest()
        let signature = try SSHSignature.sign(messageDigest: digest, namespace: BundleCodec.signatureNamespace, key: signingKey)
            .blob
        output.hashing = false
        var trailer = signature
        let length = UInt32(signature.count)
        trailer.append(contentsOf: [
            UInt8(length >> 24), UInt8(length >> 16 & 0xff), UInt8(length >> 8 & 0xff), UInt8(length & 0xff),
        ])
        trailer.append(contentsOf: BundleCodec.trailerMagic)
        try output.write(trailer)
        try output.sync()
        if rename(output.path, destination) != 0 {
            throw BundleError(
                .io, "\(destination): cannot rename the finished bundle into place: \(String(cString: strerror(errno)))")
        }
        finished = true
        let directory = URL(fileURLWithPath: destination).deletingLastPathComponent().path
        let directoryDescriptor = open(directory, O_RDONLY | O_DIRECTORY)
        if directoryDescriptor >= 0 {
            fsync(directoryDescriptor)
            close(directoryDescriptor)
        }
        return output.bytesWritten
    }
}
