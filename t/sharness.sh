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
