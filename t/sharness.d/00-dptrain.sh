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

# dp_make_user VAR ROLE: make a system user of this test script's own for ROLE (victim,
# attacker, ...) and set VAR to its name (dp<ROLE><pid>, unique on the machine while the
# script runs). Tests that ran side by side (make check -j2, two checkouts, CI and a user) once
# shared fixed names: one script removed "dpvictim" while the other's jobs ran as it, and a
# script that failed left the user behind. Removed at the end, however the script ends
# (dp_exit_hooks), after the clusters that ran its processes have stopped.
DP_USERS=""
dp_make_user() {
	_dp_u="dp$2$$"
	if ! id -u "$_dp_u" >/dev/null 2>&1; then
		useradd --system --no-create-home --shell /bin/sh "$_dp_u" || return 1
		DP_USERS="$DP_USERS $_dp_u"
		dp_exit_hook dp_remove_users
	fi
	eval "$1=\$_dp_u"
}

dp_remove_users() {
	for _dp_u in $DP_USERS; do
		userdel "$_dp_u" 2>/dev/null || {
			pkill -KILL -u "$_dp_u" 2>/dev/null
			sleep 1
			userdel "$_dp_u" || echo "# could not remove the test user $_dp_u" >&2
		}
	done
	DP_USERS=""
}

# dp_exit_hook FUNCTION: run FUNCTION when the script ends (sharness's cleanup on success, the
# EXIT trap otherwise, which also runs after an interrupt), the last added first: a cluster
# started after a user was made stops before that user is removed.
DP_EXIT_HOOKS=""
dp_exit_hook() {
	case " $DP_EXIT_HOOKS " in *" $1 "*) return 0 ;; esac
	if test -z "$DP_EXIT_HOOKS"; then
		cleanup dp_run_exit_hooks
		# sharness's own EXIT trap is 'die'; keep it, with the exit status it expects.
		trap '_dp_rc=$?; dp_run_exit_hooks; (exit $_dp_rc); die' EXIT
		trap 'exit 130' INT
		trap 'exit 143' TERM
	fi
	DP_EXIT_HOOKS="$1 $DP_EXIT_HOOKS"
}

dp_run_exit_hooks() {
	_dp_hooks=$DP_EXIT_HOOKS
	DP_EXIT_HOOKS=""
	for _dp_h in $_dp_hooks; do "$_dp_h"; done
}
