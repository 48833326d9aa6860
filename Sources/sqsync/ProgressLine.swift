import ChangeLog
import FoundationEssentials
import Glibc

/// Draws a long step's progress on one line of stderr, as rsync's `--info=progress2` and
/// restic do: the step, a percentage and the counts with their total, redrawn in place a few
/// times a second. Only on a terminal, never under `-q` or `--json`, and only once the command
/// has run `SQSYNC_PROGRESS_DELAY` seconds (default 1): a quick command prints nothing more.
final class ProgressLine {
    private let label: String
    private let started = ProgressLine.now()
    private let delay: Double
    private var lastDrawn = -Double.infinity
    private(set) var drew = false

    private init(label: String) {
        self.label = label
        delay = ProcessInfo.processInfo.environment["SQSYNC_PROGRESS_DELAY"].flatMap(Double.init) ?? 1
    }

    /// A line for `label` when stderr is a terminal and the options allow one.
    static func make(_ label: String, global: GlobalOptions) -> ProgressLine? {
        guard !global.quiet, !global.json, isatty(2) == 1 else { return nil }
        return ProgressLine(label: label)
    }

    func draw(_ progress: WorkProgress) {
        let now = Self.now()
        guard now - started >= delay, now - lastDrawn >= 0.2 || progress.done >= progress.total else { return }
        lastDrawn = now
        drew = true
        let total = max(progress.total, progress.done, 1)
        let percent = progress.done * 100 / total
        let rate = Double(progress.done) / max(now - started, 0.001)
        writeStandardError(
            "\r\u{1B}[K\(label): \(progress.step) \(percent)% (\(grouped(progress.done)) of \(grouped(total)) \(progress.unit), \(grouped(Int(rate)))/s)"
        )
    }

    /// Clears the line, so the command's own message starts on a clean one.
    func end() {
        if drew { writeStandardError("\r\u{1B}[K") }
        drew = false
    }

    /// Watches `replica`'s long work until ``end()``.
    func watch(_ replica: Replica) {
        replica.progress = { [weak self] in self?.draw($0) }
    }

    private func grouped(_ number: Int) -> String {
        var digits = Array(String(number))
        var index = digits.count - 3
        while index > 0 {
            digits.insert(",", at: index)
            index -= 3
        }
        return String(digits)
    }

    private static func now() -> Double {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
    }
}
