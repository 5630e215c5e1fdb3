# sharness.sh — entry point of dptrain's shell tests: `. "$(dirname "$0")/sharness.sh"`.
# Puts trash directories under the build directory, then loads Debian's sharness, which in turn
# sources t/sharness.d/*.sh (our helpers and prerequisites).
: "${DPTRAIN_SRC_DIR:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${DPTRAIN_BUILD_DIR:=$DPTRAIN_SRC_DIR/build}"
export DPTRAIN_SRC_DIR DPTRAIN_BUILD_DIR
SHARNESS_TEST_DIRECTORY="$DPTRAIN_BUILD_DIR/t"
SHARNESS_TEST_SRCDIR="$DPTRAIN_SRC_DIR/t"
export SHARNESS_TEST_DIRECTORY SHARNESS_TEST_SRCDIR
mkdir -p "$SHARNESS_TEST_DIRECTORY"
if ! test -f /usr/share/sharness/sharness.sh; then
	echo "1..0 # SKIP sharness is not installed (Debian: sharness; run 'make deps')"
	exit 0
fi
. /usr/share/sharness/sharness.sh
# Every test file also writes its whole story to build/t/test-results/NAME.out: each test's
# script, what its commands printed (stdout and stderr) and its ok / not ok line. prove shows
# only the TAP lines; after a failure (here, in CI's clean root) the .out says why. With -v
# the story goes to the terminal as before. The test's own ok / not ok line is written there
# as "#### ok N - ..." so that contrib/ci/failures.sh can tell it from a "not ok" a test
# prints on purpose (t0004 checks a checker's TAP output, for one).
if test "$verbose" != t; then
	mkdir -p "$SHARNESS_TEST_DIRECTORY/test-results"
	exec 3>"$SHARNESS_TEST_DIRECTORY/test-results/$this_test.out" 4>&3
	# the ok / not ok lines to the .out too (the other lines sharness prints go there already)
	say_color() {
		test -z "$1" && test -n "$quiet" && return
		shift
		case "$*" in "ok "* | "not ok "*) printf '#### %s\n' "$*" >&3 ;; esac
		printf '%s\n' "$*"
	}
fi
