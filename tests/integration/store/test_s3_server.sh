#!/bin/sh
# store.s3_server: the private Swift of tests/s3/s3-server answers S3 (issue #17): a bucket,
# a put, a get of the same bytes, a ListObjectsV2 that names the key, 404 for a missing key,
# 403 for a wrong secret; then stop leaves no process and no directory. curl signs with
# --aws-sigv4, libcurl's CURLOPT_AWS_SIGV4, which the store's client is to use.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
srv=$here/../../s3/s3-server
command -v swift-proxy-server >/dev/null || { echo "SKIP: swift is not installed"; exit 77; }
D=$(mktemp -d /tmp/space-s3.XXXXXX); rmdir "$D"
trap '"$srv" stop "$D"' EXIT
out=$("$srv" start "$D")
port=$(echo "$out" | sed -n 's|.*endpoint=http://127.0.0.1:\([0-9]*\).*|\1|p')
[ -n "$port" ] || { echo "FAIL: no endpoint in: $out"; exit 1; }
E=http://test%3Atester:testing@127.0.0.1:$port
s3() { curl -s -m 10 --aws-sigv4 aws:amz:us-east-1:s3 -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$@"; }
fail() { echo "FAIL: $*"; exit 1; }
# The proxy answers /healthcheck before the account server takes requests: up to 10 s.
i=0
until c=$(s3 -o /dev/null -w "%{http_code}" -X PUT "$E/bkt"); [ "$c" = 200 ]; do
  i=$((i+1)); [ $i -lt 20 ] || fail "create bucket: HTTP $c"; sleep 0.5
done
head -c 100000 /dev/urandom > "$D.obj"
[ "$(s3 -o /dev/null -w '%{http_code}' -T "$D.obj" "$E/bkt/a/k1")" = 200 ] || fail put
s3 -o "$D.got" "$E/bkt/a/k1"; cmp "$D.obj" "$D.got" || fail "get returned other bytes"
s3 "$E/bkt?list-type=2&prefix=a%2F" | grep -q '<Key>a/k1</Key>' || fail "list does not name a/k1"
[ "$(s3 -o /dev/null -w '%{http_code}' "$E/bkt/nokey")" = 404 ] || fail "missing key not 404"
[ "$(s3 -o /dev/null -w '%{http_code}' "http://test%3Atester:bad@127.0.0.1:$port/bkt/a/k1")" = 403 ] ||
  fail "wrong secret not 403"
rm -f "$D.obj" "$D.got"
pids=$(cat "$D"/run/*.pid)
trap - EXIT
"$srv" stop "$D"
[ ! -e "$D" ] || fail "stop left $D"
for p in $pids; do ! kill -0 "$p" 2>/dev/null || fail "stop left pid $p"; done
echo "PASS"
