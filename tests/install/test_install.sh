#!/bin/bash
# `cmake --install` of the build into a DESTDIR, checked as an operator and a programmer
# would meet it (docs/install.md): exactly the files of the layout and nothing else; the
# installed spaced finds the installed space-init; the versions agree (spaced, space,
# libspace's file name, libspace.pc, debian/changelog); the configuration file names every
# option, each of them settable, and spaced's own errors name the file's line; the systemd
# unit passes systemd-analyze verify and says what the service needs; libspace.so exports
# only space_*, and a program built from libspace.pc alone talks to a daemon; the man pages
# render. No root needed, no daemon started.
# Usage: test_install.sh BUILD_DIR SOURCE_DIR
set -u
BUILD=${1:?usage: test_install.sh BUILD_DIR SOURCE_DIR}
SRC=${2:?usage: test_install.sh BUILD_DIR SOURCE_DIR}
PASS=0
FAIL=0
. "$(dirname "${BASH_SOURCE[0]}")/../check.sh"
for t in systemd-analyze pkg-config cc nm readelf socat; do
        command -v $t >/dev/null || { echo "FAIL: $t is missing (scripts/install-deps installs it)"; exit 1; }
done
T=$(mktemp -d /tmp/space-install.XXXXXX)
SOCAT=
trap '[ -n "$SOCAT" ] && kill "$SOCAT" 2>/dev/null; rm -rf "$T"' EXIT
D=$T/root

# The layout the build was configured for (CMakeCache.txt), as `cmake --install` sees it.
cache() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt"; }
PREFIX=$(cache CMAKE_INSTALL_PREFIX)
full() { # GNUInstallDirs: relative dirs lie under the prefix; /usr's etc is /etc
        local v
        v=$(cache "CMAKE_INSTALL_$1")
        case $1/$v in
        MANDIR/) v=$(cache CMAKE_INSTALL_DATAROOTDIR)/man ;;
        DOCDIR/) v=$(cache CMAKE_INSTALL_DATAROOTDIR)/doc/space ;;
        esac
        case $v in
        /*) echo "$v" ;;
        *) if [ "$1" = SYSCONFDIR ] && [ "$PREFIX" = /usr ]; then echo /etc; else echo "$PREFIX/$v"; fi ;;
        esac
}
BINDIR=$(full BINDIR)
SBINDIR=$(full SBINDIR)
LIBDIR=$(full LIBDIR)
LIBEXEC=$(full LIBEXECDIR)/space
SYSCONF=$(full SYSCONFDIR)
MANDIR=$(full MANDIR)
INCDIR=$(full INCLUDEDIR)
DOCDIR=$(full DOCDIR)
UNITDIR=$(cache SPACE_SYSTEMD_UNITDIR)
VERSION=$(sed -n 's/^project(space VERSION \([0-9.]*\) .*/\1/p' "$SRC/CMakeLists.txt")
echo "# prefix $PREFIX, version $VERSION"

if ! DESTDIR=$D cmake --install "$BUILD" >"$T/install.log" 2>&1; then
        cat "$T/install.log"
        echo "FAIL: cmake --install failed"
        exit 1
fi

