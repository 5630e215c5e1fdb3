#!/bin/sh
test_description='dptrain-ranktable: show, validate, convert, from-env; exit codes and messages

Output is checked against python3 json (an independent reader) where it is JSON.'
. "$(dirname "$0")/sharness.sh"

data="$DPTRAIN_SRC_DIR/t/data/ranktable"
# The test must not see the Slurm or torchrun job it may itself run in.
for v in $(env | sed -n 's/^\(SLURM_[A-Z_]*\)=.*/\1/p') WORLD_SIZE LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT; do
	unset "$v"
done

# check.py FILE SCHEMA: an independent check of a table as written (strings where HCCL has
# strings, ranks 0..N-1 once, servers in node order and devices in rank order, dptrain object
# consistent with server_list); prints world size and nodes.
cat >check.py <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
schema = sys.argv[2]
def isint(s): return isinstance(s, str) and s.isdigit()
if schema == "legacy":
    assert t["status"] == "completed" and "server_list" not in t and "dptrain" not in t
    g, = t["group_list"]
    assert t["group_count"] == "1"
    inst = g["instance_list"]
    assert g["instance_count"] == g["device_num"] == str(len(inst))
    ranks = [int(i["rank_id"]) for i in inst]
    servers = list(dict.fromkeys(i["server_id"] for i in inst))
    assert g["server_num"] == str(len(servers))
    for i in inst:
        d, = i["devices"]
        assert isint(d["device_id"]) and isinstance(d["device_ip"], str)
    print(len(ranks), len(servers))
    sys.exit(0)
assert t["version"] == "1.0" and t["status"] == "completed"
assert t["server_count"] == str(len(t["server_list"]))
ranks, node_of = [], {}
for n, s in enumerate(t["server_list"]):
    assert s["host_nic_ip"] == "reserve" and isinstance(s["server_id"], str)
    ids = [int(d["rank_id"]) for d in s["device"]]
    assert ids == sorted(ids), "devices in rank order"
    for d in s["device"]:
        assert isint(d["device_id"]) and isint(d["rank_id"]) and isinstance(d["device_ip"], str)
        node_of[int(d["rank_id"])] = n
    ranks += ids
assert sorted(ranks) == list(range(len(ranks))), "ranks 0..N-1 once"
assert ("dptrain" in t) == (schema == "dptrain")
if schema == "dptrain":
    dp = t["dptrain"]
    assert dp["version"] == 1 and dp["world_size"] == len(ranks)
    assert [r["rank"] for r in dp["ranks"]] == list(range(len(ranks)))
    for r in dp["ranks"]:
        assert r["node_rank"] == node_of[r["rank"]]
print(len(ranks), len(t["server_list"]))
EOF

test_expect_success '--help lists the commands and exits 0' '
	dptrain-ranktable --help >out &&
	grep "^Usage: dptrain-ranktable COMMAND" out &&
	for c in show validate convert from-env; do grep "^  $c" out || return 1; done
'

test_expect_success '--version prints the version' '
	echo "dptrain-ranktable $(cat "$DPTRAIN_SRC_DIR/VERSION")" >expect &&
	dptrain-ranktable --version >out &&
	test_cmp expect out
'

test_expect_success 'usage errors exit 2 with a dptrain-ranktable: message' '
	test_expect_code 2 dptrain-ranktable 2>err &&
	test_cmp - err <<-\EOF &&
	dptrain-ranktable: no command given; try '"'"'dptrain-ranktable --help'"'"'
	EOF
	test_expect_code 2 dptrain-ranktable frobnicate 2>err &&
	grep "^dptrain-ranktable: unknown command .frobnicate.; try" err &&
	test_expect_code 2 dptrain-ranktable --frobnicate 2>err &&
	grep "^dptrain-ranktable: unknown option .--frobnicate." err &&
	test_expect_code 2 dptrain-ranktable show 2>err &&
	grep "^dptrain-ranktable: show takes one FILE" err &&
	test_expect_code 2 dptrain-ranktable show --bogus x 2>err &&
	grep "^dptrain-ranktable: show: unknown option .--bogus." err &&
	test_expect_code 2 dptrain-ranktable show --to hccl x 2>err &&
	grep "^dptrain-ranktable: show does not take --to" err &&
	test_expect_code 2 dptrain-ranktable convert "$data/hccl_2x8.json" 2>err &&
	grep "^dptrain-ranktable: convert needs --to dptrain|hccl|legacy" err &&
	test_expect_code 2 dptrain-ranktable convert --to yaml "$data/hccl_2x8.json" 2>err &&
	grep "^dptrain-ranktable: convert: unknown schema .yaml. (dptrain, hccl or legacy)" err &&
	test_expect_code 2 dptrain-ranktable convert --to 2>err &&
	grep "^dptrain-ranktable: convert: option .--to. needs a value" err &&
	test_expect_code 2 dptrain-ranktable validate 2>err &&
	grep "^dptrain-ranktable: validate takes at least one FILE" err &&
	test_expect_code 2 dptrain-ranktable from-env --source pmix 2>err &&
	grep "^dptrain-ranktable: from-env: unknown source .pmix. (auto, slurm or torchrun)" err
