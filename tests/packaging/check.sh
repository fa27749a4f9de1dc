#!/bin/bash
# tests/packaging/check.sh [BUILD_DIR]: the packages, built and used the way an operator does.
#  1. make deb (from `make dist`): katana + katana-dbgsym; the binary is stripped, the config
#     is a conffile, README.md, docs/ and the examples are in /usr/share/doc/katana; lintian
#     reports no error (warnings are printed);
#  2. dpkg -i; the katana user, the modes of /etc/katana/config.json and /var/lib/katana;
#     `katana check -c /etc/katana/config.json`; the API token postinst put in place of the
#     packaged placeholder is 64 random hex digits and stays over a reinstall, as does a token
#     the operator set (issue 15); systemd-analyze verify on the installed unit;
#  3. tests/packaging/t-installed.sh: the installed binary as the katana user with a real
#     ss-local, SIGHUP and SIGTERM;
#  4. make rpm: katana + katana-debuginfo, `rpm -qpl` (the docs and examples too), rpmlint
#     without errors;
#  5. dpkg --purge katana (also on failure): nothing of the package is left.
# BUILD_DIR is a configured build tree (default: build/, configured here if it is not).
# Needs root or sudo, and the packages of tests/setup-deps.sh. Exit 0 only if all passed.
set -euo pipefail
cd "$(dirname "$0")/../.."
TOP=$PWD
BUILD=${1:-$TOP/build}
START=$(date +%s)
SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo
FAILS=0
stage() { echo; echo "== [packaging $(($(date +%s) - START))s] $*"; }
pass() { echo "PASS: packaging: $*"; }
fail() { echo "FAIL: packaging: $*"; FAILS=$((FAILS + 1)); }
check() { local what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }

for tool in dpkg-buildpackage dh rpmbuild lintian jq; do
    command -v "$tool" >/dev/null 2>&1 || { echo "packaging: $tool is missing (tests/setup-deps.sh)"; exit 1; }
done

purge() {
    if dpkg-query -W -f '${Status}' katana 2>/dev/null | grep -q -v "not-installed"; then
        $SUDO env DEBIAN_FRONTEND=noninteractive dpkg --purge katana >/dev/null
    fi
}
trap 'purge || true' EXIT

if [ ! -f "$BUILD/Makefile" ]; then
    stage "configure $BUILD"
    mkdir -p "$BUILD"
    (cd "$BUILD" && "$TOP/configure" -q)
fi

# --- .deb -------------------------------------------------------------------------------
stage "make deb"
make -C "$BUILD" deb >"$BUILD/deb-build.log" 2>&1 || { tail -n 60 "$BUILD/deb-build.log"; exit 1; }
DEB=$(ls "$BUILD"/deb-build/katana_*.deb)
DBG=$(ls "$BUILD"/deb-build/katana-dbgsym_*.deb 2>/dev/null || true)
dpkg-deb -c "$DEB"
check ".deb holds the binary, config, unit and both man pages" bash -c "
    l=\$(dpkg-deb -c '$DEB' | awk '{ print \$6 }')
    for f in ./usr/bin/katana ./etc/katana/config.json ./lib/systemd/system/katana.service \
             ./usr/share/man/man8/katana.8.gz ./usr/share/man/man5/katana.json.5.gz ./var/lib/katana/; do
        grep -q -x -F \"\$f\" <<<\"\$l\" || { echo \"missing \$f\"; exit 1; }
    done"
check ".deb holds README.md, docs/ and the examples in /usr/share/doc/katana" bash -c "
    l=\$(dpkg-deb -c '$DEB' | awk '{ print \$6 }')
    for f in ./usr/share/doc/katana/README.md ./usr/share/doc/katana/docs/nodes/reality.md \
             ./usr/share/doc/katana/examples/README.md \
             ./usr/share/doc/katana/examples/nodes/vless-reality-vision.json \
             ./usr/share/doc/katana/examples/clients/xray/vless-reality-vision.json \
             ./usr/share/doc/katana/examples/clients/sing-box/vless-reality-vision.json; do
        grep -q -x -E \"\$f(\\.gz)?\" <<<\"\$l\" || { echo \"missing \$f\"; exit 1; }
    done"
