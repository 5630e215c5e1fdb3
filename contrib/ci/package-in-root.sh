#!/bin/bash
# package-in-root.sh — run by contrib/ci/package-test.sh in a fresh root (cleanroot.sh --script),
# the checkout as the current directory (for the local cluster's script only: nothing is built),
# the packages in /debs. What a site admin does, checked step by step:
#   1. apt-get install ./dptrain*.deb pulls runtime libraries only: no compiler, no -dev package
#   2. installed is not enabled: Slurm's plugstack.conf.d has no dptrain line, srun has no
#      --dptrain; the settings are a conffile, /etc/dptrain/plugstack.conf
#   3. dptrain-plugstack enable: srun --dptrain-version, srun --dptrain (any command) and
#      srun --dptrain=lenet-fmnist.json dptrain (the installed example) on a two-node local Slurm
#   4. apt-get remove: the drop-in goes, every job still starts; the conffile stays
#   5. reinstall: enabled again; apt-get purge: the conffile is gone, every job still starts
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
APT=(apt-get -q -y -o DPkg::Lock::Timeout=300 --no-install-recommends)
CL=/tmp/lc
step() { echo "package-in-root: ---- $*"; }
fail() {
	echo "package-in-root: FAILED: $*" >&2
	exit 1
}
CLUSTER=$PWD/contrib/localcluster/cluster
cluster() { "$CLUSTER" "$@"; }
cleanup() { cluster stop -d $CL >/dev/null 2>&1 || true; }
trap cleanup EXIT
no_build_tools() {
	local bad
	bad=$(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' 2>/dev/null |
		awk '$1 == "ii" && ($2 ~ /-dev$/ || $2 ~ /^(gcc|gcc-[0-9]+|cpp|cpp-[0-9]+|g\+\+|clang|make-guile|dpkg-dev|debhelper)$/) { print $2 }' |
		grep -v -x -E 'libc-dev-bin|linux-libc-dev' || true)
	[ -z "$bad" ] || fail "$1 installed build tools or development packages: $(echo $bad)"
	! command -v cc >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1 || fail "$1 installed a C compiler"
}

step "1. apt-get install ./dptrain*.deb (from /debs) pulls runtime libraries only"
apt-get -q update >/dev/null
no_build_tools "the clean root"
debs=$(ls /debs/dptrain-slurm-plugin_*.deb /debs/dptrain-launcher_*.deb /debs/dptrain-trainer_*.deb)
"${APT[@]}" install $debs >/tmp/apt-install.log 2>&1 || { tail -n 30 /tmp/apt-install.log; fail "apt-get install of the packages"; }
sed -n '/The following NEW packages will be installed/,/^[0-9]* upgraded/p' /tmp/apt-install.log | sed 's/^/    /'
no_build_tools "apt-get install ./dptrain*.deb"
dptrain --version && dptrain-launch --version && dptrain-ranktable --version
dpkg-query -W -f='${Conffiles}\n' dptrain-slurm-plugin | grep -q ' /etc/dptrain/plugstack.conf ' ||
	fail "/etc/dptrain/plugstack.conf is not a conffile of dptrain-slurm-plugin"
slurm=$(dpkg-query -W -f='${Version}' slurm-wlm-basic-plugins)
dpkg-query -W -f='${Depends}\n' dptrain-slurm-plugin | grep -q "slurm-wlm-basic-plugins (= $slurm)" ||
	fail "dptrain-slurm-plugin does not depend on exactly slurm-wlm-basic-plugins $slurm"
so=$(dpkg -L dptrain-slurm-plugin | grep '/dptrain\.so$')

step "2. installed, not enabled"
[ ! -e /etc/slurm/plugstack.conf.d/dptrain.conf ] || fail "the plugin is enabled by installing it"
dptrain-plugstack status
# The local cluster's daemons and the runtime data of the example; still no compiler.
"${APT[@]}" install slurmd slurmctld slurm-client munge dataset-fashion-mnist procps iproute2 >/tmp/apt-slurm.log 2>&1 ||
	{ tail -n 30 /tmp/apt-slurm.log; fail "apt-get install slurmd slurmctld munge"; }
no_build_tools "apt-get install slurmd slurmctld"
grep -q '^include /etc/slurm/plugstack.conf.d/\*' /etc/slurm/plugstack.conf ||
	fail "/etc/slurm/plugstack.conf does not include plugstack.conf.d: $(cat /etc/slurm/plugstack.conf)"
