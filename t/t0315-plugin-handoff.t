#!/bin/sh
# t0315-plugin-handoff.t — the plugin's hand-off of a task on every Slurm and PMIx version
# (dptrain(8), HOW IT WORKS, VERSIONS): the wire-up runs as a helper from task_init and Slurm
# executes the task's own command, on Slurm 22.05 as on 24.11 (no execve in the plugin, no
# spank_prepend_task_argv), so --multi-prog works; PMIX_MCA_gds=hash reaches the ranks exactly
# with PMIx before 5. Owns its trash directory and cluster.

test_description='the plugin hands tasks over the way its Slurm and PMIx versions need'

. "$(dirname "$0")/sharness.sh"

dp_need_cluster

slurm_version=$(slurmd -V | awk '{print $NF}')

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

# Slurm's --multi-prog takes no quoted arguments: each rank runs a script with one word.
cat >multi.conf <<-\EOF
0 ./show.sh zero
1 ./show.sh one
EOF
printf '#!/bin/sh\necho "$1 rank=${RANK:-none}"\n' >show.sh
chmod +x show.sh

test_expect_success "srun --multi-prog --dptrain: each rank runs its own program, wired up" '
	timeout 60 srun -n2 --multi-prog --dptrain=good.json multi.conf >out 2>err &&
	cat out &&
	grep -x "zero rank=0" out &&
	grep -x "one rank=1" out
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
