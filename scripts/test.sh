#!/usr/bin/env bash
# `make test`: build, run every XCTest test, and end with one plain summary line,
# `N passed, N failed, N skipped`, counted over the whole run (scripts/test-summary.sh).
set -uo pipefail
SWIFT=${SWIFT:-swift}
here=$(dirname "$0")
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! "$SWIFT" build --build-tests; then
    echo "the test build failed"
    "$here/test-summary.sh" "$log" 1
    exit 1
fi
"$SWIFT" test --skip-build --disable-swift-testing 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
"$here/test-summary.sh" "$log" "$status" || exit 1
exit "$status"
