import Bundle
import ChangeLog

/// One line about a range of another replica's changes this replica lacks (sync, status).
func describe(_ gap: KnowledgeGap) -> String {
    let who = displayText(gap.name.isEmpty ? gap.origin : "\(gap.name) (\(gap.origin))")
    return "lacks the changes of \(who) after \(gap.holdsThrough) through \(gap.missingThrough) (holds later ones); they come with the next sync with any replica that holds them"
}

/// The `--json` form of a gap (docs/JSON_OUTPUT.md).
func gapJSON(_ gap: KnowledgeGap) -> [String: Any] {
    [
        "origin": gap.origin, "name": displayText(gap.name), "holds_through": gap.holdsThrough,
        "missing_from": gap.holdsThrough + 1, "missing_through": gap.missingThrough,
    ]
}

/// One warning about a value left out of bundles for its size (sync, export).
func describe(_ value: WithheldValue) -> String {
    "table \(displayText(value.table)), key \(displayText(value.key)): a value of \(value.bytes) bytes in column \(displayText(value.column)) is larger than a bundle may carry (SQSYNC_MAX_VALUE_BYTES is \(BundleLimits.maxValueBytes)); left out, the other changes went; it goes once it fits (make it smaller, or raise the cap on every replica)"
}

/// The `--json` form of a value left out (docs/JSON_OUTPUT.md).
func withheldJSON(_ value: WithheldValue) -> [String: Any] {
    ["table": displayText(value.table), "key": displayText(value.key), "column": displayText(value.column), "bytes": value.bytes]
}
