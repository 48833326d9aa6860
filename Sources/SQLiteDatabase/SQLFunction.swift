import CSQLite

/// An application-defined SQL function, registered on one connection with
/// ``Database/register(_:)`` (https://sqlite.org/appfunc.html). The body reads its
/// arguments in place and sets its result in place: no value is built on the way, so a
/// function that runs once per row costs a closure call over the C interface.
public struct SQLFunction {
    public struct Options: OptionSet, Sendable {
        public let rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }

        /// Same arguments, same result: SQLite may use it in indexes and factor calls out.
        public static let deterministic = Options(rawValue: SQLITE_DETERMINISTIC)
        /// Safe wherever the schema calls it (https://sqlite.org/deterministic.html).
        public static let innocuous = Options(rawValue: SQLITE_INNOCUOUS)
        /// Only top-level SQL may call it, never a trigger or a view: for side effects.
        public static let directOnly = Options(rawValue: SQLITE_DIRECTONLY)
    }

    let name: String
    let argumentCount: Int32
    let options: Options
    let kind: Kind

    enum Kind {
        case scalar((SQLFunctionArguments, SQLFunctionResult) -> Void)
        case aggregate(AggregateBox)
    }

    /// A scalar function; `argumentCount` -1 takes any number.
    public init(
        _ name: String, argumentCount: Int32, options: Options = [.deterministic],
        _ body: @escaping (SQLFunctionArguments, SQLFunctionResult) -> Void
    ) {
        self.name = name
        self.argumentCount = argumentCount
        self.options = options
        self.kind = .scalar(body)
    }

    /// An aggregate function: `makeState` starts each group, `step` sees each of its rows,
    /// `final` sets the result (with nil state for a group without rows).
    public static func aggregate<State: AnyObject>(
        _ name: String, argumentCount: Int32, options: Options = [.deterministic], makeState: @escaping () -> State,
        step: @escaping (State, SQLFunctionArguments) -> Void, final: @escaping (State?, SQLFunctionResult) -> Void
    ) -> SQLFunction {
        let box = AggregateBox(
            makeState: { makeState() },
            step: { state, arguments in step(state as! State, arguments) },
            final: { state, result in final(state.map { $0 as! State }, result) })
        return SQLFunction(name: name, argumentCount: argumentCount, options: options, kind: .aggregate(box))
    }

    private init(name: String, argumentCount: Int32, options: Options, kind: Kind) {
        self.name = name
        self.argumentCount = argumentCount
        self.options = options
        self.kind = kind
    }

    final class ScalarBox {
        let body: (SQLFunctionArguments, SQLFunctionResult) -> Void
        init(_ body: @escaping (SQLFunctionArguments, SQLFunctionResult) -> Void) { self.body = body }
    }

    final class AggregateBox {
        let makeState: () -> AnyObject
        let step: (AnyObject, SQLFunctionArguments) -> Void
        let final: (AnyObject?, SQLFunctionResult) -> Void
        init(
            makeState: @escaping () -> AnyObject, step: @escaping (AnyObject, SQLFunctionArguments) -> Void,
            final: @escaping (AnyObject?, SQLFunctionResult) -> Void
        ) {
            self.makeState = makeState
            self.step = step
            self.final = final
        }
    }
}

extension Database {
    /// Registers `function` on this connection; SQLite keeps it (and what its closure holds)
    /// until the connection closes or the function is registered again.
    public func register(_ function: SQLFunction) throws {
        let flags = SQLITE_UTF8 | function.options.rawValue
        let rc: Int32
        switch function.kind {
        case .scalar(let body):
            let box = Unmanaged.passRetained(SQLFunction.ScalarBox(body)).toOpaque()
            rc = sqlite3_create_function_v2(
                handle, function.name, function.argumentCount, flags, box, scalarTrampoline, nil, nil, releaseScalar)
        case .aggregate(let box):
            let pointer = Unmanaged.passRetained(box).toOpaque()
            rc = sqlite3_create_function_v2(
                handle, function.name, function.argumentCount, flags, pointer, nil, aggregateStep, aggregateFinal,
                releaseAggregate)
        }
        try check(rc, sql: "register SQL function \(function.name)")
    }
}

private let scalarTrampoline: @convention(c) (OpaquePointer?, Int32, UnsafeMutablePointer<OpaquePointer?>?) -> Void = {
    context, count, values in
    let box = Unmanaged<SQLFunction.ScalarBox>.fromOpaque(sqlite3_user_data(context)).takeUnretainedValue()
    box.body(SQLFunctionArguments(context: context, count: count, values: values), SQLFunctionResult(context: context))
}

private let releaseScalar: @convention(c) (UnsafeMutableRawPointer?) -> Void = { pointer in
    if let pointer { Unmanaged<SQLFunction.ScalarBox>.fromOpaque(pointer).release() }
}

private let releaseAggregate: @convention(c) (UnsafeMutableRawPointer?) -> Void = { pointer in
    if let pointer { Unmanaged<SQLFunction.AggregateBox>.fromOpaque(pointer).release() }
}

/// Each group's state lives in SQLite's aggregate context as a retained pointer.
private let aggregateStep: @convention(c) (OpaquePointer?, Int32, UnsafeMutablePointer<OpaquePointer?>?) -> Void = {
    context, count, values in
    let box = Unmanaged<SQLFunction.AggregateBox>.fromOpaque(sqlite3_user_data(context)).takeUnretainedValue()
    guard let slot = sqlite3_aggregate_context(context, Int32(MemoryLayout<UnsafeMutableRawPointer?>.size)) else {
        sqlite3_result_error_nomem(context)
        return
    }
    let pointer = slot.assumingMemoryBound(to: UnsafeMutableRawPointer?.self)
    if pointer.pointee == nil { pointer.pointee = Unmanaged.passRetained(box.makeState()).toOpaque() }
    let state = Unmanaged<AnyObject>.fromOpaque(pointer.pointee!).takeUnretainedValue()
    box.step(state, SQLFunctionArguments(context: context, count: count, values: values))
}

