#!/bin/bash
# 50 sandboxes alive at once, each running a command; then all deleted, and nothing of
# them is left: no session, mount, cgroup or process.
. "$(dirname "$0")/lib.sh"

N=${E2E_SCALE_N:-50}
ids=()
say "creating $N sandboxes"
t0=$(now_ms)
for i in $(seq 1 "$N"); do
        id=$(new_sandbox --memory 128M) || { fail "create #$i: $(sp create 2>&1 </dev/null | tail -1)"; break; }
        ids+=("$id")
done
t1=$(now_ms)
expect_eq "sandboxes created" "${#ids[@]}" "$N"
echo "   ($((t1 - t0)) ms, $(((t1 - t0) / (${#ids[@]} > 0 ? ${#ids[@]} : 1))) ms each)"

say "each runs a command in the background that keeps it busy, all at the same time"
ok=0
for i in "${!ids[@]}"; do
        p=$(sp exec -d "${ids[$i]}" -- sh -c "echo hello-$i; sleep 30" </dev/null) && ok=$((ok + 1))
done
expect_eq "background commands started" "$ok" "${#ids[@]}"
running=$(sp ls --json | jq -r '[.sessions[] | select(.state == "running")] | length')
[ "$running" -ge "${#ids[@]}" ] && pass "$running sessions running at once" || fail "only $running running"
ok=0
for i in "${!ids[@]}"; do
        out=$(sp exec "${ids[$i]}" -- sh -c "echo fg-$i" </dev/null)
        [ "$out" = "fg-$i" ] && ok=$((ok + 1))
done
expect_eq "a foreground command answered in every sandbox while all are alive" "$ok" "${#ids[@]}"

say "deleting all of them"
t0=$(now_ms)
sp rm "${ids[@]}" >/dev/null && pass "rm of ${#ids[@]} sessions" || fail "rm reported errors"
t1=$(now_ms)
echo "   ($((t1 - t0)) ms)"
left=$(sp ls --quiet)
n=0
for id in "${ids[@]}"; do
        case " $(echo $left) " in *" $id "*) n=$((n + 1)) ;; esac
done
expect_eq "sessions still listed" "$n" "0"
junk=""
for id in "${ids[@]}"; do
        l=$(leftovers "$(sandbox_of "$id")" "$(init_pid_of "$id")")
        [ -n "$l" ] && junk="$junk$l
"
done
expect_eq "mounts, cgroups and init processes left" "$junk" ""
finish
