#!/usr/bin/env bash
# The demo: two replicas of one database, written to by the sqlite3 shell, kept in step
# through a shared folder. Run by `make demo` after the build.
set -euo pipefail
SQSYNC=${SQSYNC:-$(cd "$(dirname "$0")/.." && pwd)/.build/debug/sqsync}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "Keys: one per replica, both trusted (allowed_signers)"
"$SQSYNC" keygen --out hq.key --name hq >allowed_signers
"$SQSYNC" keygen --out field.key --name field >>allowed_signers
export SQSYNC_TRUST=$work/allowed_signers

step "HQ creates the database and tracks it; the field site gets a clone (each replica's ID is made from its key)"
sqlite3 hq.db "CREATE TABLE sites (id TEXT PRIMARY KEY, name TEXT NOT NULL, visits INTEGER NOT NULL DEFAULT 0, notes TEXT);"
"$SQSYNC" init hq.db --name hq --key hq.key
"$SQSYNC" track hq.db sites
"$SQSYNC" clone hq.db field.db --name field --key field.key

step "Both sides write with the sqlite3 shell, while apart"
sqlite3 hq.db "INSERT INTO sites (id, name) VALUES ('0190d5a1-0001-7000-8000-000000000001', 'North well'),
                                                   ('0190d5a1-0002-7000-8000-000000000002', 'River gauge');"
sqlite3 field.db "INSERT INTO sites (id, name, visits) VALUES ('0190d5a1-0003-7000-8000-000000000003', 'Hill camp', 1);"
sqlite3 hq.db "UPDATE sites SET notes = 'pump replaced' WHERE name = 'North well';"
"$SQSYNC" status hq.db

step "Sync both through a shared folder (a USB stick works the same)"
mkdir -p shared
SQSYNC_KEY=$work/hq.key "$SQSYNC" sync hq.db shared
SQSYNC_KEY=$work/field.key "$SQSYNC" sync field.db shared
sqlite3 field.db "UPDATE sites SET visits = visits + 1 WHERE name = 'North well';"
SQSYNC_KEY=$work/field.key "$SQSYNC" sync field.db shared
SQSYNC_KEY=$work/hq.key "$SQSYNC" sync hq.db shared
find shared -type f | sort

step "They agree"
query="SELECT name, visits, coalesce(notes, '') FROM sites ORDER BY id;"
echo "hq:";    sqlite3 -column hq.db "$query"
echo "field:"; sqlite3 -column field.db "$query"
if [ "$(sqlite3 hq.db "$query")" = "$(sqlite3 field.db "$query")" ]; then
    echo "OK: both replicas hold the same rows"
else
    echo "FAIL: the replicas differ" >&2
    exit 1
fi