private let aggregateFinal: @convention(c) (OpaquePointer?) -> Void = { context in
    let box = Unmanaged<SQLFunction.AggregateBox>.fromOpaque(sqlite3_user_data(context)).takeUnretainedValue()
    let slot = sqlite3_aggregate_context(context, 0)
    let stored = slot?.assumingMemoryBound(to: UnsafeMutableRawPointer?.self).pointee
    let state = stored.map { Unmanaged<AnyObject>.fromOpaque($0).takeRetainedValue() }
    box.final(state, SQLFunctionResult(context: context))
}

/// The arguments of one call, read in place.
public struct SQLFunctionArguments {
    let context: OpaquePointer?
    public let count: Int
    let values: UnsafeMutablePointer<OpaquePointer?>?

    init(context: OpaquePointer?, count: Int32, values: UnsafeMutablePointer<OpaquePointer?>?) {
        self.context = context
        self.count = Int(count)
        self.values = values
    }

    public enum StorageClass { case null, integer, real, text, blob }

    public func storageClass(_ index: Int) -> StorageClass {
        switch sqlite3_value_type(values?[index]) {
        case SQLITE_INTEGER: return .integer
        case SQLITE_FLOAT: return .real
        case SQLITE_TEXT: return .text
        case SQLITE_BLOB: return .blob
        default: return .null
        }
    }

    public func int64(_ index: Int) -> Int64 { sqlite3_value_int64(values?[index]) }

    public func double(_ index: Int) -> Double { sqlite3_value_double(values?[index]) }

    /// The bytes of a TEXT (UTF-8) or BLOB argument, valid during the call; nil when SQLite
    /// ran out of memory making them (the result is then set to that error).
    public func bytes(_ index: Int) -> UnsafeRawBufferPointer? {
        let value = values?[index]
        let start =
            sqlite3_value_type(value) == SQLITE_TEXT ? UnsafeRawPointer(sqlite3_value_text(value)) : sqlite3_value_blob(value)
        let length = Int(sqlite3_value_bytes(value))
        guard length == 0 || start != nil else {
            sqlite3_result_error_nomem(context)
            return nil
        }
        return UnsafeRawBufferPointer(start: length == 0 ? nil : start, count: length)
    }

    /// A TEXT argument as a String (other types as SQLite converts them).
    public func string(_ index: Int) -> String? {
        guard let text = sqlite3_value_text(values?[index]) else { return nil }
        return String(cString: text)
    }

    public func value(_ index: Int) -> SQLValue {
        switch storageClass(index) {
        case .null: return .null
        case .integer: return .integer(int64(index))
        case .real: return .real(double(index))
        case .text: return .text(string(index) ?? "")
        case .blob: return .blob(bytes(index).map { Array($0) } ?? [])
        }
    }

    /// What an earlier call of the same statement left for argument `index`
    /// (`sqlite3_get_auxdata`): a value parsed once per statement instead of once per row.
    public func auxiliary<T: AnyObject>(_ index: Int, as type: T.Type) -> T? {
        guard let pointer = sqlite3_get_auxdata(context, Int32(index)) else { return nil }
        return Unmanaged<AnyObject>.fromOpaque(pointer).takeUnretainedValue() as? T
    }

    /// Keeps `object` with argument `index` for the statement's later calls while that
    /// argument stays the same.
    public func setAuxiliary(_ object: AnyObject, for index: Int) {
        sqlite3_set_auxdata(context, Int32(index), Unmanaged.passRetained(object).toOpaque(), releaseAuxiliary)
    }
}

private let releaseAuxiliary: @convention(c) (UnsafeMutableRawPointer?) -> Void = { pointer in
    if let pointer { Unmanaged<AnyObject>.fromOpaque(pointer).release() }
}

/// The result of one call, set in place.
public struct SQLFunctionResult {
    let context: OpaquePointer?

    public func setNull() { sqlite3_result_null(context) }
    public func setInt64(_ value: Int64) { sqlite3_result_int64(context, value) }
    public func setBool(_ value: Bool) { sqlite3_result_int(context, value ? 1 : 0) }

    /// A BLOB, copied by SQLite.
    public func setBlob(_ bytes: UnsafeRawBufferPointer) {
        if bytes.isEmpty {
            sqlite3_result_zeroblob(context, 0)
        } else {
            sqsync_result_blob(context, bytes.baseAddress, Int32(bytes.count))
        }
    }

    public func setBlob(_ bytes: [UInt8]) { bytes.withUnsafeBytes { setBlob($0) } }

    /// UTF-8 text, copied by SQLite.
    public func setText(_ text: String) {
        var text = text
        text.withUTF8 { buffer in
            buffer.withMemoryRebound(to: CChar.self) { sqsync_result_text(context, $0.baseAddress, Int32($0.count)) }
        }
    }

    /// The argument as it came, unconverted.
    public func setArgument(_ arguments: SQLFunctionArguments, _ index: Int) {
        sqlite3_result_value(context, arguments.values?[index])
    }

    public func setError(_ message: String) { sqlite3_result_error(context, message, -1) }
    public func setNoMemory() { sqlite3_result_error_nomem(context) }
}
