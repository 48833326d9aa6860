/// "1 bundle", "2 bundles", "0 rows": a count with its noun in the right number.
func counted(_ count: Int, _ singular: String, _ plural: String? = nil) -> String {
    "\(count) \(count == 1 ? singular : plural ?? singular + "s")"
}
