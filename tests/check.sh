# The TAP-like checks the shell tests share: ok/bad count, check runs a command.
# Sourced; the sourcing script prints its summary from PASS and FAIL.
PASS=${PASS:-0}
FAIL=${FAIL:-0}
ok() { echo "ok - $*"; PASS=$((PASS + 1)); }
bad() { echo "FAIL - $*"; FAIL=$((FAIL + 1)); }
check() { # description, then a command that must succeed
        local d=$1
        shift
        if "$@"; then ok "$d"; else bad "$d"; fi
}