'

test_expect_success 'validate: good tables of every schema' '
	dptrain-ranktable validate "$data/hccl_2x8.json" "$data/legacy_1x8.json" \
		"$data/legacy_2x4_numbers.json" "$data/dptrain_2x2.json" >out &&
	cat >expect <<-EOF &&
	$data/hccl_2x8.json: ok: 16 ranks on 2 nodes (hccl)
	$data/legacy_1x8.json: ok: 8 ranks on 1 node (legacy)
	$data/legacy_2x4_numbers.json: ok: 8 ranks on 2 nodes (legacy)
	$data/dptrain_2x2.json: ok: 4 ranks on 2 nodes (dptrain)
	EOF
	test_cmp expect out
'

test_expect_success 'validate: a bad table exits 1 with file, JSON path and reason' '
	sed "s/\"rank_id\": \"9\"/\"rank_id\": \"3\"/" "$data/hccl_2x8.json" >dup.json &&
	test_expect_code 1 dptrain-ranktable validate dup.json >out 2>err &&
	test_must_be_empty out &&
	echo "dptrain-ranktable: dup.json: server_list[1].device[1].rank_id: rank 3 appears twice (also at server_list[0].device[3].rank_id)" >expect &&
	test_cmp expect err
'

test_expect_success 'validate: the trailing comma of the MindSpore docs is a JSON error with line and column' '
	test_expect_code 1 dptrain-ranktable validate "$data/legacy_trailing_comma.json" 2>err &&
	echo "dptrain-ranktable: $data/legacy_trailing_comma.json: line 21 column 13: JSON parse error: unexpected token near '"'"']'"'"' (JSON allows no comma before '"'"']'"'"')" >expect &&
	test_cmp expect err
'

test_expect_success 'validate: one bad file among good ones still exits 1, the good ones are reported' '
	test_expect_code 1 dptrain-ranktable validate dup.json "$data/dptrain_2x2.json" >out 2>err &&
	grep "dptrain_2x2.json: ok: 4 ranks on 2 nodes (dptrain)" out &&
	grep "^dptrain-ranktable: dup.json: " err
'

test_expect_success 'show: a missing file exits 1 and says why' '
	test_expect_code 1 dptrain-ranktable show nosuch.json 2>err &&
	echo "dptrain-ranktable: nosuch.json: cannot open: No such file or directory" >expect &&
	test_cmp expect err
'

test_expect_success 'show: the dptrain table, rank by rank, then master, size, nodes, schema' '
	dptrain-ranktable show "$data/dptrain_2x2.json" >out &&
	cat >expect <<-\EOF &&
	rank  node  host   local rank  device  gpu  address
	   0     0  gpu01           0       0    0  10.1.0.1
	   1     0  gpu01           1       1    1  10.1.0.1
	   2     1  gpu02           0       0    0  fd00::2
	   3     1  gpu02           1       1    1  fd00::2

	master:     10.1.0.1:29500
	world size: 4
	nodes:      2
	job:        4242
	step:       3
	schema:     dptrain
	EOF
	test_cmp expect out
'

test_expect_success 'show: an hccl_tools.py table says the master is unknown' '
	dptrain-ranktable show "$data/hccl_2x8.json" >out &&
	grep "^   9     1  10.155.111.141           1       1    -  192.98.93.101$" out &&
	grep "^master:     unknown (the hccl schema does not carry it)$" out &&
	grep "^world size: 16$" out && grep "^nodes:      2$" out && grep "^schema:     hccl$" out
'

test_expect_success 'show: reads standard input as -' '
	dptrain-ranktable show - <"$data/legacy_1x8.json" >out &&
	grep "^schema:     legacy$" out && grep "^world size: 8$" out
'

