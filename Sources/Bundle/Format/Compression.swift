import CZlib

/// zlib for a segment's chunks (docs/BUNDLE_FORMAT.md, "Chunks"). A chunk must inflate to
/// exactly the length its signed header declares, so a reader never holds more than one
/// chunk and a bundle cannot inflate past what it declares: a decompression bomb fails on
/// its first chunk.
enum BlockCompression {
    /// Level 6 (zlib's default) gives most of level 9's size at a fraction of its time.
    static let level: Int32 = 6

    /// The most zlib can make of `raw` bytes.
    static func bound(_ raw: Int) -> Int { Int(compressBound(uLong(raw))) }

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

/// The records of one chunk, inflated whole (a chunk is at most
/// ``BundleLimits/maxChunkBytes``) and decoded in place.
final class ChunkSource: ByteSource {
    let path: String
    // Every value read touches these two, a few times a byte. A reader is used by one task
    // and no access to them overlaps another, so Swift's run-time exclusivity check (a
    // runtime call and a thread-local lookup each time) is left out.
    @exclusivity(unchecked) private var block: [UInt8] = []
    @exclusivity(unchecked) private var position = 0

    init(path: String) {
        self.path = path
    }

    /// True once every byte of the chunk was read.
    var isAtEnd: Bool { position == block.count }

    /// Inflates a chunk whose hash was checked; it must come out exactly `rawLength` bytes.
    func load(_ compressed: [UInt8], rawLength: Int) throws {
        try BlockCompression.inflate(compressed, rawLength: rawLength, into: &block, path: path)
        position = 0
    }

    func readByte() throws -> UInt8 {
        guard position < block.count else { throw corrupt("a record runs past its chunk") }
        defer { position += 1 }
        return block[position]
    }

    func readText(_ count: Int) throws -> String? {
        guard count <= block.count - position else { throw corrupt("a record runs past its chunk") }
        defer { position += count }
        return block.withUnsafeBufferPointer {
            BundleCodec.text(UnsafeBufferPointer(rebasing: $0[position..<(position + count)]))
        }
    }

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
        guard block.count - position >= 8 else { throw corrupt("a record runs past its chunk") }
        defer { position += 8 }
        return block.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(fromByteOffset: position, as: UInt64.self)) }
    }

    func readBytes(_ count: Int) throws -> [UInt8] {
        guard count <= block.count - position else { throw corrupt("a record runs past its chunk") }
        defer { position += count }
        return Array(block[position..<(position + count)])
    }
}
