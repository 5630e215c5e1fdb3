# 20-ranks.sh — sourced by sharness for every shell test: a probe command for job steps and
# the check of what each rank received against Slurm's own variables and the rank table.

# dp_write_probe FILE: a task command that prints one 'probe' line of what the rank received
# and what Slurm says, for dp_check_ranks.
dp_write_probe() {
	cat >"$1" <<-\EOF &&
	#!/bin/sh
	echo "probe rank=$RANK procid=$SLURM_PROCID world=$WORLD_SIZE ntasks=$SLURM_NTASKS local=$LOCAL_RANK localid=$SLURM_LOCALID node=$NODE_RANK nodeid=$SLURM_NODEID group=$GROUP_RANK lws=$LOCAL_WORLD_SIZE host=$SLURMD_NODENAME master=$MASTER_ADDR:$MASTER_PORT source=$DPTRAIN_SOURCE gds=$PMIX_MCA_gds table=$RANK_TABLE_FILE"
	EOF
	chmod +x "$1"
}

# dp_check_ranks DIR N SOURCE: every rank's probe line (device<R>/train.log) against Slurm's
# variables, and DIR/rank_table.json against both (python as an independent reader).
dp_check_ranks() {
	/usr/bin/python3 - "$@" <<-\EOF
	import json, sys
	d, n, source = sys.argv[1], int(sys.argv[2]), sys.argv[3]
	def fail(msg):
	    print("check: " + msg, file=sys.stderr)
	    sys.exit(1)
	probes = []
	for r in range(n):
	    lines = [l for l in open("%s/device%d/train.log" % (d, r)) if l.startswith("probe ")]
	    if not lines:
	        fail("no probe line from rank %d" % r)
	    # the table path may hold blanks (sharness's trash directory): it comes last
	    head, table = lines[-1].rstrip("\n").split(" table=", 1)
	    p = dict(kv.split("=", 1) for kv in head.split()[1:])
	    p["table"] = table
	    probes.append(p)
	hosts = [p["host"] for p in probes]
	for r, p in enumerate(probes):
	    for ours, slurms in (("rank", "procid"), ("world", "ntasks"), ("local", "localid"),
	                         ("node", "nodeid"), ("node", "group")):
	        if p[ours] != p[slurms]:
	            fail("rank %d: %s=%s but %s=%s" % (r, ours, p[ours], slurms, p[slurms]))
	    if int(p["rank"]) != r or int(p["world"]) != n:
	        fail("rank %d: rank/world %s/%s" % (r, p["rank"], p["world"]))
	    if int(p["lws"]) != hosts.count(p["host"]):
	        fail("rank %d: LOCAL_WORLD_SIZE %s, %d ranks on %s" % (r, p["lws"], hosts.count(p["host"]), p["host"]))
	    if p["source"] != source:
	        fail("rank %d: source %s, expected %s" % (r, p["source"], source))
	    if p["master"] != probes[0]["master"]:
	        fail("rank %d: master %s, rank 0 has %s" % (r, p["master"], probes[0]["master"]))
	    if p["table"] != probes[0]["table"] or not p["table"].endswith("/rank_table.json"):
	        fail("rank %d: RANK_TABLE_FILE %s" % (r, p["table"]))
	t = json.load(open(probes[0]["table"]))
	x = t["dptrain"]
	if x["world_size"] != n or "%s:%s" % (x["master_addr"], x["master_port"]) != probes[0]["master"]:
	    fail("rank table world/master: %s %s:%s" % (x["world_size"], x["master_addr"], x["master_port"]))
	if int(t["server_count"]) != len(set(hosts)) or len(t["server_list"]) != len(set(hosts)):
	    fail("rank table has %s servers for hosts %s" % (t["server_count"], hosts))
	if sorted(int(dev["rank_id"]) for s in t["server_list"] for dev in s["device"]) != list(range(n)):
	    fail("rank table rank_ids are not 0..%d" % (n - 1))
	for r, p in enumerate(probes):
	    e = x["ranks"][r]
	    if e["rank"] != r or e["host"] != p["host"] or str(e["node_rank"]) != p["nodeid"] or str(e["local_rank"]) != p["localid"]:
	        fail("rank table entry %d %s does not match Slurm's %s" % (r, e, p))
	print("check: %d ranks on %s agree with Slurm" % (n, sorted(set(hosts))))
	EOF
}
