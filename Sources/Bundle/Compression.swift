import CZlib

/// Deflate blocks for the records of a version-2 bundle (docs/BUNDLE_FORMAT.md).
///
/// Records are cut into blocks of at most ``maxBlockBytes`` and each block is compressed on
/// its own with zlib, written as `varint(raw length) varint(compressed length) bytes`, and
/// the stream ends with an empty block. A block must inflate to exactly the length it
/// declares, so a reader never holds more than one block and a bundle cannot inflate past
/// what it declares: a decompression bomb fails on its first oversized block.
enum BlockCompression {
    static let maxBlockBytes = 1 << 20
    /// Records may inflate to this much whatever the bundle's size...
    static let inflateAllowance = 64 << 20
    /// ...and beyond it to this many times the compressed bytes read: row data compresses
    /// well, but never like a bomb (zlib's own limit is 1032:1).
    static let maxRatio = 256
    /// Level 6 (zlib's default) gives most of level 9's size at a fraction of its time.
    static let level: Int32 = 6

    static func compress(_ raw: [UInt8]) throws -> [UInt8] {
        var length = compressBound(uLong(raw.count))
        var output = [UInt8](repeating: 0, count: Int(length))
        let rc = output.withUnsafeMutableBufferPointer { out in
            raw.withUnsafeBufferPointer { input in
                compress2(out.baseAddress, &length, input.baseAddress, uLong(input.count), level)
            }
        }
        guard rc == Z_OK else { throw BundleError(.io, "zlib could not compress a block: \(message(rc))") }
        output.removeSubrange(Int(length)...)
        return output
    }

    /// Inflates one block into `output`, which must come out exactly `rawLength` bytes long.
    static func inflate(_ compressed: [UInt8], rawLength: Int, into output: inout [UInt8], path: String) throws {
        // Blocks are mostly the same size: the buffer is reused, not refilled.
        if output.count != rawLength { output = [UInt8](repeating: 0, count: rawLength) }
        var length = uLong(rawLength)
        var consumed = uLong(compressed.count)
        let rc = output.withUnsafeMutableBufferPointer { out in
            compressed.withUnsafeBufferPointer { input in
                uncompress2(out.baseAddress, &length, input.baseAddress, &consumed)
            }
        }
        if rc == Z_OK && Int(length) == rawLength && Int(consumed) == compressed.count { return }
        if rc == Z_BUF_ERROR && Int(length) == rawLength {
            throw BundleError(
                .corrupt, "\(path): damaged bundle (a compressed block inflates past the \(rawLength) bytes it declares)")
        }
        if rc == Z_OK {
            throw BundleError(
                .corrupt, "\(path): damaged bundle (a compressed block does not match its declared \(rawLength) bytes)")
        }
        throw BundleError(.corrupt, "\(path): damaged bundle (a compressed block does not inflate: \(message(rc)))")
    }

    /// zlib's own words for a return code.
    static func message(_ rc: Int32) -> String {
        zError(rc).map { String(cString: $0) } ?? "zlib error \(rc)"
    }
}

/// Collects record bytes and writes them as deflate blocks.
final class DeflatingOutput {
    private let output: HashingFileOutput
    private var pending: [UInt8] = []

    init(_ output: HashingFileOutput) {
        self.output = output
        pending.reserveCapacity(BlockCompression.maxBlockBytes)
    }

    func write(_ bytes: [UInt8]) throws {
        var rest = bytes[...]
        while !rest.isEmpty {
            let take = min(rest.count, BlockCompression.maxBlockBytes - pending.count)
            pending.append(contentsOf: rest.prefix(take))
            rest = rest.dropFirst(take)
            if pending.count == BlockCompression.maxBlockBytes { try flushBlock() }
        }
    }

    private func flushBlock() throws {
        guard !pending.isEmpty else { return }
        let compressed = try BlockCompression.compress(pending)
        var frame: [UInt8] = []
        BundleCodec.appendVarint(pending.count, to: &frame)
        BundleCodec.appendVarint(compressed.count, to: &frame)
        try output.write(frame)
        try output.write(compressed)
        pending.removeAll(keepingCapacity: true)
    }

