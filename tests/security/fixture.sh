#!/bin/bash
# ctest fixture of the escape suite. "setup" starts one spaced on a fresh data dir with the
# base template (the end-to-end fixture does that), plants a secret file on the host that
# no sandbox may read, and makes the main sandbox most attempts run in, with sec-probe
# installed. "cleanup" removes the secret, stops spaced, fails on any leftover mount,
# cgroup or process, and prints the suite's figures as its last lines.
# Usage: fixture.sh setup|cleanup BIN_DIR STATE_DIR PROBE FUZZ_FIGURES
set -u
action=${1:?usage: fixture.sh setup|cleanup BIN_DIR STATE_DIR PROBE FUZZ_FIGURES}
BIN=${2:?}
STATE=${3:?}
PROBE=${4:?}
FUZZ_FIGURES=${5:?}
here=$(cd "$(dirname "$0")" && pwd)
E2E_FIXTURE=$here/../e2e/fixture.sh

setup() {
        "$E2E_FIXTURE" setup "$BIN" "$STATE" || exit $?
        set -- "$BIN" "$STATE"
        . "$here/../e2e/lib.sh"
        trap - EXIT
        rm -rf "$TMPD"
        : >"$STATE/results"
        # The secret: in the host's /etc and in the daemon's data dir. Any attempt that
        # reads its value from inside has escaped.
        value="space-sec-secret-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
        path=/etc/space-sec-token-$$
        printf '%s\n' "$value" >"$path" && chmod 0644 "$path" || { echo "FAIL: cannot write $path"; exit 1; }
        printf '%s\n' "$value" >"$DATA/space-sec-token"
        echo "$path" >"$STATE/token.path"
        echo "$value" >"$STATE/token.value"
        echo "ok: host secret planted in $path and $DATA/space-sec-token"
        main=$(new_sandbox) || { echo "FAIL: cannot create the main sandbox"; exit 1; }
        echo "$main" >"$STATE/main"
        if ! sp cp "$PROBE" "$main:/usr/local/bin/sec-probe" </dev/null ||
                ! sp exec "$main" -- chmod 0755 /usr/local/bin/sec-probe </dev/null; then
                echo "FAIL: cannot install sec-probe in $main"
                exit 1
        fi
        out=$(sp exec "$main" -- /usr/local/bin/sec-probe ids </dev/null)
        echo "ok: main sandbox $main with sec-probe ($out)"
}

# Prints the figures issue 6 asks for, from what the tests recorded.
figures() {
        r=$STATE/results
        tried=$(grep -cE '^(blocked|escaped|defect|error) ' "$r" 2>/dev/null)
        blocked=$(grep -c '^blocked ' "$r" 2>/dev/null)
        escaped=$(grep -c '^escaped ' "$r" 2>/dev/null)
        errors=$(grep -c '^error ' "$r" 2>/dev/null)
        defects=$(grep -c '^defect ' "$r" 2>/dev/null)
        skipped=$(grep -c '^skipped ' "$r" 2>/dev/null)
        echo "==== security figures ===="
        echo "escape attempts: ${tried:-0} tried, $((blocked + defects)) blocked (${defects:-0} of them exposed a defect that is not an escape), ${escaped:-0} escaped, ${errors:-0} could not run; ${skipped:-0} skipped:"
        grep '^skipped ' "$r" 2>/dev/null | sed 's/^skipped /  skipped: /'
        grep '^escaped ' "$r" 2>/dev/null | sed 's/^escaped /  ESCAPED: /'
        grep '^defect ' "$r" 2>/dev/null | sed 's/^defect /  defect found: /'
        echo "fuzzing (libFuzzer, ASan+UBSan; $FUZZ_FIGURES):"
        grep -v '^#' "$FUZZ_FIGURES" 2>/dev/null | sed 's/^/  /'
        if [ -f "$STATE/soak" ]; then
                echo "soak:"
                sed 's/^/  /' "$STATE/soak"
        else
                echo "soak: not run"
        fi
}

cleanup() {
        if [ -f "$STATE/token.path" ]; then
                rm -f "$(cat "$STATE/token.path")"
                echo "ok: host secret removed"
        fi
        "$E2E_FIXTURE" cleanup "$BIN" "$STATE"
        rc=$?
        figures
        return $rc
}

case $action in
setup) setup ;;
cleanup) cleanup ;;
*) echo "unknown action $action"; exit 2 ;;
esac