check "/etc/katana/config.json is a conffile" bash -c \
    "dpkg-deb --ctrl-tarfile '$DEB' | tar -xO ./conffiles | grep -q -x /etc/katana/config.json"
check "the packaged config has the API token placeholder, never an empty token" bash -c \
    "dpkg-deb --fsys-tarfile '$DEB' | tar -xO ./etc/katana/config.json |
     jq -e '.api.token == \"@KATANA_API_TOKEN@\"' >/dev/null"
check "debug symbols are split out (katana-dbgsym with a .debug file)" bash -c \
    "[ -n '$DBG' ] && dpkg-deb -c '$DBG' | grep -q '/usr/lib/debug/.build-id/.*\.debug$'"
dpkg-deb -I "$DEB" | sed -n '/Depends/p'

stage "lintian"
lint_rc=0
lintian --fail-on error --info --tag-display-limit 0 "$DEB" ${DBG:+"$DBG"} || lint_rc=$?
check "lintian: no error" test "$lint_rc" = 0

# --- install and run --------------------------------------------------------------------
stage "dpkg -i"
purge
check "dpkg -i" $SUDO env DEBIAN_FRONTEND=noninteractive dpkg -i "$DEB"
check "the package created the katana system user" id katana
check "/usr/bin/katana is stripped" bash -c "! readelf -S /usr/bin/katana | grep -q '\.debug_info'"
check "/etc/katana/config.json is root:katana 0640" \
    test "$(stat -c '%U:%G %a' /etc/katana/config.json)" = "root:katana 640"
check "/var/lib/katana is katana:katana 0750" \
    test "$(stat -c '%U:%G %a' /var/lib/katana)" = "katana:katana 750"
check "katana check -c /etc/katana/config.json" /usr/bin/katana check -c /etc/katana/config.json
api_token() { $SUDO jq -r '.api.token // ""' /etc/katana/config.json 2>/dev/null || true; }
TOKEN1=$(api_token)
check "postinst set a random API token: 64 hex digits (${#TOKEN1} characters)" \
    grep -q -x -E '[0-9a-f]{64}' <<<"$TOKEN1"
check "dpkg -i again (reinstall)" $SUDO env DEBIAN_FRONTEND=noninteractive dpkg -i "$DEB"
check "a reinstall keeps the API token" test "$(api_token)" = "$TOKEN1"
OPERATOR_TOKEN=operator-token-$$-$RANDOM
$SUDO sh -c "jq --arg t '$OPERATOR_TOKEN' '.api.token = \$t' /etc/katana/config.json \
    >/etc/katana/config.json.new && cat /etc/katana/config.json.new >/etc/katana/config.json &&
    rm -f /etc/katana/config.json.new"
check "dpkg -i over a config whose token the operator set" \
    $SUDO env DEBIAN_FRONTEND=noninteractive dpkg -i "$DEB"
check "the operator's API token stays" test "$(api_token)" = "$OPERATOR_TOKEN"
check "/etc/katana/config.json is still root:katana 0640" \
    test "$(stat -c '%U:%G %a' /etc/katana/config.json)" = "root:katana 640"
check "katana check -c /etc/katana/config.json (operator's token)" \
    /usr/bin/katana check -c /etc/katana/config.json
check "man katana.json(5) is installed" bash -c "man -w 5 katana.json >/dev/null"

if command -v systemd-analyze >/dev/null 2>&1; then
    unit=$(dpkg -L katana | grep '/katana\.service$')
    man=no; command -v man >/dev/null 2>&1 && man=yes
    check "systemd-analyze verify $unit" systemd-analyze verify --man="$man" "$unit"
