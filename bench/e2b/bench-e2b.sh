#!/bin/sh
# bench-e2b: E2B's SDK against libspace on the same spaced, in one run (bench-e2b.mjs;
# docs/performance.md "E2B"). The daemon must serve both: SPACE_HOST for libspace, and
# E2B_API_URL = E2B_SANDBOX_URL (its --e2b-listen) with E2B_API_KEY (spaced token add
# --e2b) for the SDK. Copied to build/bin beside bench-e2b-native.
# Usage: bench-e2b [--runs N] [--max-seconds S] [--template NAME]   (defaults 20, 60, base)
set -eu
E2B_DIR=@E2B_DIR@
BENCH_DIR=@BENCH_DIR@
. "$E2B_DIR/node.sh"
NODE=$(e2b_node) || { echo "bench-e2b: no node >= 20.18.1: run scripts/install-deps" >&2; exit 1; }
[ -f "$E2B_DIR/node_modules/e2b/package.json" ] || { echo "bench-e2b: $E2B_DIR/node_modules has no e2b: run scripts/install-deps" >&2; exit 1; }
exec "$NODE" "$BENCH_DIR/bench-e2b.mjs" "$E2B_DIR" "$(dirname "$0")/bench-e2b-native" "$@"
