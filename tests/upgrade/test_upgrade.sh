#!/bin/bash
# Upgrades keep data (docs/install.md "Upgrades"): every fixture in fixtures/ is a data
# directory an older spaced wrote (make-fixture.sh); this spaced opens it, migrated
# forward, and finds what the fixture's .env says: the sessions in their states, A's files
# with the change only SIGTERM's last snapshot held, its labelled snapshots (restorable),
# its own event, B paused and resumable, C forked, E of tenant alice behind her API token,
# the revoked token refused, A's session token; the store verifies clean afterwards.
# Then the downgrade: a data directory whose metadata schema or store format is newer
# than this spaced's is refused with both versions named, and left byte for byte as it
# was. Root only; ~30 s. Usage: test_upgrade.sh SPACED_BINARY FIXTURES_DIR
. "$(dirname "$0")/../integration/daemon/lib.sh" upgrade "${1:-}"
FIXTURES=${2:?usage: test_upgrade.sh SPACED FIXTURES_DIR}
SPACE=$BIN/space
export SPACE_CONFIG=/dev/null
unset SPACE_TOKEN SPACE_DATA SPACE_SESSION_TOKEN SPACE_LOG
for t in sqlite3 zstd sha256sum; do
        command -v $t >/dev/null || { echo "FAIL: $t is missing (scripts/install-deps installs it)"; exit 1; }
done
BUSYBOX=$(command -v busybox || true)
sp() { SPACE_HOST=unix:$S "$SPACE" "$@"; }
schema_of() { sqlite3 "$1/meta.db" 'SELECT max(version) FROM meta_schema'; }
unpack() { # fixture, directory
        rm -rf "$2" && mkdir -p "$2" &&
                tar -C "$2" -x --zstd --numeric-owner --xattrs --xattrs-include='*' --acls -f "$1"
}
stop_daemon() { # SIGTERM, as a service manager stops it; its status
        kill -TERM "$PID"
        wait "$PID"
        local rc=$?
        PID=
        return $rc
}
# Every file of a directory with its checksum, and every name: what a refusal must not change.
fingerprint() { (cd "$1" && find . -printf '%y %m %U:%G %s %p\n' | sort && find . -type f -exec sha256sum {} + | sort -k 2); }

# The schema this spaced writes: the version of a metadata store it makes anew.
"$SPACED" token list --data "$T/fresh" >/dev/null 2>&1
CURRENT=$(schema_of "$T/fresh")
echo "# this spaced writes meta schema $CURRENT"
check "this spaced writes a schema version" test -n "$CURRENT"