else
    echo "SKIP: packaging: systemd-analyze is not installed, the unit is not verified"
fi

stage "the installed binary (tests/packaging/t-installed.sh)"
check "t-installed.sh" $SUDO "$TOP/tests/packaging/t-installed.sh"

# --- .rpm -------------------------------------------------------------------------------
stage "make rpm"
make -C "$BUILD" rpm >"$BUILD/rpm-build.log" 2>&1 || { tail -n 60 "$BUILD/rpm-build.log"; exit 1; }
RPM=$(ls "$BUILD"/rpm-build/RPMS/*/katana-[0-9]*.rpm)
RPMDBG=$(ls "$BUILD"/rpm-build/RPMS/*/katana-debuginfo-*.rpm 2>/dev/null || true)
rpm -qpl "$RPM"
check ".rpm holds the binary, config, unit and both man pages" bash -c "
    l=\$(rpm -qpl '$RPM')
    for f in /usr/bin/katana /etc/katana/config.json /usr/lib/systemd/system/katana.service \
             /usr/share/man/man8/katana.8 /usr/share/man/man5/katana.json.5 /var/lib/katana; do
        grep -q -x -E \"\$f(\\.gz|\\.bz2|\\.xz|\\.zst)?\" <<<\"\$l\" || { echo \"missing \$f\"; exit 1; }
    done"
check ".rpm holds README.md, docs/ and the examples in /usr/share/doc/katana" bash -c "
    l=\$(rpm -qpl '$RPM')
    for f in /usr/share/doc/katana/README.md /usr/share/doc/katana/docs/nodes/reality.md \
             /usr/share/doc/katana/examples/nodes/vless-reality-vision.json \
             /usr/share/doc/katana/examples/clients/sing-box/vless-reality-vision.json; do
        grep -q -x -F \"\$f\" <<<\"\$l\" || { echo \"missing \$f\"; exit 1; }
    done"
check "the .rpm marks /etc/katana/config.json %config(noreplace)" bash -c \
    "rpm -qpc '$RPM' | grep -q -x /etc/katana/config.json"
check "the .rpm's /usr/bin/katana is stripped" bash -c \
    "rpm2cpio '$RPM' | cpio -i --quiet --to-stdout ./usr/bin/katana >'$BUILD/rpm-katana.bin' &&
     readelf -S '$BUILD/rpm-katana.bin' | grep -q '\.text' &&
     ! readelf -S '$BUILD/rpm-katana.bin' | grep -q '\.debug_info'"
rm -f "$BUILD/rpm-katana.bin"
check "debug symbols are split out (katana-debuginfo)" bash -c \
    "[ -n '$RPMDBG' ] && rpm -qpl '$RPMDBG' | grep -q '^/usr/lib/debug/.*katana.*\.debug$'"
echo "-- rpm -qp --requires:"; rpm -qp --requires "$RPM"

stage "rpmlint"
if command -v rpmlint >/dev/null 2>&1; then
    # rpmlint exits 64 for errors, 66 for "badness" over the threshold; warnings exit 0.
    rl_rc=0
    rpmlint -r "$TOP/packaging/rpm/katana.rpmlintrc" "$RPM" ${RPMDBG:+"$RPMDBG"} || rl_rc=$?
    check "rpmlint: no error" test "$rl_rc" = 0
else
    echo "SKIP: packaging: rpmlint is not installed (not packaged for this release?), .rpm not linted"
fi

# --- remove -----------------------------------------------------------------------------
stage "dpkg --purge katana"
purge
check "after purge: /usr/bin/katana, /etc/katana and /var/lib/katana are gone" bash -c \
    "[ ! -e /usr/bin/katana ] && [ ! -e /etc/katana ] && [ ! -e /var/lib/katana ]"
echo "(the katana system user stays, as Debian leaves system users: userdel katana to drop it)"

stage "packaging: $FAILS failure(s) in $(($(date +%s) - START))s"
[ "$FAILS" = 0 ]
