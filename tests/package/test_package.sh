#!/bin/bash
# The Debian package as an operator meets it (docs/install.md): the .debs that
# package.build made, installed with dpkg into a fresh Debian root (a copy of the
# debootstrapped bookworm that the runtime tests cache in /var/cache/space), with the
# runtime dependencies it lacks from scripts/install-deps's offline cache, never the
# network. Inside that root (dpkg and the client through chroot, spaced through
# pivot_root: the kernel makes no user namespace for a chrooted process), all in a mount
# namespace of its own: the files are the package's and where Debian wants them, its
# Depends and Recommends suffice; spaced starts from the unit's
# ExecStart line with the packaged configuration, under the unit's capability bounding
# set, says READY=1 on $NOTIFY_SOCKET; a session runs a command; SIGTERM (what systemd
# sends, KillMode=mixed) takes the last snapshot and exits 0, the next start brings the
# session back with its files; nothing is left outside /var/lib/space and
# /var/cache/space; purge removes the package's files and keeps the data.
# Root only (exit 77 otherwise). Usage: test_package.sh DEB_DIR
set -u
DEBS=${1:?usage: test_package.sh DEB_DIR}
CACHE=${SPACE_CACHE:-/var/cache/space}
DEPS=${SPACE_DEBS:-$CACHE/debs}
PASS=0
FAIL=0
. "$(dirname "${BASH_SOURCE[0]}")/../check.sh"
if [ "$(id -u)" -ne 0 ]; then
        echo "SKIP: installing a package into a root and running sandboxes needs root"
        exit 77
fi

# Everything below runs in a mount namespace of its own: the root's /proc, /sys and /dev
# and whatever spaced mounts in it go away with the namespace, whatever happens.
if [ -z "${SPACE_PKG_NS:-}" ]; then
        exec env SPACE_PKG_NS=1 unshare --mount --propagation private "$0" "$@"
fi

for t in dpkg dpkg-deb dpkg-query setpriv socat zstd chroot; do
        command -v $t >/dev/null || { echo "FAIL: $t is missing (scripts/install-deps installs it)"; exit 1; }
