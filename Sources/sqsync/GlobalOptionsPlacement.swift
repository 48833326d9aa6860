import ArgumentParser

/// Lets the global options (SPEC §3) come before the subcommand, as in
/// `sqsync --json status DB`. swift-argument-parser only parses an `@OptionGroup` where it is
/// declared, on the subcommands, so the options found before the subcommand's name are
/// moved after it (after the deepest subcommand named, e.g. `peers retire`) before parsing.
/// Other flags found there move with them, so the subcommand reports an unknown one by its
/// own name (exit 2) and `sqsync --help status` shows the help of `status`. Without a
/// subcommand name nothing moves.
enum GlobalOptionsPlacement {
    static let flags: Set<String> = ["--json", "-q", "--quiet"]
    static let options: Set<String> = ["--key", "--trust"]

    static func reordered(_ arguments: [String], root: ParsableCommand.Type) -> [String] {
        var globals: [String] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            if flags.contains(argument) || options.contains(where: { argument.hasPrefix($0 + "=") }) {
                globals.append(argument)
                index += 1
            } else if options.contains(argument), index + 1 < arguments.count {
                globals += arguments[index...index + 1]
                index += 2
            } else if argument.hasPrefix("-") && argument != "--" {
                globals.append(argument)
                index += 1
            } else {
                break
            }
        }
        guard !globals.isEmpty else { return arguments }
        var command = root
        var path: [String] = []
        while index < arguments.count,
            let sub = command.configuration.subcommands.first(where: { $0._commandName == arguments[index] })
        {
            path.append(arguments[index])
            command = sub
            index += 1
        }
        guard !path.isEmpty else { return arguments }
        return path + globals + arguments[index...]
    }
}
