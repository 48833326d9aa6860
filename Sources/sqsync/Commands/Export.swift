import ArgumentParser
import Bundle
import ChangeLog
import Foundation

extension SQSync {
    struct Export: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write one signed bundle with the changes a peer lacks (default: every change).")

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The replica.") var db: String
        @Option(name: .shortAndLong, help: ArgumentHelp("The bundle file to write.", valueName: "FILE")) var output: String?
        @Option(name: .long, help: ArgumentHelp("Write into this folder under a generated name.", valueName: "DIR")) var to:
            String?
        @Option(
            name: .customLong("for"),
            help: ArgumentHelp("Only what this peer (name or knowledge ID) has not acknowledged.", valueName: "PEER"))
        var peer: String?
        @Option(name: .long, help: ArgumentHelp("Only what this knowledge lacks (ID:SEQ,ID:SEQ…).", valueName: "KNOWLEDGE"))
        var since: String?

        func validate() throws {
            if (output == nil) == (to == nil) { throw ValidationError("give exactly one of -o FILE and --to DIR") }
            if peer != nil && since != nil { throw ValidationError("--for and --since cannot be used together") }
            if let since {
                do { _ = try Knowledge(parsing: since) } catch { throw ValidationError("\(error)") }
            }
        }

        func run() throws {
            let replica = try Replica(path: db)
            let key = try global.signingKey()
            var base = Knowledge()
            if let peer { base = try replica.peer(named: peer).acknowledged }
            if let since { base = try Knowledge(parsing: since) }
            if let to {
                var isDirectory: ObjCBool = false
                guard FileManager.default.fileExists(atPath: to, isDirectory: &isDirectory), isDirectory.boolValue else {
                    throw Failure.raise("\(to): no such directory")
                }
            }
            let result = try BundleExchange.export(
                replica: replica, since: base, key: key, to: to ?? output!, intoDirectory: to != nil,
                progress: global.progress("exporting"))
            global.endProgress()
            if global.json {
                global.emitJSON([
                    "path": result.path, "rows": result.rows, "bytes": result.bytes,
                    "knowledge": Dictionary(uniqueKeysWithValues: zip(result.header.sites, result.header.knowledge)),
                ])
            } else {
                global.say("wrote \(result.path): \(counted(result.rows, "row")) changed, \(counted(result.bytes, "byte"))")
            }
        }
    }
}