# The cluster reads Slurm's own plugstack.conf, as an installed node does. --mpi=none: Debian
# 12's Slurm loads PMIx through libpmix.so, which only libpmix-dev ships (README.Debian), and
# a node here has no -dev package; the ranks meet in the launchers' own store.
cluster start -d $CL -N 2 -c 2 --no-plugin --conf PlugStackConfig=/etc/slurm/plugstack.conf \
	--conf MpiDefault=none
. $CL/env.sh
cd /tmp
srun -n1 true
if srun -n1 --dptrain true 2>/tmp/err; then fail "srun --dptrain worked before the plugin was enabled"; fi
grep -q "unrecognized option '--dptrain'" /tmp/err || { cat /tmp/err; fail "srun --dptrain before enabling"; }

step "3. dptrain-plugstack enable: srun --dptrain"
dptrain-plugstack enable
[ "$(readlink /etc/slurm/plugstack.conf.d/dptrain.conf)" = /etc/dptrain/plugstack.conf ] || fail "no drop-in link"
srun --dptrain-version | tee /tmp/versions
grep -q "^dptrain.so $(dpkg-query -W -f='${Version}' dptrain-slurm-plugin) (wire-up protocol 1, built for Slurm " /tmp/versions &&
	grep -q "^launcher /usr/bin/dptrain-launch: dptrain-launch " /tmp/versions || fail "srun --dptrain-version"
# (only rank 0's output reaches the console by default; every rank writes its own file)
srun -N2 -n2 --dptrain sh -c 'echo "rank $RANK of $WORLD_SIZE on $SLURMD_NODENAME, master $MASTER_ADDR:$MASTER_PORT" >/tmp/rank.$RANK'
cat /tmp/rank.0 /tmp/rank.1 | tee /tmp/ranks
grep -q '^rank 0 of 2 on n1, master [0-9.]*:[0-9]*$' /tmp/ranks && grep -q '^rank 1 of 2 on n2, master ' /tmp/ranks ||
	fail "srun --dptrain: ranks"
ex=/usr/share/dptrain/examples/lenet-fmnist.json
[ -r "$ex" ] || fail "no $ex"
# the installed example as it is, cut to 30 steps (an override on the command line) for time
srun -N2 -n2 --dptrain=$ex dptrain train.max_steps=30 train.log_every=10 >/tmp/train.out 2>&1 ||
	{ cat /tmp/train.out; fail "srun --dptrain=$ex dptrain"; }
tail -n 5 /tmp/train.out
out=$(ls -d /tmp/dptrain.*.* | tail -n 1)
[ -s "$out/rank_table.json" ] && [ -s "$out/model.safetensors" ] && grep -q 'step: 30,' "$out/device0/train.log" &&
	grep -q '^dptrain: done: 30 steps' /tmp/train.out ||
	{ ls -lR "$out"; cat "$out"/device0/train.log; fail "the trainer's output"; }

step "4. apt-get remove dptrain-slurm-plugin: every job still starts"
"${APT[@]}" remove dptrain-slurm-plugin >/tmp/apt-remove.log 2>&1 || { cat /tmp/apt-remove.log; fail "apt-get remove"; }
[ ! -e "$so" ] || fail "$so is still there"
[ ! -e /etc/slurm/plugstack.conf.d/dptrain.conf ] && [ ! -L /etc/slurm/plugstack.conf.d/dptrain.conf ] ||
	fail "the drop-in names a removed plugin"
[ -f /etc/dptrain/plugstack.conf ] || fail "remove took the conffile"
srun -N2 -n2 true || fail "a job does not start after remove"

step "5. reinstall: enabled again; purge: the conffile goes, every job still starts"
"${APT[@]}" install /debs/dptrain-slurm-plugin_*.deb >/tmp/apt-re.log 2>&1 || { cat /tmp/apt-re.log; fail "reinstall"; }
[ -L /etc/slurm/plugstack.conf.d/dptrain.conf ] || fail "a reinstall did not enable the plugin again"
srun -n1 --dptrain true
"${APT[@]}" purge dptrain-slurm-plugin >/tmp/apt-purge.log 2>&1 || { cat /tmp/apt-purge.log; fail "apt-get purge"; }
[ ! -e /etc/dptrain/plugstack.conf ] || fail "purge left /etc/dptrain/plugstack.conf"
[ ! -e /etc/slurm/plugstack.conf.d/dptrain.conf ] && [ ! -L /etc/slurm/plugstack.conf.d/dptrain.conf ] ||
	fail "purge left the drop-in"
srun -N2 -n2 true || fail "a job does not start after purge"
cd /
cluster stop -d $CL
step "passed"