test_expect_success 'convert --to hccl: what hccl_tools.py writes, no dptrain object' '
	dptrain-ranktable convert --to hccl "$data/dptrain_2x2.json" >hccl.json &&
	echo "4 2" >expect &&
	/usr/bin/python3 check.py hccl.json hccl >out &&
	test_cmp expect out &&
	test "$(dp_json hccl.json "d[\"server_list\"][1][\"device\"][0]")" = \
		"{'"'"'device_id'"'"': '"'"'0'"'"', '"'"'device_ip'"'"': '"'"'fd00::2'"'"', '"'"'rank_id'"'"': '"'"'2'"'"'}" &&
	dptrain-ranktable validate hccl.json
'

test_expect_success 'convert --to legacy -o OUT: written atomically, readable by python, nothing on stdout' '
	dptrain-ranktable convert --to legacy "$data/hccl_2x8.json" -o legacy.json >out &&
	test_must_be_empty out &&
	echo "16 2" >expect &&
	/usr/bin/python3 check.py legacy.json legacy >out &&
	test_cmp expect out &&
	test "$(stat -c %a legacy.json)" = 644 &&
	test "$(ls -a | grep -c "^\.legacy\.json")" = 0 &&
	test "$(dp_json legacy.json "d[\"group_list\"][0][\"instance_list\"][9][\"devices\"][0][\"device_ip\"]")" = 192.98.93.101 &&
	dptrain-ranktable validate legacy.json >out &&
	grep "legacy.json: ok: 16 ranks on 2 nodes (legacy)" out
'

test_expect_success 'convert: legacy to dptrain and back to hccl keeps every rank' '
	dptrain-ranktable convert --to dptrain legacy.json -o back.json &&
	/usr/bin/python3 check.py back.json dptrain &&
	test "$(dp_json back.json "d[\"dptrain\"][\"ranks\"][9][\"host\"]")" = 10.155.111.141 &&
	test "$(dp_json back.json "\"master_addr\" in d[\"dptrain\"]")" = False &&
	dptrain-ranktable convert --to hccl back.json >again.json &&
	/usr/bin/python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); sys.exit(a!=b)" \
		"$data/hccl_2x8.json" again.json
'

test_expect_success 'convert: a table with two nodes on one address cannot be legacy' '
	cat >shared.json <<-\EOF &&
	{"version": "1.0", "server_count": "2", "server_list": [
	 {"server_id": "127.0.0.1", "device": [{"device_id": "0", "device_ip": "127.0.0.1", "rank_id": "0"}]},
	 {"server_id": "127.0.0.1", "device": [{"device_id": "0", "device_ip": "127.0.0.1", "rank_id": "1"}]}],
	 "status": "completed"}
	EOF
	dptrain-ranktable validate shared.json &&
	test_expect_code 1 dptrain-ranktable convert --to legacy shared.json >out 2>err &&
	test_must_be_empty out &&
	grep "^dptrain-ranktable: cannot write the legacy schema: two nodes share the address 127.0.0.1" err
'

test_expect_success 'from-env: a table from a synthetic Slurm step environment' '
	SLURM_STEP_NODELIST="localhost,127.0.0.[2-3]" SLURM_STEP_TASKS_PER_NODE="2(x2),1" \
	SLURM_STEP_NUM_TASKS=5 SLURM_JOB_NODELIST=other[1-9] SLURM_JOB_ID=12 SLURM_STEP_ID=0 \
		dptrain-ranktable from-env -o slurm.json 2>err &&
	echo "dptrain-ranktable: from-env: using Slurm variables (SLURM_STEP_NODELIST=localhost,127.0.0.[2-3], SLURM_STEP_TASKS_PER_NODE=2(x2),1, SLURM_JOB_ID=12, SLURM_STEP_ID=0)" >expect &&
	test_cmp expect err &&
	echo "5 3" >expect &&
	/usr/bin/python3 check.py slurm.json dptrain >out &&
	test_cmp expect out &&
	/usr/bin/python3 - slurm.json <<-\EOF
	import json, sys
	t = json.load(open(sys.argv[1]))
	dp = t["dptrain"]
	assert [s["server_id"] for s in t["server_list"]] == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
	assert [r["host"] for r in dp["ranks"]] == ["localhost"] * 2 + ["127.0.0.2"] * 2 + ["127.0.0.3"]
	assert [r["node_rank"] for r in dp["ranks"]] == [0, 0, 1, 1, 2]
	assert [r["local_rank"] for r in dp["ranks"]] == [0, 1, 0, 1, 0]
	assert [r["gpu"] for r in dp["ranks"]] == [-1] * 5
	assert [d["device_id"] for s in t["server_list"] for d in s["device"]] == ["0", "1", "0", "1", "0"]
	assert dp["world_size"] == 5 and dp["job_id"] == "12" and dp["step_id"] == "0"
	assert dp["master_addr"] == "127.0.0.1"
	assert dp["master_port"] == 61000 + (12 * 64 + 0) % 4500, dp["master_port"]
	EOF
