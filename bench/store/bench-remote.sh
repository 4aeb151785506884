#!/bin/sh
# The remote tier's benchmark (issue #17), JSON lines, one run: replication throughput of
# `space-store push` against `s3cmd put --recursive` of the same files to the same private
# Swift (tests/s3/s3-server), and the restore of the snapshot on a "host" with a cold cache
# (pull into an empty store, then get) against a warm one (get from the store that has it).
# Not a ctest test; run by hand:
#   sh bench/store/bench-remote.sh build/bin/space-store [SIZE_MB...]   (default 100)
# BENCH_JOBS: the push concurrencies to measure (default "1 4 8"). Each size: half incompressible random files of 4 MiB, half base64 text in 256 KiB files.
set -eu
ST=${1:?usage: bench-remote.sh SPACE_STORE_BINARY [SIZE_MB...]}
shift
sizes=${*:-100}
here=$(cd "$(dirname "$0")" && pwd)
srv=$here/../../tests/s3/s3-server
command -v s3cmd >/dev/null || { echo "bench-remote: s3cmd is not installed (scripts/install-deps)" >&2; exit 1; }
T=$(mktemp -d "${BENCH_DIR:-/var/tmp}/space-bench-remote.XXXXXX")
trap 'sh "$srv" stop "$T/srv" >/dev/null 2>&1 || true; rm -rf "$T"' EXIT
out=$(sh "$srv" start "$T/srv")
port=$(echo "$out" | sed -n 's|.*endpoint=http://127.0.0.1:\([0-9]*\).*|\1|p')
export SPACE_S3_ENDPOINT=http://127.0.0.1:$port SPACE_S3_ACCESS_KEY=test:tester SPACE_S3_SECRET_KEY=testing
cat > "$T/s3cfg" <<E
[default]
access_key = test:tester
secret_key = testing
host_base = 127.0.0.1:$port
host_bucket = 127.0.0.1:$port
use_https = False
bucket_location = us-east-1
signature_v2 = False
E
now() { date +%s.%N; }
secs() { echo "$2 - $1" | bc -l | sed 's/^\./0./'; }
mb() { i=0; until s3cmd -c "$T/s3cfg" mb "s3://$1" >/dev/null 2>&1; do i=$((i+1)); [ $i -lt 30 ] || exit 1; sleep 0.5; done; }
for size in $sizes; do
  d=$T/tree-$size
  mkdir -p "$d/bin" "$d/text"
  half=$((size * 1024 * 1024 / 2))
  n=0; while [ $((n * 4194304)) -lt $half ]; do head -c 4194304 /dev/urandom > "$d/bin/r$n"; n=$((n+1)); done
  n=0; while [ $((n * 262144)) -lt $half ]; do head -c 196608 /dev/urandom | base64 -w 0 | head -c 262144 > "$d/text/t$n"; n=$((n+1)); done
  bytes=$(du -sb "$d" | cut -f1)
  files=$(find "$d" -type f | wc -l)
  snap=$("$ST" --quiet --store "$T/A-$size" put "$d")
  sync
  mb "ref-$size"
  t0=$(now); s3cmd -c "$T/s3cfg" put --recursive --disable-multipart --no-progress --quiet "$d/" "s3://ref-$size/t/"; t1=$(now)
  ref=$(secs "$t0" "$t1")
  for jobs in ${BENCH_JOBS:-1 4 8}; do
    mb "spc-$size-$jobs"
    t0=$(now)
    SPACE_S3_BUCKET=spc-$size-$jobs "$ST" --quiet --store "$T/A-$size" push "$snap" --jobs $jobs --json > "$T/push.json"
    t1=$(now)
    p=$(secs "$t0" "$t1")
    sent=$(sed -n 's/.*"bytes_sent":\([0-9]*\).*/\1/p' "$T/push.json")
    echo "{\"bench\":\"remote_push\",\"size_mb\":$size,\"files\":$files,\"bytes\":$bytes,\"jobs\":$jobs,\"push_s\":$p,\"bytes_sent\":$sent,\"s3cmd_put_s\":$ref,\"speed_ratio\":$(echo "$ref / $p" | bc -l | cut -c1-5)}"
  done
  # restore: cold (an empty store pulls, then gets) against warm (the store has it)
  sync # (no drop_caches: the machine is shared; both gets read packs from the page cache)
  t0=$(now)
  SPACE_S3_BUCKET=spc-$size-$jobs "$ST" --quiet --store "$T/B-$size" pull "$snap" --jobs 4
  t1=$(now)
  "$ST" --quiet --store "$T/B-$size" get "$snap" "$T/cold-$size"
  t2=$(now)
  "$ST" --quiet --store "$T/A-$size" get "$snap" "$T/warm-$size"
  t3=$(now)
  diff -r "$d" "$T/cold-$size" >/dev/null || { echo "bench-remote: the cold restore differs" >&2; exit 1; }
  echo "{\"bench\":\"remote_restore\",\"size_mb\":$size,\"bytes\":$bytes,\"cold_pull_s\":$(secs "$t0" "$t1"),\"cold_get_s\":$(secs "$t1" "$t2"),\"cold_total_s\":$(secs "$t0" "$t2"),\"warm_get_s\":$(secs "$t2" "$t3")}"
  rm -rf "$d" "$T/cold-$size" "$T/warm-$size" "$T/A-$size" "$T/B-$size"
done