# ---- the files, all of them and no other ----
{
        echo "$SBINDIR/spaced"
        echo "$BINDIR/space"
        echo "$BINDIR/space-store"
        echo "$LIBEXEC/space-init"
        echo "$LIBEXEC/libspace-statx.so"
        echo "$LIBEXEC/build-guest"
        echo "$LIBDIR/libspace.so"
        echo "$LIBDIR/libspace.so.0"
        echo "$LIBDIR/libspace.so.$VERSION"
        echo "$LIBDIR/pkgconfig/libspace.pc"
        echo "$INCDIR/space/space.h"
        echo "$SYSCONF/space/spaced.conf"
        echo "$UNITDIR/spaced.service"
        echo "$MANDIR/man8/spaced.8"
        echo "$MANDIR/man1/space.1"
        echo "$MANDIR/man1/space-store.1"
        echo "$DOCDIR/README.md"
        for f in "$SRC"/docs/*.md; do echo "$DOCDIR/docs/$(basename "$f")"; done
} | sort >"$T/want"
(cd "$D" && find . \( -type f -o -type l \) | sed 's|^\.||' | sort) >"$T/have"
check "cmake --install puts exactly the files of the layout" diff -u "$T/want" "$T/have"
check "spaced, space and space-store are executables; space-init is static" \
        test -x "$D$SBINDIR/spaced" -a -x "$D$BINDIR/space" -a -x "$D$BINDIR/space-store" -a -x "$D$LIBEXEC/space-init"
check "... space-init needs no shared library (it runs in any template and as a VM's /init)" \
        test -z "$(readelf -d "$D$LIBEXEC/space-init" 2>/dev/null | grep NEEDED)"
check "a second install keeps an edited configuration file" sh -c "
        echo '# edited' >>'$D$SYSCONF/space/spaced.conf' && DESTDIR='$D' cmake --install '$BUILD' >/dev/null &&
        tail -n 1 '$D$SYSCONF/space/spaced.conf' | grep -qx '# edited'"
cp "$SRC/dist/spaced.conf" "$D$SYSCONF/space/spaced.conf"

# ---- the installed programs find each other ----
SPACED=$D$SBINDIR/spaced
CONF=$D$SYSCONF/space/spaced.conf
env -u SPACE_DATA -u SPACE_LOG "$SPACED" --check-config --config "$CONF" >"$T/check.out" 2>&1
rc=$?
check "the packaged configuration passes spaced --check-config" test "$rc" = 0
check "the installed spaced finds the installed space-init" grep -q "^#init = $D$LIBEXEC/space-init " "$T/check.out"
check "... and its settings are the file's" grep -q "^data = /var/lib/space .*# $CONF:[0-9]*$" "$T/check.out"

# ---- versions ----
check "spaced --version is the project's" test "$("$SPACED" --version)" = "spaced $VERSION"
check "space --version is the project's" test "$("$D$BINDIR/space" --version)" = "space $VERSION"
check "libspace.pc says it" test "$(sed -n 's/^Version: //p' "$D$LIBDIR/pkgconfig/libspace.pc")" = "$VERSION"
if [ -f "$SRC/debian/changelog" ]; then
        check "debian/changelog's newest entry is it" \
                test "$(sed -n '1s/^space (\([^)-]*\).*/\1/p' "$SRC/debian/changelog")" = "$VERSION"
fi

# ---- the configuration file: every option, settable; errors with the line ----
"$SPACED" --help >"$T/help"
sed -n 's/^  --\([a-z0-9-]*\).*/\1/p' "$T/help" | grep -vx 'help\|version\|config\|check-config' | sort -u >"$T/options"
check "spaced --help lists options" test "$(wc -l <"$T/options")" -ge 8
missing=
for o in $(cat "$T/options"); do grep -q "^#\?$o = " "$SRC/dist/spaced.conf" || missing="$missing $o"; done
check "the packaged configuration file names every option (missing:${missing:- none})" test -z "$missing"
# Every example line set at once: each key is one spaced takes, each example value passes.
sed 's/^#\([a-z0-9-]* = \)/\1/' "$SRC/dist/spaced.conf" >"$T/all.conf"
# (s3-endpoint wants the bucket's keys from the environment, as the service would have them)
env -u SPACE_DATA -u SPACE_LOG SPACE_S3_ACCESS_KEY=example SPACE_S3_SECRET_KEY=example \
        "$SPACED" --check-config --config "$T/all.conf" >"$T/all.out" 2>&1
rc=$?
check "every option set in the file at once passes --check-config" test "$rc" = 0
# distinct keys: a repeatable key (limit, pool) may have several example lines
n_set=$(grep '^[a-z0-9-]* = .*# .*/all.conf:[0-9]*$' "$T/all.out" | cut -d' ' -f1 | sort -u | wc -l)
check "... and each is in effect, from its line ($n_set of $(wc -l <"$T/options"))" test "$n_set" = "$(wc -l <"$T/options")"
printf 'data = /x\n\n# a comment\nlog-levle = debug\n' >"$T/typo.conf"
"$SPACED" --check-config --config "$T/typo.conf" >/dev/null 2>"$T/typo.err"
rc=$?
check "an unknown key: exit 2, the file and line named" \
        test "$rc/$(cat "$T/typo.err")" = "2/spaced: $T/typo.conf:4: unknown key 'log-levle' (the keys are spaced's long options: spaced --help)"
printf 'log-level = info\npool = base=2\npool = py=lots\n' >"$T/value.conf"
"$SPACED" --check-config --config "$T/value.conf" >/dev/null 2>"$T/value.err"
rc=$?
check "a bad value: spaced's own check, with the file's line" \
        sh -c "test $rc = 2 && grep -q '^spaced: $T/value.conf:3: bad --pool py=lots' '$T/value.err'"
SPACE_CONFIG=$T/value.conf "$SPACED" --check-config --pool base=1 --log-level debug >"$T/cmd.out" 2>&1
rc=$?
check "the command line wins (\$SPACE_CONFIG names the file)" \
        sh -c "test $rc = 0 && grep -q '^pool = base=1 .*# command line$' '$T/cmd.out' &&
                grep -q '^log-level = debug .*# command line$' '$T/cmd.out' && ! grep -q 'py=lots' '$T/cmd.out'"
SPACE_CONFIG=$T/typo.conf "$SPACED" --help >/dev/null 2>&1
check "--help answers despite a broken file" test $? = 0
SPACE_CONFIG=$T/typo.conf "$SPACED" token list --data "$T/tok" >/dev/null 2>"$T/tok.err"
check "spaced token reads the file too (and refuses a broken one)" grep -q "typo.conf:4: unknown key" "$T/tok.err"
printf 'data = %s\n' "$T/tokdata" >"$T/tok.conf"
SPACE_CONFIG=$T/tok.conf env -u SPACE_DATA "$SPACED" token add --tenant t1 >/dev/null 2>&1
check "spaced token add uses the file's data directory" test -s "$T/tokdata/meta.db"

# ---- the systemd unit ----
U=$D$UNITDIR/spaced.service
# systemd-analyze verify --root resolves the unit's programs and its dependencies in the
# root: the installed tree plus the host's own units (basic.target and the rest).
mkdir -p "$D/usr/lib/systemd"
cp -r /lib/systemd/system "$D/usr/lib/systemd/" 2>/dev/null || cp -r /usr/lib/systemd/system "$D/usr/lib/systemd/"
systemd-analyze verify --man=no --root="$D" "$U" >"$T/verify" 2>&1
rc=$?
check "systemd-analyze verify: no error, no warning" test "$rc/$(cat "$T/verify")" = "0/"
[ "$rc" = 0 ] && [ -s "$T/verify" ] && cat "$T/verify"
# verify must be able to fail: the same unit with its program gone
mv "$SPACED" "$T/spaced.away"
systemd-analyze verify --man=no --root="$D" "$U" >/dev/null 2>&1
check "... which fails when ExecStart's program is missing" test $? != 0
mv "$T/spaced.away" "$SPACED"
key() { sed -n "s/^$1=//p" "$U"; }
check "ExecStart runs the installed spaced on the installed configuration file" \
        test "$(key ExecStart)" = "$SBINDIR/spaced --config $SYSCONF/space/spaced.conf"
check "Type=notify (spaced sends READY=1), Delegate=yes, Restart=on-failure" \
        test "$(key Type)/$(key Delegate)/$(key Restart)" = "notify/yes/on-failure"
check "SIGTERM to spaced alone (KillMode=mixed): it takes the last snapshots itself" test "$(key KillMode)" = mixed
check "a configuration error (exit 2) or a newer data directory (3) is not restarted" \
        test "$(key RestartPreventExitStatus)" = "2 3"
check "the data directory is the service's state directory" test "$(key StateDirectory)" = space
caps=$(sed -n '/^CapabilityBoundingSet=/,/[^\\]$/p' "$U" | tr -d '\\\n' | sed 's/^CapabilityBoundingSet=//')
check "the bounding set keeps what sandboxes need and drops what nothing needs" sh -c "
        for c in CAP_SYS_ADMIN CAP_SETUID CAP_SETGID CAP_CHOWN CAP_MKNOD CAP_NET_ADMIN CAP_SYS_CHROOT; do
                echo ' $caps ' | grep -q \" \$c \" || exit 1
        done
        for c in CAP_SYS_MODULE CAP_SYS_RAWIO CAP_SYS_TIME CAP_SYS_BOOT CAP_MAC_ADMIN CAP_BPF; do
                echo ' $caps ' | grep -q \" \$c \" && exit 1
        done
        exit 0"

# ---- libspace: ABI and a program built from libspace.pc alone ----
LIB=$D$LIBDIR/libspace.so.$VERSION
check "libspace.so's soname is libspace.so.0" sh -c "readelf -d '$LIB' | grep -q 'SONAME.*\\[libspace.so.0\\]'"
others=$(nm -D --defined-only "$LIB" | awk '$3 != "" && $3 !~ /^space_/ && $3 !~ /^LIBSPACE_/ { print $3 }' | tr '\n' ' ')
check "libspace.so exports only space_* (others: ${others:-none})" test -z "$others"
check "... every function of space.h among them" sh -c "
        for f in \$(grep -o '^[a-z_ ]*[ *]space_[a-z_]*(' '$D$INCDIR/space/space.h' | grep -o 'space_[a-z_]*(' | tr -d '('); do
                nm -D --defined-only '$LIB' | grep -q \" T \$f@@LIBSPACE_0\$\" || { echo \"missing \$f\"; exit 1; }
        done"
export PKG_CONFIG_PATH=$D$LIBDIR/pkgconfig PKG_CONFIG_SYSROOT_DIR=$D
# shellcheck disable=SC2046
cc -o "$T/client" "$SRC/tests/install/client.c" $(pkg-config --cflags --libs libspace) 2>"$T/cc.err"
check "a program compiles and links with pkg-config --cflags --libs libspace" test -x "$T/client"
check "... against the installed shared library" sh -c "LD_LIBRARY_PATH='$D$LIBDIR' ldd '$T/client' | grep -q '$D$LIBDIR/libspace.so.0'"
# A stand-in for spaced's health route on a Unix socket: reads the request's head, answers
# one canned HTTP response.
body='{"status":"ok","from":"stand-in"}'
printf 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s' "${#body}" "$body" >"$T/answer"
printf '#!/bin/sh\ncr=$(printf "\\r")\nwhile IFS= read -r l; do [ "$l" = "$cr" ] && break; done\ncat "%s"\n' "$T/answer" >"$T/serve"
chmod +x "$T/serve"
socat UNIX-LISTEN:"$T/d.sock",fork EXEC:"$T/serve" 2>/dev/null &
SOCAT=$!
for _ in $(seq 50); do [ -S "$T/d.sock" ] && break; sleep 0.05; done
out=$(LD_LIBRARY_PATH=$D$LIBDIR "$T/client" "unix:$T/d.sock" 2>&1)
check "... and talks to a daemon through it ($out)" test "$out" = "$body"
out=$(LD_LIBRARY_PATH=$D$LIBDIR "$T/client" "unix:$T/none.sock" 2>&1)
check "... and reports a daemon that is not there" sh -c "echo '$out' | grep -q 'space_health at unix:$T/none.sock'"

# ---- man pages ----
for m in man8/spaced.8 man1/space.1 man1/space-store.1; do
        f=$D$MANDIR/$m
        check "$m: a man page of version $VERSION" grep -q "^\\.TH .* \"$(basename "$f" | sed 's/\.[0-9]$//') $VERSION\"" "$f"
done
if command -v man >/dev/null; then
        check "spaced(8) renders, with --check-config in it" sh -c "MANWIDTH=100 man -l '$D$MANDIR/man8/spaced.8' 2>/dev/null | grep -q -- '--check-config'"
fi

echo "install: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