'

test_expect_success 'from-env: MASTER_ADDR and MASTER_PORT win; --to hccl on stdout' '
	SLURM_STEP_NODELIST="127.0.0.[2-3]" SLURM_STEP_TASKS_PER_NODE="1(x2)" SLURM_JOB_ID=5 \
	MASTER_ADDR=head.example MASTER_PORT=4000 \
		dptrain-ranktable from-env >mine.json 2>err &&
	test "$(dp_json mine.json "d[\"dptrain\"][\"master_addr\"]")" = head.example &&
	test "$(dp_json mine.json "d[\"dptrain\"][\"master_port\"]")" = 4000 &&
	SLURM_STEP_NODELIST="127.0.0.[2-3]" SLURM_STEP_TASKS_PER_NODE="1(x2)" \
		dptrain-ranktable from-env --to hccl >h.json 2>err &&
	/usr/bin/python3 check.py h.json hccl
'

test_expect_success 'from-env: torchrun-style variables give a single-host table' '
	WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=29501 dptrain-ranktable from-env >tr.json 2>err &&
	grep "^dptrain-ranktable: from-env: using torchrun-style variables (WORLD_SIZE=3, MASTER_ADDR=127.0.0.1, MASTER_PORT=29501) on this host$" err &&
	echo "3 1" >expect &&
	/usr/bin/python3 check.py tr.json dptrain >out &&
	test_cmp expect out &&
	test "$(dp_json tr.json "d[\"dptrain\"][\"ranks\"][2][\"host\"]")" = "$(hostname)" &&
	test "$(dp_json tr.json "d[\"dptrain\"][\"master_port\"]")" = 29501
'

test_expect_success 'from-env: --source picks torchrun even inside Slurm' '
	SLURM_JOB_NODELIST=n1 SLURM_TASKS_PER_NODE=1 WORLD_SIZE=2 \
		dptrain-ranktable from-env --source torchrun >tr2.json 2>err &&
	grep "using torchrun-style variables (WORLD_SIZE=2" err
'

test_expect_success 'from-env: errors exit 1 and name the variable or host' '
	test_expect_code 1 dptrain-ranktable from-env >out 2>err &&
	test_must_be_empty out &&
	echo "dptrain-ranktable: from-env: neither Slurm (SLURM_STEP_NODELIST, SLURM_JOB_NODELIST) nor torchrun-style variables (WORLD_SIZE) are set" >expect &&
	test_cmp expect err &&
	SLURM_STEP_NODELIST="localhost,nosuchhost.invalid" SLURM_STEP_TASKS_PER_NODE="1(x2)" \
		test_expect_code 1 dptrain-ranktable from-env 2>err &&
	grep "^dptrain-ranktable: from-env: SLURM_STEP_NODELIST, node 1: cannot resolve host \"nosuchhost.invalid\": " err &&
	SLURM_STEP_NODELIST="n[1-2]" SLURM_STEP_TASKS_PER_NODE="2(x3)" \
		test_expect_code 1 dptrain-ranktable from-env 2>err &&
	echo "dptrain-ranktable: from-env: SLURM_STEP_NODELIST names 2 nodes but SLURM_STEP_TASKS_PER_NODE=\"2(x3)\" counts tasks for 3" >expect &&
	test_cmp expect err &&
	SLURM_STEP_NODELIST="n[2-1]" SLURM_STEP_TASKS_PER_NODE="2" \
		test_expect_code 1 dptrain-ranktable from-env 2>err &&
	echo "dptrain-ranktable: from-env: SLURM_STEP_NODELIST: bad hostlist \"n[2-1]\": range 2-1 goes backwards" >expect &&
	test_cmp expect err &&
	test_expect_code 2 dptrain-ranktable from-env extra.json 2>err &&
	grep "^dptrain-ranktable: from-env takes no FILE (use -o OUT)" err
'

test_expect_success 'from-env -o into a missing directory fails and names it' '
	WORLD_SIZE=1 test_expect_code 1 dptrain-ranktable from-env -o nodir/t.json 2>err &&
	grep "^dptrain-ranktable: nodir/t.json: cannot create a temporary file in nodir: No such file or directory$" err
'

test_done
