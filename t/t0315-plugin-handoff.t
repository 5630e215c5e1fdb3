#!/bin/sh
# t0315-plugin-handoff.t — what depends on the Slurm and PMIx versions in the plugin's hand-off
# of a task to dptrain-launch (dptrain(8), VERSIONS): Slurm 23.11 and later get
# spank_prepend_task_argv and Slurm starts the launcher itself; older Slurm gets an execve at
# the end of task_init, which --multi-prog cannot survive. The plugin must take the path its
# Slurm has (a build that found the function but compiled the plugin without it ran the
# execve path on Slurm 24.11 unnoticed), and PMIX_MCA_gds=hash reaches the ranks exactly with
# PMIx before 5. Owns its trash directory and cluster.

test_description='the plugin hands tasks over the way its Slurm and PMIx versions need'

. "$(dirname "$0")/sharness.sh"

if ! test_have_prereq PLUGIN || ! test_have_prereq LAUNCH; then
	skip_all='the plugin or dptrain-launch is not built'
	test_done
fi
if ! test_have_prereq LOCALCLUSTER; then
	skip_all='needs root, slurm-wlm and munge for a local Slurm (make deps)'
	test_done
fi

PLUGIN_SO=$DPTRAIN_BUILD_DIR/lib/dptrain.so
# Slurm's version ("slurm-wlm 24.11.5"): slurmd says it without a slurm.conf, srun does not
slurm_version=$(slurmd -V | awk '{print $NF}')
case "$slurm_version" in
2[0-2].* | 23.0[0-9].*) ;;
*) test_set_prereq SPANK_PREPEND ;;
esac

test_expect_success 'setup: one node with the plugin and the real launcher, a config' '
	echo "Slurm $slurm_version, PMIx $(pkg-config --modversion pmix 2>/dev/null || echo "?")" &&
	dp_cluster_start -N 1 -c 4 &&
	cat >good.json <<-\EOF
	{
	  "model": {"name": "mlp", "num_classes": 10, "input_shape": [1, 8, 8], "hidden": [16]},
	  "data": {"format": "synthetic", "train": {"size": 64}, "batch_size": 8},
	  "train": {"epochs": 1},
	  "output": {"dir": "steps/%j.%s", "console": "all"}
	}
	EOF
'

test_expect_success SPANK_PREPEND "Slurm $slurm_version: the plugin was built with spank_prepend_task_argv" '
	nm -D "$PLUGIN_SO" >symbols &&
	grep -E " U spank_prepend_task_argv(@|\$)" symbols
'

test_expect_success !SPANK_PREPEND "Slurm $slurm_version: the plugin executes the launcher (no spank_prepend_task_argv)" '
	nm -D "$PLUGIN_SO" >symbols &&
	! grep spank_prepend_task_argv symbols &&
	grep -E " U execve(@|\$)" symbols
'

# Slurm's --multi-prog takes no quoted arguments: each rank runs a script with one word.
cat >multi.conf <<-\EOF
0 ./show.sh zero
1 ./show.sh one
EOF
printf '#!/bin/sh\necho "$1 rank=${RANK:-none}"\n' >show.sh
chmod +x show.sh

test_expect_success SPANK_PREPEND "srun --multi-prog --dptrain: each rank runs its own program through the launcher" '
	timeout 60 srun -n2 --multi-prog --dptrain=good.json multi.conf >out 2>err &&
	cat out &&
	grep -x "zero rank=0" out &&
	grep -x "one rank=1" out
'

# dptrain(8): with the execve hand-off the task runs the job's own command line, here the
# --multi-prog file itself, which is not a program.
test_expect_success !SPANK_PREPEND "srun --multi-prog --dptrain fails on Slurm $slurm_version, as dptrain(8) says" '
	test_expect_code 127 timeout 60 srun -n2 --multi-prog --dptrain=good.json multi.conf \
		>out 2>err &&
	grep "dptrain-launch: rank 0 on n1: cannot run .multi.conf." err &&
	! grep "rank=" out
'

test_expect_success PMIX_GDS_HASH 'PMIx before 5: every rank gets PMIX_MCA_gds=hash' '
	timeout 60 srun -n2 --mpi=pmix --dptrain=good.json sh -c "echo gds=\$PMIX_MCA_gds" >out &&
	grep -x "gds=hash" out
'

test_expect_success !PMIX_GDS_HASH 'PMIx 5: the ranks keep PMIx default store (no PMIX_MCA_gds)' '
	timeout 60 srun -n2 --mpi=pmix --dptrain=good.json sh -c "echo gds=\${PMIX_MCA_gds-unset}" >out &&
	grep -x "gds=unset" out
'

test_expect_success 'stop the cluster' '
	dp_cluster_stop
'

test_done
