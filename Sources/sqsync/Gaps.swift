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