done
SPACE_DEB=$(ls "$DEBS"/space_*_amd64.deb 2>/dev/null | head -n 1)
LIB_DEB=$(ls "$DEBS"/libspace0_*_amd64.deb 2>/dev/null | head -n 1)
[ -f "$SPACE_DEB" ] && [ -f "$LIB_DEB" ] || { echo "FAIL: no space and libspace0 .debs in $DEBS (package.build)"; exit 1; }
ls "$DEPS"/*.deb >/dev/null 2>&1 || { echo "FAIL: no runtime .debs in $DEPS (scripts/install-deps fetches them)"; exit 1; }
BASE=
for f in "$CACHE"/debootstrap-bookworm-*.tar.zst; do [ -f "$f" ] && BASE=$f && break; done
[ -n "$BASE" ] || { echo "FAIL: no debootstrapped bookworm in $CACHE (the base_cache fixture makes it)"; exit 1; }

T=$(mktemp -d /var/tmp/space-package.XXXXXX)
R=$T/root
PID=
NOTIFY=
cleanup() {
        if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
                kill -TERM "$PID"
                for _ in $(seq 300); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
                kill -9 "$PID" 2>/dev/null
        fi
        [ -n "$NOTIFY" ] && kill "$NOTIFY" 2>/dev/null
        # Mounts of this namespace inside the root, deepest first (the namespace dies with
        # us anyway; unmounting first keeps rm -rf on this side of every mount).
        grep -o " $R[^ ]*" /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
        rm -rf "$T"
}
trap cleanup EXIT
mkdir -p "$R"
echo "# root from $BASE"
zstd -dc "$BASE" | tar -C "$R" -x --numeric-owner --xattrs --xattrs-include='*' --acls -f - ||
        { echo "FAIL: extracting $BASE"; exit 1; }
in_root() { chroot "$R" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }

# ---- install: the runtime dependencies the root lacks or has older, then the package ----
# Recommends too, as apt installs them: the first alternative of each (btrfs-progs: the
# quota volume on kernels whose ext4 has no project quotas).
recommends=$(dpkg-deb -f "$SPACE_DEB" Recommends | tr ',' '\n' | sed 's/|.*//; s/(.*//; s/ //g' | grep .)
mkdir -p "$R/tmp/debs"
for d in "$DEPS"/*.deb; do
        p=$(dpkg-deb -f "$d" Package)
        v=$(dpkg-deb -f "$d" Version)
        have=$(dpkg-query --admindir="$R/var/lib/dpkg" -W -f '${Status} ${Version}' "$p" 2>/dev/null |
                sed -n 's/^install ok installed //p')
        if [ -z "$have" ] || dpkg --compare-versions "$have" lt "$v"; then cp "$d" "$R/tmp/debs/"; fi
done
for p in $recommends; do
        ls "$DEPS/${p}"_*.deb >/dev/null 2>&1 || { echo "FAIL: Recommends $p is not in $DEPS (scripts/install-deps)"; exit 1; }
done
echo "# from the offline cache: $(cd "$R/tmp/debs" && ls | sed 's/_.*//' | tr '\n' ' ')"
cp "$SPACE_DEB" "$LIB_DEB" "$R/tmp/"
# shellcheck disable=SC2046
in_root dpkg -i $(cd "$R" && ls tmp/debs/*.deb 2>/dev/null | sed 's|^|/|') /tmp/"$(basename "$SPACE_DEB")" \
        /tmp/"$(basename "$LIB_DEB")" >"$T/dpkg.log" 2>&1
rc=$?
check "dpkg -i installs space and libspace0 with their dependencies, offline" test "$rc" = 0
[ "$rc" = 0 ] || { tail -n 30 "$T/dpkg.log"; exit 1; }
check "dpkg says both are installed, and what they recommend ($(echo $recommends))" \
        test "$(in_root dpkg-query -W -f '${Status}|' space libspace0 $recommends)" = \
        "$(for _ in space libspace0 $recommends; do printf 'install ok installed|'; done)"
check "the package's files are as dpkg installed them (dpkg --verify)" test -z "$(in_root dpkg --verify space libspace0)"
in_root dpkg -L space libspace0 | sort -u >"$T/files"
# the packages' own files and links (not their directories, which others share)
for d in "$SPACE_DEB" "$LIB_DEB"; do dpkg-deb -c "$d"; done | awk '$1 !~ /^d/ { print $6 }' | sed 's|^\.||' | sort >"$T/own"
outside=$(grep -v '^/\.$' "$T/files" | grep -Ev '^/(usr|usr/(bin|sbin|lib|libexec|share)(/.*)?|etc|etc/space(/.*)?|lib|lib/systemd|lib/systemd/system(/spaced\.service)?|var|var/lib|var/lib/space|var/cache|var/cache/space)$')
check "every file is under /usr, /etc/space, the unit dir or the two data dirs (others: ${outside:-none})" test -z "$outside"
check "no file under /usr/local or /opt" test -z "$(grep -E '^/(usr/local|opt)(/|$)' "$T/files")"
check "/etc/space/spaced.conf is a conffile" grep -qx '/etc/space/spaced.conf [0-9a-f]*' <(in_root dpkg-query -W -f '${Conffiles}\n' space | sed 's/^ //')
check "/var/lib/space and /var/cache/space are the package's" sh -c "grep -qx /var/lib/space '$T/files' && grep -qx /var/cache/space '$T/files'"
check "the packaged configuration passes spaced --check-config" in_root spaced --check-config >"$T/check.out" 2>&1
check "... the installed spaced finds the installed space-init" grep -q '^#init = /usr/libexec/space/space-init ' "$T/check.out"

# What the root holds outside the data dirs, before spaced ever ran (compared at the end).
snapshot_root() {
        (cd "$R" && find . -xdev \( -path ./proc -o -path ./sys -o -path ./dev -o -path ./tmp -o -path ./var/lib/space \
                -o -path ./var/cache/space -o -path ./var/log \) -prune -o -print | sort)
}
snapshot_root >"$T/before"

# ---- the service, as systemd would start it ----
U=$R/lib/systemd/system/spaced.service
EXEC=$(sed -n 's/^ExecStart=//p' "$U")
caps=$(sed -n '/^CapabilityBoundingSet=/,/[^\\]$/p' "$U" | tr -d '\\\n' | sed 's/^CapabilityBoundingSet=//')
BOUNDING="-all$(for c in $caps; do printf ',+%s' "$(echo "${c#CAP_}" | tr 'A-Z' 'a-z')"; done)"
echo "# ExecStart=$EXEC"
echo "# bounding set: $BOUNDING"
mount -t proc proc "$R/proc"
mount --rbind /sys "$R/sys"
mount --rbind /dev "$R/dev"
# what StateDirectory=space and CacheDirectory=space would do, and the base template's
# debootstrap result, so that building it needs no network
mkdir -p "$R/var/lib/space" "$R/var/cache/space"
for f in "$CACHE"/debootstrap-bookworm-*.tar.zst; do
        ln "$f" "$R/var/cache/space/" 2>/dev/null || cp "$f" "$R/var/cache/space/"
done
# systemd's end of $NOTIFY_SOCKET (socat writes the datagrams one after the other)
socat -u UNIX-RECV:"$R/tmp/notify.sock" OPEN:"$T/notify.log",creat,append 2>/dev/null &
NOTIFY=$!
for _ in $(seq 50); do [ -S "$R/tmp/notify.sock" ] && break; sleep 0.05; done

# The root as a mount namespace's own root (pivot_root), then CMD in it, with the unit's
# bounding set and systemd's clean environment. unshare, sh and chroot exec one another:
# the pid stays spaced's.
start_service() {
        : >"$T/notify.log"
        # shellcheck disable=SC2016,SC2086
        setpriv --bounding-set="$BOUNDING" unshare --mount --propagation private /bin/sh -c '
                mount --rbind "$1" "$1" && cd "$1" && mkdir -p tmp/.oldroot && pivot_root . tmp/.oldroot &&
                        shift && exec chroot . /bin/sh -c "umount -l /tmp/.oldroot && rmdir /tmp/.oldroot && exec \"\$@\"" sh "$@"' \
                sh "$R" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
                NOTIFY_SOCKET=/tmp/notify.sock $EXEC >>"$T/spaced.log" 2>&1 &
        PID=$!
        for _ in $(seq 1200); do
                grep -q 'READY=1' "$T/notify.log" 2>/dev/null && return 0
                kill -0 "$PID" 2>/dev/null || break
                sleep 0.05
        done
        echo "# spaced did not say READY=1:"
        tail -n 30 "$T/spaced.log"
        return 1
}
stop_service() { # what systemctl stop does with KillMode=mixed: SIGTERM, then wait
        kill -TERM "$PID"
        local t0=$SECONDS
        wait "$PID"
        local rc=$?
        PID=
        echo "# stopped in $((SECONDS - t0)) s, status $rc"
        return $rc
}

check "spaced starts from ExecStart and says READY=1 on \$NOTIFY_SOCKET" start_service
check "... READY=1 came after the API socket was up" test -S "$R/var/lib/space/spaced.sock"
check "... once: no part of spaced saw \$NOTIFY_SOCKET but spaced itself" test "$(grep -o 'READY=1' "$T/notify.log" | wc -l)" = 1
check "... under the unit's bounding set" sh -c "grep -q '^CapBnd:' /proc/$PID/status &&
        test \"\$(grep '^CapBnd:' /proc/$PID/status | awk '{print \$2}')\" != \"\$(grep '^CapBnd:' /proc/self/status | awk '{print \$2}')\""

t0=$SECONDS
in_root space template build base >"$T/template.log" 2>&1
template_ready() { in_root space template ls --quiet | grep -qx base; }
check "space template build base: from the cached debootstrap result, no network ($((SECONDS - t0)) s)" template_ready
template_ready || tail -n 20 "$T/template.log"
ID=$(in_root space create 2>"$T/create.err")
check "space create answers a session ($ID)" sh -c "echo '$ID' | grep -q '^ses_'"
check "space exec runs a command in it" test "$(in_root space exec "$ID" -- python3 -c 'print(6*7)' 2>&1)" = 42
SBX=$(in_root space inspect "$ID" 2>/dev/null | sed -n 's/.*"sandbox_id": *"\(sbx_[0-9a-z]*\)".*/\1/p' | head -n 1)
echo "# sandbox $SBX"
in_root space exec "$ID" -- sh -c 'echo kept > /root/kept.txt' >/dev/null 2>&1
check "systemd would see the service stop cleanly: SIGTERM, exit 0" stop_service
check "... STOPPING=1 came first" sh -c "tr '\n' ' ' <'$T/notify.log' | grep -q 'READY=1.*STOPPING=1'"
check "... its sandbox is gone: no cgroup, no process ($SBX)" sh -c "
        test -n '$SBX' && test -z \"\$(find /sys/fs/cgroup -maxdepth 4 -name '$SBX' 2>/dev/null)\" &&
        ! grep -qs '/$SBX\$' /proc/[0-9]*/cgroup"
check "spaced starts again" start_service
check "... the session is back, running, its file there" \
        test "$(in_root space exec "$ID" -- cat /root/kept.txt 2>&1)" = kept
chroot "$R" space snapshots "$ID" >"$T/snapshots.out" 2>&1
chroot "$R" space events "$ID" >"$T/events.out" 2>&1
check "... from the last snapshot SIGTERM took (a rolling one; event restarted)" sh -c "
        grep -q rolling '$T/snapshots.out' && grep -q restarted '$T/events.out'"
if ! grep -q rolling "$T/snapshots.out" || ! grep -q restarted "$T/events.out"; then
        echo "# snapshots:"; sed 's/^/#   /' "$T/snapshots.out"
        echo "# events:"; tail -n 12 "$T/events.out" | sed 's/^/#   /'
        echo "# spaced's log:"; tail -n 30 "$T/spaced.log" | sed 's/^/#   /'
fi
in_root space rm "$ID" >/dev/null 2>&1
check "... and stops again" stop_service

check "nothing left outside /var/lib/space and /var/cache/space (new: $(snapshot_root | comm -13 "$T/before" - | head -5 | tr '\n' ' '))" \
        test -z "$(snapshot_root | comm -13 "$T/before" -)"
check "no mount of spaced's is left in the root" \
        test -z "$(grep -o " $R/[^ ]*" /proc/self/mountinfo | grep -Ev " $R/(proc|sys|dev)(/|$)")"
check "no loop device is left on the quota volume's image" test -z "$(losetup -j "$R/var/lib/space/vol.img" 2>/dev/null)"

# ---- remove and purge ----
umount -l "$R/proc" "$R/sys" "$R/dev" 2>/dev/null
in_root dpkg --purge space libspace0 >"$T/purge.log" 2>&1
check "dpkg --purge removes both" test "$?" = 0
left=
while read -r f; do
        if [ -f "$R$f" ] || [ -L "$R$f" ]; then left="$left $f"; fi
done <"$T/own"
check "every file of theirs is gone (left:${left:- none})" test -z "$left"
check "/etc/space is gone with its conffile" test ! -e "$R/etc/space"
check "the template cache is gone" test ! -e "$R/var/cache/space"
check "the data directory stays, and purge says so" sh -c "test -s '$R/var/lib/space/meta.db' && grep -q 'is kept' '$T/purge.log'"

if [ "$FAIL" -ne 0 ]; then
        echo "--- spaced log (last 60 lines)"
        tail -n 60 "$T/spaced.log"
fi
echo "package: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
