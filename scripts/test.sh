#!/usr/bin/env bash
# `make test`: build, run every XCTest test, and end with one plain summary line,
# `N passed, N failed, N skipped`, counted over the whole run (scripts/test-summary.sh).
#
# The suites run SQSYNC_TEST_WORKERS at a time (default 3 on the 2 cores of the machine CI
# runs on: with 2, a core stood idle an eighth of the time while suites waited on the sqsync,
# sshd and S3 processes they start), each in a test process of its own taking the next suite
# as it finishes one.
# Each suite's log is printed whole as it ends.
#
# SQSYNC_TEST_SUITES names the suites to run (space-separated); by default every suite but
# InstallTests, which packages the static release build (`make test-install`).
# SQSYNC_BUILD_FLAGS are the flags of the debug build (the Makefile's DEBUG_BUILD_FLAGS).
set -uo pipefail
SWIFT=${SWIFT:-swift}
workers=${SQSYNC_TEST_WORKERS:-3}
here=$(dirname "$0")
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
read -ra build_flags <<<"${SQSYNC_BUILD_FLAGS-"-debug-info-format none"}"
if ! "$SWIFT" build --build-tests "${build_flags[@]}"; then
    echo "the test build failed"
    : >"$logs/all.log"
    "$here/test-summary.sh" "$logs/all.log" 1
    exit 1
fi
tests="$("$SWIFT" build --show-bin-path)/sqsyncPackageTests.xctest"

# The slowest suites first, so that no worker starts one of them last.
slowest="GrantBindingCLITests MergePolicyCLITests DigestMailboxTests SyncRcloneTests MigrationCLITests ScopeCLITests
BundleFormatTests OperatorMistakesTests MergeCLITests OriginSignatureTests SyncRobustnessTests MigrationRecipeTests"
suites=$("$tests" --list-tests | sed -nE 's#^([A-Za-z0-9_]+\.[A-Za-z0-9_]+)/.*#\1#p' | sort -u)
ordered=$(
    for name in $slowest; do grep -E "\.$name\$" <<<"$suites"; done
    for suite in $suites; do grep -qwF "${suite#*.}" <<<"$slowest" || echo "$suite"; done
)
if [ -n "${SQSYNC_TEST_SUITES:-}" ]; then
    ordered=$(for suite in $ordered; do grep -qwF "${suite#*.}" <<<"$SQSYNC_TEST_SUITES" && echo "$suite"; done)
else
    ordered=$(grep -v '\.InstallTests$' <<<"$ordered")
fi

export tests logs
run_suite() {
    "$tests" "$1" >"$logs/$1.log" 2>&1
    local status=$?
    flock "$logs/.print" cat "$logs/$1.log"
    return "$status"
}
export -f run_suite
xargs -P "$workers" -I{} bash -c 'run_suite "$1"' _ {} <<<"$ordered"
status=$?

for suite in $ordered; do cat "$logs/$suite.log"; done >"$logs/all.log"
"$here/test-summary.sh" "$logs/all.log" "$status" || exit 1
exit "$status"
