# 00-dptrain.sh — sourced by sharness for every shell test: PATH to the build, sanitizer
# settings, and prerequisites (test_set_prereq) for what a test may need.
PATH="$DPTRAIN_BUILD_DIR/bin:$PATH"
export PATH
# Sanitized builds: fail on the first report, no leak noise from interpreters we start.
ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1:exitcode=86}"
UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export ASAN_OPTIONS UBSAN_OPTIONS
# Correctness, not speed: an OpenMP thread that waits sleeps instead of spinning, so a test
# takes about as long on a busy machine (CI, a suite beside it) as on a quiet one; the results
# are the same bits either way.
OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
export OMP_WAIT_POLICY

test -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz && test_set_prereq FMNIST
/usr/bin/python3 -c 'import torch' 2>/dev/null && test_set_prereq TORCH
command -v slurmd >/dev/null 2>&1 && command -v slurmctld >/dev/null 2>&1 &&
	command -v munged >/dev/null 2>&1 && test_set_prereq SLURM
test "$(id -u)" = 0 && test_set_prereq ROOT
test -x "$DPTRAIN_BUILD_DIR/lib/dptrain.so" && test_set_prereq PLUGIN
test -x "$DPTRAIN_BUILD_DIR/bin/dptrain-launch" && test_set_prereq LAUNCH
# PMIx before 5 (Debian 12's 4.2): dptrain sets PMIX_MCA_gds=hash in every rank, so that a
# second PMIx client (MPI_Init) works; with PMIx 5 it leaves the store to PMIx (dptrain(8)).
case "$(pkg-config --modversion pmix 2>/dev/null)" in
[1-4].*) test_set_prereq PMIX_GDS_HASH ;;
esac

# dp_json FILE EXPR: print a value from a JSON file (python3 as an independent reader).
dp_json() {
	/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {"d": d}))' "$1" "$2"
}
