#!/bin/bash
# portable.sh — the suite where a checkout is unlike CI's: at a long path with blanks and
# non-ASCII characters, in another locale and time zone, on fewer CPUs, as a user who is not
# root. A test that fails only because of where it runs is a defect of the test; so is one that
# passes only because of where it runs (issue 33: t0510 assumed the checkout path's length).
#
# It copies this checkout (the files git knows, as they are in the working tree) to
#   DIR/dptrain checkout ☃ é.PID/aaaa...aaaa/src    (about 160 bytes; DIR default /var/tmp)
# builds it there and runs make TARGET (default: check) with
#   LANG=LC_ALL=LOCALE   (default tr_TR.UTF-8: its case mapping of i/I and its date format
#                         break scripts that assume C; generated with locale-gen if missing)
#   TZ=ZONE              (default Pacific/Chatham: +12:45/+13:45, no whole hour)
#   taskset -c CPUS      (with --cpus, e.g. 0: one CPU of the machine)
#   as USER              (with --user: a user who is not root; the checkout is theirs and the
#                         tests that need root skip, saying so)
# then removes the copy (--keep leaves it, with its build and test results).
#
# usage: contrib/ci/portable.sh [--dir DIR] [--locale L] [--tz ZONE] [--cpus LIST]
#                               [--user NAME] [--keep] [TARGET [MAKE ARGS...]]
# Run as root (it installs the locale and makes --user's user if missing: a system user,
# removed again at the end). Exit status: make's.
set -euo pipefail

TOP=$(cd "$(dirname "$0")/../.." && pwd)
DIR=${DPTRAIN_PORTABLE_DIR:-/var/tmp}
LOC=tr_TR.UTF-8
ZONE=Pacific/Chatham
CPUS=
RUNAS=
KEEP=0

die() {
	echo "portable: $*" >&2
	exit 2
}

while [ $# -gt 0 ]; do
	case $1 in
	--dir) DIR=$2; shift 2 ;;
	--locale) LOC=$2; shift 2 ;;
	--tz) ZONE=$2; shift 2 ;;
	--cpus) CPUS=$2; shift 2 ;;
	--user) RUNAS=$2; shift 2 ;;
	--keep) KEEP=1; shift ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	-*) die "unknown option $1 (see --help)" ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || set -- check
[ "$(id -u)" = 0 ] || die "run as root (it may install a locale and make a user)"
[ -e "/usr/share/zoneinfo/$ZONE" ] || die "no time zone $ZONE (Debian: tzdata)"

# The locale: generated where it is missing (Debian: the locales package, then locale-gen).
have_locale() {
	locale -a 2>/dev/null | sed 's/utf8$/UTF-8/' | grep -qxF "$1"
}
if ! have_locale "$LOC"; then
	command -v locale-gen >/dev/null 2>&1 || {
		echo "portable: installing the locales package for $LOC" >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q locales >/dev/null ||
			die "could not install the locales package"
	}
	grep -qxF "$LOC UTF-8" /etc/locale.gen 2>/dev/null || echo "$LOC UTF-8" >>/etc/locale.gen
	locale-gen >/dev/null || die "locale-gen failed for $LOC"
	have_locale "$LOC" || die "locale $LOC is still missing after locale-gen"
fi

MADE_USER=0
if [ -n "$RUNAS" ] && ! id -u "$RUNAS" >/dev/null 2>&1; then
	useradd --system --create-home --home-dir "/var/tmp/$RUNAS.home" --shell /bin/sh "$RUNAS" ||
		die "could not make the user $RUNAS"
	MADE_USER=1
fi

LONG=$(printf 'a%.0s' $(seq 1 120))
BASE="$DIR/dptrain checkout ☃ é.$$"
SRC="$BASE/$LONG/src"
cleanup() {
	if [ $KEEP = 0 ]; then
		rm -rf "$BASE"
	else
		echo "portable: kept $SRC" >&2
	fi
	if [ $MADE_USER = 1 ]; then
		pkill -KILL -u "$RUNAS" 2>/dev/null || true
		userdel -r "$RUNAS" 2>/dev/null || userdel "$RUNAS" || true
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
"$TOP/contrib/ci/copy-checkout.sh" "$TOP" "$SRC" ||
	die "could not copy the checkout to $SRC"
[ -z "$RUNAS" ] || chown -R "$RUNAS:" "$BASE"

echo "portable: $SRC (${#SRC} bytes)" >&2
echo "portable: LANG=$LOC TZ=$ZONE${CPUS:+ CPUs $CPUS}${RUNAS:+ as $RUNAS}: make $*" >&2
cmd=(env LANG="$LOC" LC_ALL="$LOC" TZ="$ZONE" make -C "$SRC" "$@")
[ -z "$CPUS" ] || cmd=(taskset -c "$CPUS" "${cmd[@]}")
if [ -n "$RUNAS" ]; then
	# the user's own environment: their HOME, no root's variables
	cmd=(runuser -u "$RUNAS" -- env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$(getent passwd "$RUNAS" | cut -d: -f6)" USER="$RUNAS" LOGNAME="$RUNAS" "${cmd[@]}")
fi
rc=0
"${cmd[@]}" || rc=$?
echo "portable: make $* exited $rc" >&2
# what the failed shell tests did and printed (the copy goes at exit)
bdir=build
for a in "$@"; do [ "$a" != SAN=1 ] || bdir=build-san; done
[ $rc = 0 ] || "$TOP/contrib/ci/failures.sh" "$SRC/$bdir" | head -n 400 | sed 's/^/portable: | /'
exit $rc
