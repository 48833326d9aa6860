#!/usr/bin/env bash
# The last lines of `make test`, read from the XCTest log of the whole run.
# Usage: test-summary.sh LOG [STATUS]   (STATUS: the exit status of `swift test`, default 0)
#
# Counts every `Test Case '...' passed|failed|skipped` line, names each skipped test (with
# XCTSkip's reason) and each failed one on a line of its own, and ends with exactly one line
# `N passed, N failed, N skipped`. A test that started and never finished (the runner crashed)
# counts as failed; so does a run that exited non-zero with no failing test to show for it.
# Exits 1 when anything failed, else 0.
set -uo pipefail
log=$1
status=${2:-0}

finished=$(sed -nE "s/^Test Case '([^']+)' (passed|failed|skipped) \(.*/\2 \1/p" "$log")
started=$(sed -nE "s/^Test Case '([^']+)' started.*/\1/p" "$log" | sort -u)
count() { grep -c "^$1 " <<<"$finished"; }
passed=$(count passed)
failed=$(count failed)
skipped=$(count skipped)

while read -r verdict name; do
    case $verdict in
        failed) echo "failed: $name" ;;
        skipped)
            reason=$(grep -F ": $name : Test skipped" "$log" | head -n 1 | sed -n 's/.*: Test skipped - //p')
            echo "skipped: $name${reason:+ ($reason)}"
            ;;
    esac
done <<<"$finished"
crashed=$(comm -23 <(echo "$started") <(sed -E 's/^[a-z]+ //' <<<"$finished" | sort -u) | sed '/^$/d')
if [ -n "$crashed" ]; then
    sed 's/^/failed: /; s/$/ (started, never finished: the test process crashed)/' <<<"$crashed"
    failed=$((failed + $(wc -l <<<"$crashed")))
fi
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
    echo "failed: the test run itself (exit status $status, no failing test named)"
    failed=1
fi
if [ $((passed + failed + skipped)) -eq 0 ]; then
    echo "failed: no test ran"
    failed=1
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
