#!/bin/sh
# runsc with fault injection, for test_gvisor_resume.sh (SPACE_RUNSC points here): while
# DATA/fault holds N > 0, each of the next N relay execs (`runsc exec ID /dev/.space-init
# --relay ...`, the first thing after a create or restore) SIGKILLs that sandbox's process
# first, as something outside the daemon could. DATA is found from --root=DATA/runsc.
RUNSC=${SPACE_TEST_REAL_RUNSC:-/usr/bin/runsc}
root= prev=
for a; do
        case $a in --root=*) root=${a#--root=} ;; esac
        if [ "$prev" = exec ] && [ -n "$root" ] && [ -s "${root%/runsc}/fault" ]; then
                f=${root%/runsc}/fault
                n=$(cat "$f")
                [ "$n" -gt 0 ] 2>/dev/null || continue
                echo $((n - 1)) >"$f"
                for p in $(pgrep -f "runsc-sandbox.*boot"); do
                        if tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | grep -qx -- "$a"; then
                                kill -9 "$p" && echo "killed sandbox $a (pid $p)" >>"${root%/runsc}/fault.log"
                        fi
                done
        fi
        prev=$a
done
exec "$RUNSC" "$@"
