#!/usr/bin/env bash
# `make test`: build, run every XCTest test, and end with one plain summary line.
set -uo pipefail
SWIFT=${SWIFT:-swift}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$SWIFT" build --build-tests || exit 1
"$SWIFT" test --skip-build --disable-swift-testing 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
summary=$(grep -E 'Executed [0-9]+ tests?, with [0-9]+ failures?' "$log" | tail -n 1)
total=$(sed -E 's/.*Executed ([0-9]+) tests?.*/\1/' <<<"$summary")
failed=$(sed -E 's/.*with ([0-9]+) failures?.*/\1/' <<<"$summary")
if [ -n "$summary" ]; then
    echo "$((total - failed)) passed, $failed failed"
else
    echo "0 passed, 1 failed"
    [ "$status" -ne 0 ] || status=1
fi
exit "$status"