n_fixtures=0
for fx in "$FIXTURES"/*.tar.zst; do
        [ -f "$fx" ] || continue
        n_fixtures=$((n_fixtures + 1))
        name=$(basename "$fx" .tar.zst)
        # shellcheck disable=SC1090
        . "${fx%.tar.zst}.env"
        echo "# fixture $name: spaced $FX_VERSION, meta schema $FX_SCHEMA"
        unpack "$fx" "$DATA" || { bad "$name: unpacking"; continue; }
        check "$name: its schema is the one its .env says" test "$(schema_of "$DATA")" = "$FX_SCHEMA"
        check "$name: this spaced starts on it" start_daemon --disk-volume-size 0
        [ -n "$PID" ] || continue
        check "$name: the schema is migrated forward to $CURRENT, each step recorded" \
                test "$(schema_of "$DATA")/$(sqlite3 "$DATA/meta.db" 'SELECT count(*) FROM meta_schema')" = "$CURRENT/$CURRENT"

        # ---- sessions in their states ----
        state() { api "http://x/v1/sessions/$1" | jget state; }
        check "$name: A is running again (SIGTERM stopped it, this start brought it back)" test "$(state "$FX_A")" = running
        check "$name: B is still paused" test "$(state "$FX_B")" = paused
        check "$name: C, forked from A's first snapshot, is running" test "$(state "$FX_C")" = running
        check "$name: the operator's list has A, B and C" \
                test "$(api http://x/v1/sessions | jx '[req("sessions")[] | req("id")] | sort | join(",")')" = \
                "$(printf '%s\n' "$FX_A" "$FX_B" "$FX_C" | sort | paste -sd,)"

        # ---- A: files, snapshots, events ----
        check "$name: A has the change that only SIGTERM's last snapshot held" \
                test "$(sp cp "$FX_A:/root/notes.txt" - 2>&1)" = v3
        check "$name: ... and a file deep in a tree" test "$(sp cp "$FX_A:/root/tree/deep/er/leaf.txt" - 2>&1)" = leaf
        snaps=$(api "http://x/v1/sessions/$FX_A/snapshots")
        check "$name: A's timeline has its labelled snapshots" \
                test "$(echo "$snaps" | jx '[req("snapshots")[] | select(req("reason") == "manual") | "\(req("id"))=\(req("label"))"] | join(",")')" = \
                "$FX_S1=v1,$FX_S2=v2"
        check "$name: ... and the last one SIGTERM took, newest" \
                test "$(echo "$snaps" | jx 'req("snapshots") | last | req("reason")')" = rolling
        events=$(api "http://x/v1/sessions/$FX_A/events?limit=1000")
        check "$name: A's own event is in its log, same sequence number and data" \
                test "$(echo "$events" | jx '[req("events")[] | select(req("kind") == "tool_call")] | first | "\(req("seq")) \(.data.tool) \(.data.args | join(" "))"')" = \
                "$FX_EVENT_SEQ grep -r TODO"
        check "$name: ... and the restart after it" \
                test "$(echo "$events" | jx '[req("events")[] | select(req("kind") == "lifecycle" and .data.event == "restarted")] | length')" -ge 1
        # Schema 3 (the event log's bounds) counts the events an older spaced wrote.
        posted=$(echo "$events" | jx '[req("events")[] | select(req("kind") | IN("agent", "tool_call", "note"))] | length')
        check "$name: the migration counted A's posted events ($posted) for the log's bounds" \
                test "$(sqlite3 "$DATA/meta.db" "SELECT agent_events FROM sessions WHERE id = '$FX_A'")" = "$posted"
        sp restore "$FX_A" "$FX_S1" >/dev/null 2>&1
        check "$name: restoring A's first snapshot gives its files" \
                test "$(sp cp "$FX_A:/root/notes.txt" - 2>&1)/$(sp cp "$FX_A:/root/tree/deep/er/leaf.txt" - >/dev/null 2>&1 || echo gone)" = v1/gone
        sp restore "$FX_A" "$FX_S2" >/dev/null 2>&1
        check "$name: ... and the second's" \
                test "$(sp cp "$FX_A:/root/notes.txt" - 2>&1)/$(sp cp "$FX_A:/root/tree/deep/er/leaf.txt" - 2>&1)" = v2/leaf
        if [ -n "$BUSYBOX" ] && ! ldd "$BUSYBOX" >/dev/null 2>&1; then
                sp cp "$BUSYBOX" "$FX_A:/root/busybox" >/dev/null 2>&1
                check "$name: a command runs in A (a static busybox copied in)" \
                        test "$(sp exec "$FX_A" -- /root/busybox cat /root/notes.txt 2>&1)" = v2
        fi

        # ---- B, C ----
        sp resume "$FX_B" >/dev/null 2>&1
        check "$name: B resumes with its files" \
                test "$(state "$FX_B")/$(sp cp "$FX_B:/root/paused.txt" - 2>&1)" = running/paused
        check "$name: C has the files of the snapshot it was forked from" test "$(sp cp "$FX_C:/root/notes.txt" - 2>&1)" = v1

        # ---- tokens ----
        check "$name: A's session token still reconnects" sp connect "$FX_A" --token "$FX_A_TOKEN"
        check "$name: ... a wrong one does not" sh -c "! SPACE_HOST=unix:$S '$SPACE' connect '$FX_A' --token x$FX_A_TOKEN >/dev/null 2>&1"
        check "$name: alice's API token sees E, only E" \
                test "$(SPACE_TOKEN=$FX_ALICE sp ls --quiet 2>&1)" = "$FX_E"
        check "$name: ... with its files" test "$(SPACE_TOKEN=$FX_ALICE sp cp "$FX_E:/root/alice.txt" - 2>&1)" = alice
        check "$name: the revoked token stays refused (401)" \
                test "$(code -H "Authorization: Bearer $FX_REVOKED" http://x/v1/sessions)" = 401
        "$SPACED" token list --data "$DATA" >"$T/tokens" 2>&1
        check "$name: spaced token list has both, one revoked" \
                sh -c "grep -q 'alice.*alice-ci' '$T/tokens' && grep 'bob.*bob-old' '$T/tokens' | grep -q revoked"

        check "$name: SIGTERM stops it cleanly" stop_daemon
        check "$name: the store verifies clean" "$BIN/space-store" --quiet --store "$DATA/store" verify
        check "$name: a second start brings all four back" start_daemon --disk-volume-size 0
        check "$name: ... running, running, running, and E" sh -c "
                test \"\$(SPACE_HOST=unix:$S '$SPACE' ls --quiet | sort | paste -sd,)\" = '$(printf '%s\n' "$FX_A" "$FX_B" "$FX_C" | sort | paste -sd,)' &&
                test \"\$(SPACE_HOST=unix:$S SPACE_TOKEN=$FX_ALICE '$SPACE' ls --quiet)\" = '$FX_E'"
        [ -n "$PID" ] && stop_daemon
done
check "at least one fixture was found in $FIXTURES" test "$n_fixtures" -ge 1

# ---- downgrade: a data directory of a newer spaced is refused, untouched ----
refused() { # data dir, what the error must say; spaced must exit 3 without serving
        local d=$1 want=$2
        fingerprint "$d" >"$T/before"
        timeout 60 "$SPACED" --data "$d" --disk-volume-size 0 >"$T/refused.log" 2>&1
        local rc=$?
        cat "$T/refused.log" >>"$LOG"
        rm -f "$d/spaced.lock" # the one file spaced makes before it looks: the lock
        fingerprint "$d" >"$T/after"
        [ "$rc" = 3 ] || { echo "# exit status $rc, not 3"; return 1; }
        grep -q -- "$want" "$T/refused.log" || { echo "# no '$want' in:"; cat "$T/refused.log"; return 1; }
        grep -q "refusing the data directory $d, nothing in it was changed" "$T/refused.log" || return 1
        diff "$T/before" "$T/after" >/dev/null || { diff "$T/before" "$T/after" | head; return 1; }
}
# the fixture of the oldest schema: a refusal must not migrate it either
fx=$(for f in "$FIXTURES"/*.env; do echo "$(sed -n 's/^FX_SCHEMA=//p' "$f") ${f%.env}.tar.zst"; done | sort -n | head -n 1 | cut -d' ' -f2)
# shellcheck disable=SC1090
. "${fx%.tar.zst}.env"
echo "# downgrades on $(basename "$fx") (schema $FX_SCHEMA)"
NEWER=$((CURRENT + 1))
unpack "$fx" "$T/down"
sqlite3 "$T/down/meta.db" "INSERT INTO meta_schema (version, applied_ms) VALUES ($NEWER, 0)"
check "a metadata schema newer than this spaced's ($NEWER): refused, both versions named, nothing changed" \
        refused "$T/down" "schema version $NEWER is newer than this program's $CURRENT"
"$SPACED" token list --data "$T/down" >/dev/null 2>&1
check "... spaced token refuses it too" test $? != 0
unpack "$fx" "$T/down"
printf 'space-store 99\n' >"$T/down/store/format"
check "a store format newer than this spaced's: refused, the format named, nothing changed" \
        refused "$T/down" 'unsupported format ("space-store 99")'
check "... and the meta schema was not migrated either" test "$(schema_of "$T/down")" = "$FX_SCHEMA"

finish upgrade
