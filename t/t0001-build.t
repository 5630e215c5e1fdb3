#!/bin/sh
test_description='the build: dependency probes, what is skipped, make install'
. "$(dirname "$0")/sharness.sh"

# make cannot take paths with blanks (sharness trash directories have one, and so may the
# checkout's path): the build directories are named relative to the checkout, and the install
# goes into a directory of our own under /tmp, linked here.
rel() {
	case "$1" in
	"$DPTRAIN_SRC_DIR"/*) printf '%s\n' "${1#"$DPTRAIN_SRC_DIR"/}" ;;
	*) printf '%s\n' "$1" ;;
	esac
}
dest=$(mktemp -d /tmp/dptrain-t0001.XXXXXX) || exit 1
rm_dest() { rm -rf "$dest"; }
dp_exit_hook rm_dest
mk() { env -u MAKEFLAGS -u MAKELEVEL make --no-print-directory -C "$DPTRAIN_SRC_DIR" O="$(rel "$DPTRAIN_BUILD_DIR")" SAN="${DPTRAIN_SAN:-0}" "$@"; }

test_expect_success 'make reports every probed dependency' '
	mk -n all >out 2>&1 &&
	for dep in jansson slurm pmix onednn openblas cuda cudnn nccl tests; do
		grep "^  $dep: " out || return 1
	done
'

test_expect_success 'without a CUDA toolkit: CUDA is reported absent and the CPU parts still build' '
	mk -n all CUDA_HOME=/nonexistent >out 2>&1 &&
	grep "^  cuda: *no -- no toolkit at CUDA_HOME=/nonexistent: CUDA backend skipped" out &&
	grep "^  cudnn: *no" out && grep "^  nccl: *no" out &&
	mk all CUDA_HOME=/nonexistent O="$(rel "$DPTRAIN_BUILD_DIR/t/nocuda")" >build.log 2>&1 &&
	test -x "$DPTRAIN_BUILD_DIR/t/nocuda/bin/dptrain" &&
	test -x "$DPTRAIN_BUILD_DIR/t/nocuda/bin/dptrain-ranktable"
'

test -f /usr/local/cuda/include/cuda.h && test_set_prereq CUDA_TOOLKIT
test_expect_success CUDA_TOOLKIT 'with /usr/local/cuda: toolkit, cuDNN and NCCL versions are reported' '
	mk -n all >out 2>&1 &&
	grep -E "^  cuda: *yes \([0-9]+\.[0-9]+ at /usr/local/cuda\)" out &&
	grep -E "^  cudnn: *yes \([0-9]+\.[0-9]+\.[0-9]+\)" out &&
	grep -E "^  nccl: *yes \([0-9]+\.[0-9]+\.[0-9]+\)" out
'

test_expect_success 'make install DESTDIR= puts programs, plugin, man pages, examples, drop-in in place' '
	rm -rf "$dest" && mk install DESTDIR="$dest" >install.log 2>&1 &&
	ln -sfn "$dest" root &&
	test -x root/usr/local/bin/dptrain &&
	test -x root/usr/local/bin/dptrain-ranktable &&
	test -x root/usr/local/bin/dptrain-data &&
	test -x root/usr/local/bin/dptrain-report &&
	ls root/usr/local/share/man/man1/dptrain-report.1 &&
	ls root/usr/local/share/man/man1/dptrain-ranktable.1 root/usr/local/share/man/man1/dptrain-run.1 \
		root/usr/local/share/man/man1/dptrain-launch.1 root/usr/local/share/man/man1/dptrain.1 \
		root/usr/local/share/man/man1/dptrain-data.1 &&
	ls root/usr/local/share/dptrain/examples/resnet50.json \
		root/usr/local/share/dptrain/examples/resnet18.json &&
	ls root/usr/local/share/man/man5/dptrain.json.5 root/usr/local/share/man/man5/dptrain-metrics.5 &&
	ls root/usr/local/share/dptrain/examples/lenet-fmnist.json &&
	test -f root/etc/slurm/plugstack.conf.d/dptrain.conf.example &&
	! grep "@LIBDIR@\|@BINDIR@" root/etc/slurm/plugstack.conf.d/dptrain.conf.example
'

test_expect_success PLUGIN 'the installed plugin is under LIBDIR/slurm and exports only SPANK symbols' '
	test -x root/usr/local/lib/slurm/dptrain.so &&
	ls root/usr/local/share/man/man8/dptrain.8 &&
	nm -D --defined-only root/usr/local/lib/slurm/dptrain.so | awk "{print \$3}" >syms &&
	! grep -v -E "^(slurm_spank_|spank_|plugin_)" syms &&
	grep -q "^slurm_spank_init$" syms
'

test_expect_success 'every man page renders without warnings' '
	for m in "$DPTRAIN_SRC_DIR"/doc/*.[158] "$DPTRAIN_SRC_DIR"/contrib/pkg/*.8; do
		MANWIDTH=80 man --warnings -l "$m" >/dev/null 2>warn || return 1
		test_must_be_empty warn || { echo "$m:"; cat warn; return 1; }
	done
'

test_expect_success 'every test file, benchmark script and .ci/run is executable (prove and CI run them)' '
	for f in "$DPTRAIN_SRC_DIR"/t/t[0-9]*.t "$DPTRAIN_SRC_DIR"/contrib/bench/*.sh \
		"$DPTRAIN_SRC_DIR"/contrib/bench/*.py "$DPTRAIN_SRC_DIR"/.ci/run; do
		test -x "$f" || { echo "not executable: $f"; return 1; }
	done
'

test_expect_success 'the binaries are hardened (full RELRO, stack protector)' '
	readelf -d "$DPTRAIN_BUILD_DIR/bin/dptrain-ranktable" | grep -q "BIND_NOW\|FLAGS.*NOW" &&
	readelf -l "$DPTRAIN_BUILD_DIR/bin/dptrain-ranktable" | grep -q GNU_RELRO
'

test_done
