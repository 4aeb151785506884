#!/bin/bash
# Makes an upgrade fixture (docs/install.md "Upgrades"): a small data directory written by the
# build in BIN_DIR (spaced, space, space-init of a release), packed as
# fixtures/NAME.tar.zst, and fixtures/NAME.env with what test_upgrade.sh must find in it.
# Run it once per release with that release's build, and commit both files:
#   tests/upgrade/make-fixture.sh /path/to/release/build/bin schema2-5cd4805
# What is in it: a template (a tiny tree, no programs: they come from the host at test
# time), session A with two labelled snapshots, a change no snapshot holds when SIGTERM
# comes (the last snapshot takes it) and an event of its own; session B paused (a parked
# layer); session C forked from A's first snapshot (a snapshot layer); session E of tenant
# alice, made with her API token; a revoked token. Root only.
# Usage: make-fixture.sh BIN_DIR NAME
set -eu
BIN=$(cd "${1:?usage: make-fixture.sh BIN_DIR NAME}" && pwd)
NAME=${2:?usage: make-fixture.sh BIN_DIR NAME}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$HERE/fixtures
[ "$(id -u)" -eq 0 ] || { echo "make-fixture: root needed (sandboxes)" >&2; exit 1; }
T=$(mktemp -d /tmp/space-fixture.XXXXXX)
DATA=$T/data
PID=
trap '[ -n "$PID" ] && kill -9 "$PID" 2>/dev/null; rm -rf "$T"' EXIT
export SPACE_HOST=unix:$DATA/spaced.sock SPACE_CONFIG=/dev/null
unset SPACE_TOKEN SPACE_DATA SPACE_SESSION_TOKEN
sp() { "$BIN/space" "$@"; }

mkdir -p "$T/rootfs"/{bin,root,tmp,etc,proc,dev,sys}
echo fixture >"$T/rootfs/etc/hostname"
ALICE=$("$BIN/spaced" token add --data "$DATA" --tenant alice --name alice-ci)
REVOKED=$("$BIN/spaced" token add --data "$DATA" --tenant bob --name bob-old)
"$BIN/spaced" token revoke --data "$DATA" "$REVOKED" >/dev/null

# no quota volume (a small fixture); releases from before disk limits have no such option
novol=
"$BIN/spaced" --help | grep -q -- --disk-volume-size && novol="--disk-volume-size 0"
# shellcheck disable=SC2086
"$BIN/spaced" --data "$DATA" $novol --log-level debug >"$T/spaced.log" 2>&1 &
PID=$!
for _ in $(seq 100); do sp health >/dev/null 2>&1 && break; sleep 0.1; done
sp health >/dev/null 2>&1 || { tail -n 20 "$T/spaced.log"; echo "make-fixture: spaced did not start" >&2; exit 1; }
sp template build mini --from-dir "$T/rootfs" >/dev/null

A=$(sp create --template mini --memory 64M --token-file "$T/a.token")
echo v1 >"$T/notes"
sp cp "$T/notes" "$A:/root/notes.txt"
S1=$(sp snapshot --label v1 "$A")
echo v2 >"$T/notes"
sp cp "$T/notes" "$A:/root/notes.txt"
mkdir -p "$T/tree/deep/er"
echo leaf >"$T/tree/deep/er/leaf.txt"
sp cp "$T/tree" "$A:/root/"
S2=$(sp snapshot --label v2 "$A")
echo v3 >"$T/notes"
sp cp "$T/notes" "$A:/root/notes.txt"
SEQ=$(sp event --kind tool_call --data '{"tool":"grep","args":["-r","TODO"]}' "$A")

B=$(sp create --template mini --memory 64M)
echo paused >"$T/p"
sp cp "$T/p" "$B:/root/paused.txt"
sp pause "$B" >/dev/null

C=$(sp fork --snapshot "$S1" "$A")

E=$(SPACE_TOKEN=$ALICE sp create --template mini --memory 64M)
echo alice >"$T/e"
SPACE_TOKEN=$ALICE sp cp "$T/e" "$E:/root/alice.txt"

kill -TERM "$PID"
wait "$PID" || { tail -n 30 "$T/spaced.log"; echo "make-fixture: spaced did not stop cleanly" >&2; exit 1; }
PID=
SCHEMA=$(sqlite3 "$DATA/meta.db" 'SELECT max(version) FROM meta_schema')
VERSION=$("$BIN/spaced" --version | awk '{print $2}')

mkdir -p "$OUT"
rm -f "$DATA/spaced.lock" "$DATA/spaced.sock"
tar -C "$DATA" --zstd --numeric-owner --xattrs --xattrs-include='*' --acls --sparse -cf "$OUT/$NAME.tar.zst" .
cat >"$OUT/$NAME.env" <<EOF
# Made by tests/upgrade/make-fixture.sh with spaced $VERSION (meta schema $SCHEMA) on $(date -u +%Y-%m-%d).
FX_VERSION=$VERSION
FX_SCHEMA=$SCHEMA
FX_A=$A
FX_A_TOKEN=$(cat "$T/a.token")
FX_S1=$S1
FX_S2=$S2
FX_EVENT_SEQ=$SEQ
FX_B=$B
FX_C=$C
FX_E=$E
FX_ALICE=$ALICE
FX_REVOKED=$REVOKED
EOF
ls -l "$OUT/$NAME.tar.zst" "$OUT/$NAME.env"