    /// Writes the last block and the empty block that ends the stream.
    func finish() throws {
        try flushBlock()
        try output.write([0, 0])
    }
}

/// Reads the records of a version-2 bundle back out of its deflate blocks, one block in
/// memory at a time.
final class InflatingSource: ByteSource {
    let path: String
    private let input: HashingFileInput
    // Every value read touches these two, a few times a byte. A reader is used by one task
    // and no access to them overlaps another, so Swift's run-time exclusivity check (a
    // runtime call and a thread-local lookup each time) is left out.
    @exclusivity(unchecked) private var block: [UInt8] = []
    @exclusivity(unchecked) private var position = 0
    private var compressed: [UInt8] = []
    private var ended = false
    private var inflatedBytes = 0
    private var compressedBytes = 0

    init(_ input: HashingFileInput) {
        self.input = input
        self.path = input.path
    }

    /// True once the empty end block was read and every byte before it consumed.
    var isAtEnd: Bool { ended && position == block.count }

    private func nextBlock() throws -> Bool {
        guard !ended else { return false }
        let rawLength = try input.readCount(limit: BlockCompression.maxBlockBytes)
        let compressedLength = try input.readCount(limit: Int(compressBound(uLong(BlockCompression.maxBlockBytes))))
        if rawLength == 0 {
            guard compressedLength == 0 else { throw input.corrupt("an empty block with data") }
            ended = true
            block.removeAll(keepingCapacity: true)
            position = 0
            return false
        }
        compressedBytes += compressedLength
        inflatedBytes += rawLength
        guard inflatedBytes <= max(BlockCompression.inflateAllowance, BlockCompression.maxRatio * compressedBytes) else {
            throw BundleError(
                .corrupt,
                "\(path): damaged bundle (records inflate past \(BlockCompression.maxRatio) times their compressed size: a decompression bomb)"
            )
        }
        compressed = try input.readBytes(compressedLength)
        try BlockCompression.inflate(compressed, rawLength: rawLength, into: &block, path: path)
        position = 0
        return true
    }

    func readByte() throws -> UInt8 {
        while position == block.count {
            guard try nextBlock() else { throw corrupt("the records end in the middle of a record") }
        }
        defer { position += 1 }
        return block[position]
    }

    /// Text that lies within the current block is decoded in place: most values do, and
    /// this spares copying each one into an array first.
    func readText(_ count: Int) throws -> String? {
        guard count <= block.count - position else {
            return try readBytes(count).withUnsafeBufferPointer { BundleCodec.text($0) }
        }
        defer { position += count }
        return block.withUnsafeBufferPointer {
            BundleCodec.text(UnsafeBufferPointer(rebasing: $0[position..<(position + count)]))
        }
    }

    /// Decoded in place when the whole varint lies in the current block.
    func readVarint() throws -> UInt64 {
        let start = position
        let inBlock: UInt64? = block.withUnsafeBufferPointer { bytes in
            var result: UInt64 = 0
            var shift: UInt64 = 0
            var index = start
            while index < bytes.count && shift < 63 {
                let byte = bytes[index]
                index += 1
                result |= UInt64(byte & 0x7f) << shift
                if byte & 0x80 == 0 {
                    position = index
                    return result
                }
                shift += 7
            }
            return nil
        }
        return try inBlock ?? readVarintBytewise()
    }

    func readFixed64() throws -> UInt64 {
        guard block.count - position >= 8 else { return try readFixed64Bytewise() }
        defer { position += 8 }
        return block.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(fromByteOffset: position, as: UInt64.self)) }
    }

    func readBytes(_ count: Int) throws -> [UInt8] {
        var result: [UInt8] = []
        result.reserveCapacity(min(count, BlockCompression.maxBlockBytes))
        while result.count < count {
            while position == block.count {
                guard try nextBlock() else { throw corrupt("the records end in the middle of a record") }
            }
            let take = min(count - result.count, block.count - position)
            result.append(contentsOf: block[position..<(position + take)])
            position += take
        }
        return result
    }

    /// Reads the end block after the last record; anything else there is damage.
    func expectEnd() throws {
        if position == block.count && !ended { _ = try nextBlock() }
        guard isAtEnd else { throw corrupt("bytes after the end record") }
    }
}
