# 10-localcluster.sh — sourced by sharness for every shell test: start and stop a private
# Slurm (contrib/localcluster/cluster) inside a test, always stopped when the test script ends,
# whether it passes, fails or is interrupted; and the LOCALCLUSTER prerequisite.
#
#   dp_cluster_start [-d DIR] [cluster start options]   start (default DIR: trash/cluster),
#                                                       then source DIR/env.sh (SLURM_CONF)
#   dp_cluster_stop [DIR]                               stop it (default: trash/cluster)
#   dp_cluster COMMAND [ARGS]                           run contrib/localcluster/cluster
#   dp_job_wait JOB [SECONDS]                           wait until a batch job has left the
#                                                       queue (default 300 s); 1 if it has not
#   dp_need_cluster [PREREQ]...                         skip the whole file unless the
#                                                       plugin, dptrain-launch, a local Slurm
#                                                       and each PREREQ are there
DP_CLUSTER_SCRIPT="$DPTRAIN_SRC_DIR/contrib/localcluster/cluster"
DP_CLUSTERS=""

if test_have_prereq SLURM && test_have_prereq ROOT && test -x "$DP_CLUSTER_SCRIPT" &&
	command -v ss >/dev/null 2>&1 && command -v flock >/dev/null 2>&1 &&
	command -v pgrep >/dev/null 2>&1; then
	test_set_prereq LOCALCLUSTER
fi

dp_job_wait() {
	for i in $(seq $((${2:-300} * 10))); do
		squeue -h -j "$1" 2>/dev/null | grep -q . || return 0
		sleep 0.1
	done
	echo "job $1 is still in the queue after ${2:-300} s" >&2
	return 1
}

dp_need_cluster() {
	if ! test_have_prereq PLUGIN || ! test_have_prereq LAUNCH; then
		skip_all='the plugin or dptrain-launch is not built'
		test_done
	fi
	if ! test_have_prereq LOCALCLUSTER; then
		skip_all='needs root, slurm-wlm and munge for a local Slurm (make deps)'
		test_done
	fi
	for p in "$@"; do
		if ! test_have_prereq "$p"; then
			case $p in
			FMNIST) skip_all='needs dataset-fashion-mnist (make deps)' ;;
			TORCH) skip_all='needs python3-torch (make deps)' ;;
			*) skip_all="needs $p" ;;
			esac
			test_done
		fi
	done
}

dp_cluster() {
	"$DP_CLUSTER_SCRIPT" "$@"
}

# Every cluster this test started, stopped at the end: on success through sharness's
# cleanup (before it removes the trash directory the cluster lives in), otherwise from the
# EXIT trap, which also runs after an interrupt.
dp_cluster_stop_all() {
	_dp_list=$DP_CLUSTERS
	DP_CLUSTERS=""
	printf '%s\n' "$_dp_list" | while IFS= read -r _dp_d; do
		test -n "$_dp_d" || continue
		"$DP_CLUSTER_SCRIPT" stop -d "$_dp_d" -t 20 >&2 || true
	done
}

_dp_cluster_register() {
	case "
$DP_CLUSTERS
" in
	*"
$1
"*) ;;
	*) DP_CLUSTERS="$DP_CLUSTERS
$1" ;;
	esac
	dp_exit_hook dp_cluster_stop_all
}

dp_cluster_start() {
	_dp_dir="$SHARNESS_TRASH_DIRECTORY/cluster"
	_dp_prev=
	for _dp_a in "$@"; do
		case "$_dp_prev" in -d | --dir) _dp_dir=$_dp_a ;; esac
		_dp_prev=$_dp_a
	done
	case "$_dp_dir" in /*) ;; *) _dp_dir="$PWD/$_dp_dir" ;; esac
	_dp_cluster_register "$_dp_dir"
	"$DP_CLUSTER_SCRIPT" start -t 30 "$@" -d "$_dp_dir" &&
		. "$_dp_dir/env.sh"
}

dp_cluster_stop() {
	_dp_dir=${1:-"$SHARNESS_TRASH_DIRECTORY/cluster"}
	case "$_dp_dir" in /*) ;; *) _dp_dir="$PWD/$_dp_dir" ;; esac
	DP_CLUSTERS=$(printf '%s\n' "$DP_CLUSTERS" | grep -vxF -- "$_dp_dir" || true)
	"$DP_CLUSTER_SCRIPT" stop -t 20 -d "$_dp_dir"
}
